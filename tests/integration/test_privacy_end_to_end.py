"""Privacy end to end: simulated users, half of them in privacy mode, drive the real serving gateway and
the real telemetry SDK to a real broker; the events are read back from Kafka, turned into reward rows by the reward
job's computation, and selected for training by the trainer's data selection. Proven:

  * Kafka: every payload of a privacy-mode user has empty content fields (followup text, tool error messages,
    trajectory token ids and log-probs) -- even though their editor (a deliberately leaky client) handed content
    to the SDK -- and no planted content string appears anywhere in their payloads;
  * secrets planted in follow-ups and tool errors (every user) never appear in any payload (the SDK redacts), and
    secrets planted in prompts never appear as trajectory token ids (the gateway logs such requests without them);
  * the reward table has no row for a privacy-mode user's request and no planted string or secret;
  * the training selection (what reaches a batch) holds only non-private requests without secrets, and refuses a
    table holding a privacy-mode row;
  * the logs of all of it (SDK, serving, simulator, reward computation) hold no planted string or secret.

The serving engine is a byte-level stand-in (prompt token ids are the UTF-8 bytes of the rendered chat, so a leak
would be readable in them); everything under test is the real code.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from datetime import timedelta

import polars as pl
import pytest

from infra.offline_cycle import reward_rows
from instrumentation import KafkaTransport, TelemetryClient
from instrumentation.simulator.clock import StepClock
from instrumentation.simulator.config import SimulatorConfig
from codetasks.policy import PolicyRequest, ReferencePolicy
from instrumentation.simulator.population import Population
from pipelines.rewards.spec import RewardSpec
from schemas import parse_event
from schemas.chat_format import render
from schemas.events import FollowupMessage, ToolCallResult
from serving.app import Gateway
from serving.arms import Fleet
from serving.config import ServingConfig
from serving.protocol import Generation, Sampling
from tests.integration.test_sdk_kafka import consume, partitions_of, sdk_config
from tests.unit.serving.fakes import FakeRegistry
from trainer.selection import SelectionError, select_rows

pytestmark = pytest.mark.integration

PLANTED = "PRIVATE-CONTENT-7f3a9c"          # what a leaky editor puts into privacy users' events
SECRETS = ("ghp_R8tYv2LqX9mN4bK7wE1sD3fG6hJ0kL5pQzA2",                       # GitHub token
           "sk-ant-api03-" + "Zx9Qw8Er7Ty6Ui5Op4As3Df2Gh1Jk0Lz" * 2 + "AA",  # Anthropic key
           "xoxb-2048-4096-q8W7e6R5t4Y3u2I1o0P9a8S7")                         # Slack bot token


class ByteEngine:
    """The serving engine's contract, byte-level: prompt ids are the rendered chat's UTF-8 bytes; it answers with
    the text set in `script` (the reference policy's answer), one byte per token."""

    def __init__(self, version: str, folder, script: dict):
        self.version, self.folder, self.script = version, folder, script
        self.sampling, self.max_model_len = Sampling(temperature=1.0), 1 << 20

    def prompt_ids(self, messages, tools=None):
        return list(render(messages).encode())

    async def sample(self, prompt_ids, spec, request_id=""):
        ids = list(self.script["text"].encode())[:spec.max_tokens]
        return [Generation(token_ids=ids, logprobs=[-0.5] * len(ids), tokens=[chr(i) for i in ids],
                           text=bytes(ids).decode(errors="replace"), finish_reason="stop", index=i)
                for i in range(spec.n)]

    def shutdown(self):
        pass


class GatewayPolicy:
    """The simulator's Policy over the real gateway: the reference policy decides the answer, the gateway serves
    it (routing, parsing, trajectory logging). Every third request of a user carries a secret in its prompt."""

    def __init__(self, gateway: Gateway, script: dict, loop):
        self.ref, self.gw, self.script, self.loop = ReferencePolicy(seed=5), gateway, script, loop
        self.secret_requests: set[str] = set()
        self._n = 0

    def respond(self, request: PolicyRequest):
        reply = self.ref.respond(request)
        self._n += 1
        messages = [dict(m) for m in request.messages]
        if self._n % 3 == 0:
            messages[-1]["content"] += f"\n(my deploy token is {SECRETS[self._n % len(SECRETS)]})"
            self.secret_requests.add(reply.request_id)
        self.script["text"] = reply.text
        m = request.metadata
        body = {"user": request.user, "messages": messages, "max_tokens": 4096,
                "metadata": {**{k: m[k] for k in ("session_id", "workspace_id", "org_id", "event_time",
                                                  "client_version")}, "privacy_mode": m["privacy_mode"],
                             "request_id": reply.request_id}}
        answer = self.loop.run_until_complete(self.gw.chat(body))
        return dataclasses.replace(reply, arm=answer["arm"], policy_version=answer["policy_version"])


class LeakyEditor:
    """An editor that gets privacy mode wrong: it puts content into privacy users' events (the SDK must strip it)
    and pastes secrets into every user's follow-ups and tool errors (the SDK must redact them)."""

    def __init__(self, sdk: TelemetryClient, private_users: set[str]):
        self.sdk, self.private = sdk, private_users
        self.event_ids: set[str] = set()
        self.planted = 0  # content handed to the SDK for privacy users
        self._n = 0

    def emit(self, event):
        self._n += 1
        secret = SECRETS[self._n % len(SECRETS)]
        if isinstance(event, FollowupMessage):
            text = f"{PLANTED} {event.text}" if event.user_id in self.private else event.text
            self.planted += event.user_id in self.private
            event = event.model_copy(update={"text": f"{text} my key is {secret}"})
        elif isinstance(event, ToolCallResult) and not event.ok:
            event = event.model_copy(update={"error_message": f"{PLANTED} failed with token={secret}"})
            self.planted += event.user_id in self.private
        self.event_ids.add(event.event_id)
        return self.sdk.emit(event)


def _decoded(ids: list[int]) -> str:
    return bytes(i for i in ids if i < 256).decode(errors="replace")


def test_privacy_mode_users_content_and_planted_secrets_reach_no_payload_row_batch_or_log(stack, tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    bootstrap = stack.cfg.kafka.bootstrap()
    cfg = sdk_config(tmp_path)
    editor_sdk = TelemetryClient(KafkaTransport(bootstrap), cfg, tmp_path / "spool-editor", name="editor")
    serving_sdk = TelemetryClient(KafkaTransport(bootstrap), cfg, tmp_path / "spool-serving", name="serving")
    trajectories: list = []

    def log_trajectory(t):
        trajectories.append(t)
        return serving_sdk.emit(t)

    # the simulated clock starts on 2026-11-01: event times that far back are the run's own, not a client's skew
    scfg = ServingConfig(max_model_len=131072, max_tokens=4096, max_event_skew_past_s=3650 * 86400)
    script: dict = {"text": ""}
    gw = Gateway(scfg, Fleet(scfg, FakeRegistry({"control": "1", "champion": "1"}),
                             lambda v, f: ByteEngine(v, f, script)), "rtrl-policy", emit=log_trajectory)
    loop = asyncio.new_event_loop()
    loop.run_until_complete(gw.start(poll=False))
    policy = GatewayPolicy(gw, script, loop)
    sim = SimulatorConfig(users=10, privacy_rate=0.5, seed=11, files_per_workspace=3)
    clock = StepClock(latency_s=2.0)
    probe = Population(sim, policy, None, clock)  # who is private is decided per user by the seed
    private = {u.user_id for u in probe.users if u.privacy}
    editor = LeakyEditor(editor_sdk, private)
    pop = Population(sim, policy, editor, clock)
    assert {u.user_id for u in pop.users if u.privacy} == private and 0 < len(private) < sim.users
    pop.run(clock.start + timedelta(hours=3))
    loop.run_until_complete(gw.close())
    loop.close()
    editor_sdk.close(timeout=30)
    serving_sdk.close(timeout=30)
    for sdk in (editor_sdk, serving_sdk):
        assert sdk.stats()["dropped"] == {} and sdk.stats()["sent"] == sdk.stats()["enqueued"]

    # -- Kafka payloads ----------------------------------------------------------------------------------------
    wanted = editor.event_ids | {t.event_id for t in trajectories}
    payloads = consume(bootstrap, partitions_of(stack), wanted, deadline_s=60)
    assert {p["event_id"] for p in payloads} == wanted
    private_requests = {t.request_id for t in trajectories if t.user_id in private}
    secret_requests = policy.secret_requests
    planted_followups = 0
    for p in payloads:
        raw = repr(p)
        assert not any(s in raw for s in SECRETS), f"a secret reached Kafka: {raw[:300]}"
        event = parse_event({k: v for k, v in p.items() if not k.startswith("_")})
        if p["user_id"] in private:
            assert event.privacy_mode and PLANTED not in raw
            assert all(not getattr(event, f) for f in event.CONTENT_FIELDS), f"content of a private user: {raw[:300]}"
        elif event.event_type == "followup_message":
            planted_followups += "[REDACTED" in event.text
        if event.event_type == "trajectory":
            tokens = _decoded(event.prompt_token_ids) + _decoded(event.completion_token_ids)
            assert not any(s in tokens for s in SECRETS)
            if event.request_id in secret_requests:
                assert event.prompt_token_ids == []
    assert planted_followups > 0 and editor.planted > 0  # the content and secrets really were handed to the SDK
    assert private_requests and secret_requests - private_requests

    # -- the reward table ----------------------------------------------------------------------------------------
    events = [parse_event({k: v for k, v in p.items() if not k.startswith("_")}) for p in payloads]
    rows = reward_rows(events, RewardSpec())
    assert rows.height > 0
    assert not set(rows["request_id"]) & private_requests
    assert not set(rows["user_id"]) & private
    table_text = repr(rows.to_dicts())
    assert PLANTED not in table_text and not any(s in table_text for s in SECRETS)
    for col in ("prompt_token_ids", "completion_token_ids"):
        assert not any(any(s in _decoded(ids) for s in SECRETS) for ids in rows[col].to_list())

    # -- what reaches a training batch -------------------------------------------------------------------------------
    trainable = rows.filter(pl.col("prompt_token_ids").list.len() > 0)
    selection = select_rows(trainable, champion="1", ancestors=[], staleness=1, min_rows=1)
    batch = selection.rows
    assert batch.height > 0
    assert not set(batch["request_id"]) & (private_requests | secret_requests)
    with pytest.raises(SelectionError, match="privacy"):
        select_rows(rows.vstack(_private_row(rows)), champion="1", ancestors=[], staleness=1, min_rows=1)

    # -- logs ----------------------------------------------------------------------------------------------------------
    logs = caplog.text
    assert PLANTED not in logs and not any(s in logs for s in SECRETS)


def _private_row(rows: pl.DataFrame) -> pl.DataFrame:
    """A row as a privacy-mode request would have it (no token ids), to prove selection refuses such a table."""
    one = rows.head(1)
    return one.with_columns(pl.lit([], dtype=one["prompt_token_ids"].dtype).alias("prompt_token_ids"),
                            pl.lit("private-request").alias("request_id"))
