"""An offline cycle: a checkpoint serves the simulated users in-process, their events become reward rows.

    policy = LocalPolicy(folder, version="1")
    events = simulate_traffic(policy, SimulatorConfig(...), hours=3)      # users' events + the trajectories
    rows = reward_rows(events, RewardSpec())                               # the reward spec, one pass

The same path as production minus the processes: `LocalPolicy` samples like serving does (temperature 1,
untruncated, the chat template of the checkpoint, the tool-call protocol's strict parser) and logs the
trajectory serving would log; the users are the simulator's (deterministic clock); the rows come from the reward
job's own computation (`assemble_rewards`). Used by the trainer's policy-improvement test and experiments; the
real loop (vLLM serving, Kafka, the Beam job) is `rtrl demo`.
"""

from __future__ import annotations

import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import polars as pl

from codetasks.policy import PolicyReply, PolicyRequest
from schemas.chat_format import to_text_messages
from schemas.events import Event, Trajectory
from schemas.tool_protocol import parse_response

NAMESPACE = uuid.UUID("3f0c2a6e-0d4b-4e57-9a43-6f1b8e2d7c15")


class LocalPolicy:
    """The simulator's Policy protocol over a Hugging Face checkpoint, sampled on this process (a Llama checkpoint
    with `trainer.decode.LlamaDecoder`, any other with transformers' forward)."""

    def __init__(self, folder: str | Path, version: str, arm: str = "treatment", seed: int = 0,
                 max_new_tokens: int = 192, annotate: bool = False):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from trainer.decode import LlamaDecoder

        self.tokenizer = AutoTokenizer.from_pretrained(folder)
        self.model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
        self.version, self.arm, self.max_new_tokens = version, arm, max_new_tokens
        self.generator = torch.Generator().manual_seed(seed)
        self.decoder = LlamaDecoder(self.model) if LlamaDecoder.supports(self.model) else None
        self.trajectories: list[Trajectory] = []
        # with `annotate`: request_id -> what the simulator knows and the reward table does not (offline_ab.py)
        self.annotate, self.annotations = annotate, {}
        self._n = 0

    def _logits(self, prompt_ids: list[int]):
        """The next-token logits after the prompt, then after each token sent to the generator."""
        import torch

        if self.decoder is not None:   # the same arithmetic as the model's forward, a fraction of its overhead
            tok = yield self.decoder.prefill([prompt_ids])[0]
            while True:
                tok = yield self.decoder.step(torch.tensor([tok]))[0]
        ids, past = torch.tensor([prompt_ids]), None
        with torch.no_grad():
            while True:
                res = self.model(input_ids=ids, past_key_values=past, use_cache=True)
                past = res.past_key_values
                tok = yield res.logits[0, -1]
                ids = torch.tensor([[tok]])

    def _sample(self, prompt_ids: list[int]) -> tuple[list[int], list[float]]:
        import torch

        logps: list[float] = []
        out: list[int] = []
        stream = self._logits(prompt_ids)
        logits = next(stream)
        with torch.no_grad():
            for _ in range(self.max_new_tokens):
                logp = torch.log_softmax(logits.float(), -1)
                tok = int(torch.multinomial(logp.exp(), 1, generator=self.generator))
                out.append(tok)
                logps.append(float(logp[tok]))
                if tok == self.tokenizer.eos_token_id or len(out) == self.max_new_tokens:
                    break
                logits = stream.send(tok)
        return out, logps

    def respond(self, request: PolicyRequest) -> PolicyReply:
        t0 = time.perf_counter()
        prompt = self.tokenizer.apply_chat_template(to_text_messages(request.messages), add_generation_prompt=True,
                                                    tokenize=False)
        prompt_ids = self.tokenizer(prompt, add_special_tokens=False)["input_ids"]
        completion, logps = self._sample(prompt_ids)
        text = self.tokenizer.decode(completion, skip_special_tokens=True)
        parsed = parse_response(text)
        self._n += 1
        request_id = str(uuid.uuid5(NAMESPACE, f"{self.version}:{request.user}:{self._n}"))
        m = request.metadata
        private = bool(m.get("privacy_mode"))
        self.trajectories.append(Trajectory(
            event_id=str(uuid.uuid5(NAMESPACE, "trajectory:" + request_id)), event_time=m["event_time"],
            user_id=request.user, org_id=m["org_id"], workspace_id=m["workspace_id"], session_id=m["session_id"],
            privacy_mode=private, client_version="offline-cycle", request_id=request_id,
            policy_version=self.version, arm=self.arm, prompt_token_ids=[] if private else list(prompt_ids),
            completion_token_ids=[] if private else completion, behaviour_logprobs=[] if private else logps,
            tool_calls=parsed.records, latency_ms=(time.perf_counter() - t0) * 1000, prompt_tokens=len(prompt_ids),
            completion_tokens=len(completion), response_kind=parsed.kind))
        if self.annotate:
            task = request.task
            self.annotations[request_id] = {
                "turn": 1 + sum(msg["role"] == "assistant" for msg in request.messages),
                "task_kind": getattr(task, "kind", None), "ambiguous": getattr(task, "ambiguous", None)}
        return PolicyReply(request_id, parsed, text, self.version, self.arm, len(completion), len(prompt_ids))


def simulate_traffic(policy: LocalPolicy, cfg, hours: float) -> list[Event]:
    """Run the simulated population against `policy` for `hours` of simulated time (deterministic clock); the
    users' events and the policy's trajectories, in event-time order."""
    from instrumentation.simulator.clock import StepClock
    from instrumentation.simulator.population import Population
    from instrumentation.simulator.user import ListSink

    clock = StepClock(latency_s=cfg.deterministic_latency_s)
    sink = ListSink()
    Population(cfg, policy, sink, clock).run(clock.start + timedelta(hours=hours))
    return sorted([*sink.events, *policy.trajectories], key=lambda e: (e.event_time, e.event_id))


def reward_rows(events: list[Event], spec, as_of: datetime | None = None) -> pl.DataFrame:
    """The reward rows of every request mature by `as_of` (default: all of them), as the reward job computes."""
    from pipelines.rewards.assemble import assemble_rewards
    from pipelines.rewards.classifiers import get_classifier
    from pipelines.rewards.frames import frames_from_events

    end = as_of or datetime(9000, 1, 1, tzinfo=timezone.utc)
    return assemble_rewards(frames_from_events(events), spec, get_classifier(spec.classifier), end).rows
