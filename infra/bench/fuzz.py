"""`rtrl bench fuzz --json`: hostile input against the ingest collector and every parser.

Targets (each case: one generated input; hypothesis drives the generation, schemathesis the collector's OpenAPI):

    collector_openapi   schemathesis, positive and negative cases from `GET /openapi.json`, against the ASGI app
    collector_hostile   raw requests: hostile bodies (`fuzz_cases.hostile_wire` events), hostile headers (auth
                        schemes, content types, lying Content-Length), signed requests replayed
    wire                `schemas.parse_wire` (what the archiver and the reward job read from Kafka)
    reward_parse        `pipelines.rewards.parse.ParseEventsFn` (main output or the dead-letter output)
    archive_messages    `pipelines.archive.batch.Batch` over partitions of hostile messages, tombstones and replays,
                        then the Parquet tables the archiver writes (events and dead letters)
    tool_protocol       `schemas.tool_protocol.parse_response` and `from_openai_tool_calls`
    atheris_*           coverage-guided byte fuzzing (atheris/libFuzzer) of parse_wire and parse_response, in a
                        child process (libFuzzer owns its process)

The oracles: an input is either accepted -- and then it is a valid event that survives the wire and the Arrow
(Parquet) schema unchanged, carries no content in privacy mode, and for the collector was produced exactly once --
or it is rejected or dead-lettered with a reason (counted by reason). Anything else is a crash: an exception other
than the documented rejection, a 5xx, an answer the OpenAPI document does not describe, a malformed event passed
on. `crashes` must be 0.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from hypothesis import HealthCheck, Phase, given, seed as hseed, settings
from hypothesis import strategies as st

from infra.bench import fuzz_cases as fc

DEFAULT_CASES = {"collector_openapi": 2_000, "collector_hostile": 3_000, "wire": 5_000, "reward_parse": 3_000,
                 "archive_messages": 1_500, "tool_protocol": 5_000, "atheris_wire": 50_000,
                 "atheris_tool_protocol": 50_000}
CI_CASES = {"collector_openapi": 60, "collector_hostile": 150, "wire": 300, "reward_parse": 200,
            "archive_messages": 60, "tool_protocol": 250, "atheris_wire": 2_000, "atheris_tool_protocol": 2_000}


class Violation(AssertionError):
    """An oracle failed: counted as a crash."""


@dataclass
class TargetResult:
    cases: int = 0
    accepted: int = 0
    crashes: int = 0
    rejected: Counter = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)  # the first few crashes: input and traceback
    seconds: float = 0.0

    def reject(self, reason: str) -> None:
        self.rejected[reason] += 1

    def crash(self, case: Any, exc: BaseException) -> None:
        self.crashes += 1
        if len(self.examples) < 5:
            shown = repr(case)
            self.examples.append(f"{shown[:600]}{'...' if len(shown) > 600 else ''}\n"
                                 + "".join(traceback.format_exception(exc))[-1500:])

    def as_dict(self) -> dict:
        return {"cases": self.cases, "accepted": self.accepted, "crashes": self.crashes,
                "rejected": dict(sorted(self.rejected.items())), "seconds": round(self.seconds, 2),
                **({"crash_examples": self.examples} if self.examples else {})}


def drive(strategy: st.SearchStrategy, check: Callable[[Any, TargetResult], None], n: int, seed: int,
          result: TargetResult | None = None) -> TargetResult:
    """Generate `n` cases from `strategy` (hypothesis, seeded) and run `check` on each; a failing check is a
    crash of that case (the run goes on)."""
    result = result or TargetResult()
    t0 = time.perf_counter()

    @hseed(seed)
    @settings(max_examples=n, deadline=None, database=None, phases=[Phase.generate], derandomize=False,
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def run(case):
        result.cases += 1
        try:
            check(case, result)
        except Exception as e:  # noqa: BLE001 -- any exception is the finding: recorded, the fuzzing goes on
            result.crash(case, e)

    run()
    result.seconds += time.perf_counter() - t0
    return result


# -- oracles shared by the parser targets ------------------------------------------------------------------------

def check_event(event) -> None:
    """An accepted event is well formed: it survives the wire and the Parquet schema unchanged, its floats are
    finite, privacy mode carries no content."""
    from schemas import Event, parse_wire, to_arrow, to_wire

    if not isinstance(event, Event):
        raise Violation(f"accepted something that is not an Event: {type(event).__name__}")
    wire = to_wire(event)
    wire.decode("utf-8")  # strict: no lone surrogates got in
    again = parse_wire(wire)
    if again != event:
        raise Violation("event changed through the wire")
    table = to_arrow([event], event.event_type)
    if table.num_rows != 1:
        raise Violation("event did not become one Arrow row")
    if event.privacy_mode and any(getattr(event, f) for f in event.CONTENT_FIELDS):
        raise Violation("privacy-mode event with content accepted")


def check_dead_letter(dead) -> str:
    """A dead letter has a reason from the fixed vocabulary and can be published and written as Parquet."""
    from pipelines.archive.deadletter import REASONS, DeadLetter, dead_letter_table

    if not isinstance(dead, DeadLetter) or dead.reason not in REASONS or not dead.field or not dead.detail:
        raise Violation(f"dead letter without a reason: {dead!r}")
    for _, v in dead.headers("cluster"):  # the dead-letter topic's headers
        v.decode("utf-8")
    dead_letter_table([dead], "cluster")
    return dead.reason


# -- parsers --------------------------------------------------------------------------------------------------------

def check_wire(data: bytes, r: TargetResult) -> None:
    from pipelines.archive.deadletter import reason_code
    from schemas import SchemaError, parse_wire

    try:
        event = parse_wire(data)
    except SchemaError as e:
        if not e.field or not e.reason:
            raise Violation(f"rejection without a reason: {e!r}") from None
        r.reject(reason_code(e))
        return
    check_event(event)
    r.accepted += 1


def _reward_input(draw_value: Any, how: str):
    from pipelines.archive.messages import SourceMessage

    if how == "message":
        return SourceMessage("telemetry.edits", 0, 7, draw_value)
    if how == "text" and isinstance(draw_value, bytes):
        return draw_value.decode("utf-8", "surrogateescape")  # TestStream sources may hand over text
    if how == "dict" and isinstance(draw_value, bytes):
        try:
            return json.loads(draw_value)
        except (ValueError, RecursionError):
            return draw_value
    return draw_value


def reward_inputs() -> st.SearchStrategy:
    return st.builds(_reward_input, st.one_of(fc.hostile_wire(), st.none()),
                     st.sampled_from(["message", "message", "bytes", "text", "dict"]))


def check_reward_parse(raw: Any, r: TargetResult) -> None:
    import apache_beam as beam

    from pipelines.rewards.parse import DEAD_LETTER, ParseEventsFn

    out = list(ParseEventsFn().process(raw))
    if len(out) != 1:
        raise Violation(f"{len(out)} outputs for one input")
    [o] = out
    if isinstance(o, beam.pvalue.TaggedOutput):
        if o.tag != DEAD_LETTER:
            raise Violation(f"unexpected tag {o.tag}")
        r.reject(check_dead_letter(o.value))
        return
    check_event(o)
    r.accepted += 1


def check_archive(values: list[bytes | None], r: TargetResult) -> None:
    """One partition's messages through the archiver's batch, then the tables it would write."""
    from pipelines.archive.batch import Batch
    from pipelines.archive.dedupe import RecentIds
    from pipelines.archive.messages import SourceMessage
    from pipelines.archive.writer import events_table

    batch = Batch(RecentIds(100))
    for offset, v in enumerate(values):
        batch.add(SourceMessage("telemetry.edits", 3, 100 + offset, v, key=b"u"))
    [pb] = batch.partitions.values()
    ids = [e.event_id for e, _ in pb.events]
    if len(ids) != len(set(ids)):
        raise Violation("a replayed event_id was archived twice")
    if len(pb.events) + len(pb.dead_letters) + pb.duplicates != len(values):
        raise Violation("a message was neither archived, dead-lettered nor counted as a duplicate")
    by_type: dict[str, list] = {}
    for e, off in pb.events:
        check_event(e)
        by_type.setdefault(e.event_type, []).append((e, off))
    for t, evs in by_type.items():
        events_table(evs, t, pb.topic, pb.partition)
    for d in pb.dead_letters:
        r.reject(check_dead_letter(d))
    r.accepted += len(pb.events)
    r.rejected["duplicate_event_id"] += pb.duplicates


def check_tool_protocol(case: tuple[str, Any], r: TargetResult) -> None:
    from schemas.events import ToolCallRecord, ToolCallStatus, Trajectory
    from schemas.tool_protocol import (EDIT_TOOLS, from_openai_tool_calls, parse_response, to_openai_tool_calls,
                                       validate_call)

    text, openai_calls = case
    p = parse_response(text)
    for rec in p.records:
        ToolCallRecord.model_validate(rec.model_dump())
        if rec.status is not ToolCallStatus.ok:
            if not rec.error:
                raise Violation("broken call without a reason")
            r.reject(rec.status.value)
    if sum(rec.status is ToolCallStatus.ok for rec in p.records) != len(p.calls):
        raise Violation("valid records and calls disagree")
    for c in p.calls:
        if validate_call(c.name, c.arguments):
            raise Violation(f"an invalid call passed: {c!r}")
    if (p.kind.value == "edit") != any(c.name in EDIT_TOOLS for c in p.calls):
        raise Violation("response kind disagrees with the calls")
    # What serving does with it: the OpenAI answer (UTF-8 JSON) and the trajectory's tool-call records.
    wire_calls = to_openai_tool_calls(p.calls, "r")
    json.dumps({"tool_calls": wire_calls, "content": p.content}, ensure_ascii=False).encode("utf-8")
    if from_openai_tool_calls(wire_calls) != p.calls:
        raise Violation("tool calls changed through the OpenAI format")
    Trajectory(event_id=Trajectory.new_id(), event_time="2026-11-01T00:00:00Z", user_id="u", org_id="o",
               workspace_id="w", session_id="s", client_version="c", request_id="r", policy_version="1", arm="a",
               tool_calls=p.records[:256], latency_ms=1.0, prompt_tokens=0, completion_tokens=0,
               response_kind=p.kind)
    r.accepted += len(p.calls)
    r.rejected["answer_or_question"] += not p.records
    try:  # what a client reads back from an endpoint: parsed, or refused with ValueError
        parsed = from_openai_tool_calls(openai_calls)
    except ValueError:
        r.reject("openai_tool_calls_invalid")
    else:
        for c in parsed:
            if validate_call(c.name, c.arguments):
                raise Violation(f"an invalid OpenAI tool call passed: {c!r}")


# -- the collector ------------------------------------------------------------------------------------------------

class RecordingTransport:
    """Receives the collector's validated records (stands in for Kafka; the collector is what is under test)."""

    def __init__(self):
        self.records: list = []

    def send(self, records) -> None:
        self.records.extend(records)

    def close(self) -> None:
        pass


class CollectorRig:
    """The collector's ASGI app with a real key store, called in-process with exact headers and body chunks."""

    def __init__(self, tmp: Path, **cfg):
        import jsonschema

        from instrumentation.collector.app import create_app
        from instrumentation.collector.config import CollectorConfig
        from schemas.api_keys import KeyStore

        # rate limits out of the way: one address sends every case, and what is fuzzed is the input, not the pace
        unlimited = {"rate_limit_requests_per_s": 1e9, "rate_limit_request_burst": 10**9,
                     "rate_limit_unauthenticated_per_s": 1e9, "rate_limit_unauthenticated_burst": 10**9}
        self.cfg = CollectorConfig(**{"max_body_bytes": 256 * 1024, "max_events_per_batch": 50, **unlimited, **cfg})
        self.keys = KeyStore(tmp / "keys.json")
        # a gateway key with role serving: every org_id and event type the generators make can be accepted
        self.api_key = self.keys.create("fuzzer", org="*", role="serving")
        self.transport = RecordingTransport()
        self.clock = [1_793_527_230.0]  # 30 s after the fixtures' event_time, within the collector's time skew
        self.app = create_app(self.cfg, keys=self.keys, transport=self.transport, kafka_ok=lambda: True,
                              clock=lambda: self.clock[0])
        from instrumentation.collector.openapi import build_openapi

        self.doc = build_openapi(self.cfg)
        self.responses = self.doc["paths"]["/v1/events"]["post"]["responses"]
        self.validators = {s: jsonschema.Draft202012Validator({**self.doc, **spec["content"]["application/json"]
                                                               ["schema"]})
                           for s, spec in self.responses.items()}

    def call(self, headers: list[tuple[bytes, bytes]], chunks: list[bytes]) -> tuple[int, dict, dict]:
        from infra.bench.asgi import raw_post

        reply = raw_post(self.app, "/v1/events", headers, chunks)
        return reply.status, reply.json(), reply.headers

    def judge(self, status: int, body: dict, headers: dict, n_events: int | None, records_before: int,
              r: TargetResult) -> None:
        """The collector's oracle: documented status and body, no 5xx, accepted events produced once and valid."""
        from schemas import parse_wire

        if status >= 500:
            raise Violation(f"{status} {body}")
        spec = self.responses.get(str(status))
        if spec is None:
            raise Violation(f"undocumented status {status}: {body}")
        self.validators[str(status)].validate(body)
        for h, hs in spec.get("headers", {}).items():
            if hs.get("required") and h.lower() not in headers:
                raise Violation(f"{status} without its {h} header")
        new = self.transport.records[records_before:]
        if status != 200:
            if new:
                raise Violation(f"{status} answer but {len(new)} records were produced")
            r.reject(f"http_{status}:{body['error']}")
            return
        if body["accepted"] != len(new):
            raise Violation(f"accepted {body['accepted']} but produced {len(new)}")
        if n_events is not None and body["accepted"] + len(body["rejected"]) != n_events:
            raise Violation("an event was neither accepted nor rejected")
        for rec in new:
            check_event(parse_wire(rec.value))
        for rej in body["rejected"]:
            if not rej["reason"] or not rej["field"]:
                raise Violation(f"rejection without a reason: {rej}")
            r.reject(f"event_rejected:{_field_family(rej['field'])}")
        r.accepted += body["accepted"]


def _field_family(field_: str) -> str:
    if field_ == "<event>":
        return "whole"
    if field_ in ("event_type", "schema_version", "event_id", "event_time", "privacy_mode"):
        return field_.strip("<>")
    return "field"


@st.composite
def collector_request(draw) -> dict:
    """A hostile request: body, content type, auth scheme, how the body arrives."""
    events = draw(st.lists(st.one_of(fc.hostile_event(), st.just(None)), min_size=0, max_size=6))
    body_kind = draw(st.sampled_from(["events", "events", "events", "events_raw", "hostile_wire", "shape", "many",
                                      "huge"]))
    return {"events": events, "body_kind": body_kind, "wire": draw(fc.hostile_wire()) if body_kind == "hostile_wire"
            else b"",
            "content_type": draw(st.sampled_from(["application/json", "application/json", "application/json",
                                                  "application/json; charset=utf-8", "APPLICATION/JSON",
                                                  "application/json; charset=latin-1", "text/plain", None,
                                                  "application/json\x00", "application/x-www-form-urlencoded"])),
            "auth": draw(st.sampled_from(["bearer", "bearer", "bearer", "signed", "signed", "replay", "stale",
                                          "bad_signature", "wrong_key", "none", "both", "basic", "bearer_unicode",
                                          "signed_unknown_client"])),
            "delivery": draw(st.sampled_from(["whole", "whole", "chunks", "lying_length", "bad_length"]))}


def _body(req: dict, rig: CollectorRig) -> tuple[bytes, int | None]:
    kind = req["body_kind"]
    events = [e if e is not None else {} for e in req["events"]]
    if kind == "events":
        return fc._dumps({"events": events}), len(events)
    if kind == "events_raw":
        return fc._dumps({"events": events}, ensure_ascii=False), None
    if kind == "hostile_wire":
        return b'{"events": [' + req["wire"] + b"]}", None
    if kind == "shape":
        return fc._dumps(events[0] if events else [1]), None
    if kind == "many":
        return fc._dumps({"events": [{}] * (rig.cfg.max_events_per_batch + 1)}), None
    return b'{"events": ["' + b"x" * (rig.cfg.max_body_bytes + 10) + b'"]}', None


def collector_checker(rig: CollectorRig) -> Callable[[dict, TargetResult], None]:
    from instrumentation.collector.auth import signature
    from schemas.api_keys import signing_key

    def check(req: dict, r: TargetResult) -> None:
        body, n_events = _body(req, rig)
        h: list[tuple[bytes, bytes]] = []
        if req["content_type"] is not None:
            h.append((b"content-type", req["content_type"].encode("latin-1", "replace")))
        auth = req["auth"]
        ts = str(int(rig.clock[0]))
        nonce = uuid.uuid4().hex
        sig = signature(signing_key(rig.api_key), ts, nonce, body)
        signed = [(b"x-rtrl-client", b"fuzzer"), (b"x-rtrl-timestamp", ts.encode()), (b"x-rtrl-nonce", nonce.encode()),
                  (b"x-rtrl-signature", sig.encode())]
        if auth in ("bearer", "both"):
            h.append((b"authorization", f"Bearer {rig.api_key}".encode()))
        if auth in ("signed", "replay", "both"):
            h += signed
        elif auth == "stale":
            old = str(int(rig.clock[0]) - 10_000)
            h += [(b"x-rtrl-client", b"fuzzer"), (b"x-rtrl-timestamp", old.encode()), (b"x-rtrl-nonce", nonce.encode()),
                  (b"x-rtrl-signature", signature(signing_key(rig.api_key), old, nonce, body).encode())]
        elif auth == "bad_signature":
            h += signed[:3] + [(b"x-rtrl-signature", b"0" * 64)]
        elif auth == "signed_unknown_client":
            h += [(b"x-rtrl-client", b"nobody")] + signed[1:]
        elif auth == "wrong_key":
            h.append((b"authorization", b"Bearer rtrl_" + b"A" * 40))
        elif auth == "basic":
            h.append((b"authorization", b"Basic dXNlcjpwYXNz"))
        elif auth == "bearer_unicode":
            h.append((b"authorization", "Bearer \u202e\u0000ключ".encode("utf-8")))
        delivery = req["delivery"]
        chunks = [body] if delivery != "chunks" else [body[i:i + 997] for i in range(0, len(body), 997)] or [b""]
        if delivery in ("whole", "chunks"):
            h.append((b"content-length", str(len(body)).encode()))
        elif delivery == "lying_length":
            h.append((b"content-length", b"10"))
        else:
            h.append((b"content-length", b"-1x"))
        before = len(rig.transport.records)
        status, answer, headers = rig.call(h, chunks)
        rig.judge(status, answer, headers, n_events if delivery in ("whole", "chunks") else None, before, r)
        if auth == "replay":  # the same signed request again: must be refused (409), nothing produced twice
            before = len(rig.transport.records)
            status2, answer2, headers2 = rig.call(h, chunks)
            if status == 200 and status2 != 409:
                raise Violation(f"replayed signed request answered {status2}")
            rig.judge(status2, answer2, headers2, None, before, r)
        rig.clock[0] += 1

    return check


def run_collector_openapi(n: int, seed: int, tmp: Path) -> TargetResult:
    """schemathesis: cases generated from the collector's own OpenAPI document, positive and negative."""
    import schemathesis
    from schemathesis import GenerationMode

    rig = CollectorRig(tmp)
    schema = schemathesis.openapi.from_asgi("/openapi.json", rig.app)
    ops = [o.ok() for o in schema.get_all_operations()]
    result = TargetResult()
    per_op = {op.label: op for op in ops}
    ingest, health = per_op["POST /v1/events"], per_op["GET /healthz"]
    auth = {"Authorization": f"Bearer {rig.api_key}"}

    def check(case, r: TargetResult) -> None:
        before = len(rig.transport.records)
        for h in list(case.headers or {}):
            if h.lower() == "authorization" or h.lower().startswith("x-rtrl-"):
                del case.headers[h]
        resp = case.call(headers=auth)
        case.validate_response(resp)  # schemathesis' checks: no 5xx, documented status, body schema, headers
        body = resp.json()
        if case.operation.label == "GET /healthz":
            r.reject("healthz") if resp.status_code != 200 else None
            r.accepted += resp.status_code == 200
            return
        events = case.body.get("events") if isinstance(case.body, dict) else None
        rig.judge(resp.status_code, body, {k.lower(): v for k, v in resp.headers.items()},
                  len(events) if isinstance(events, list) and resp.status_code == 200 else None, before, r)

    share = max(1, n // 20)  # a few health probes; the rest split between positive and negative ingest cases
    drive(health.as_strategy(), check, share, seed, result)
    rest = n - result.cases
    drive(ingest.as_strategy(generation_mode=GenerationMode.POSITIVE), check, rest // 2, seed + 1, result)
    drive(ingest.as_strategy(generation_mode=GenerationMode.NEGATIVE), check, n - result.cases, seed + 2, result)
    return result


def run_atheris(target: str, runs: int, seed: int) -> TargetResult:
    """Coverage-guided fuzzing in a child process (`infra/bench/fuzz_atheris.py`)."""
    result = TargetResult()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "result.json"
        proc = subprocess.run([sys.executable, "-m", "infra.bench.fuzz_atheris", target, str(runs), str(seed),
                               str(out), str(Path(d) / "corpus")], capture_output=True, text=True, cwd=Path(__file__).resolve().parents[2],
                              env={**os.environ, "PYTHONHASHSEED": "0"})
        if out.exists():
            summary = json.loads(out.read_text())
            result.cases, result.accepted = summary["cases"], summary["accepted"]
            result.rejected.update(summary["rejected"])
        if proc.returncode != 0:
            result.crashes += 1
            result.examples.append(proc.stderr[-3000:])
    result.seconds = time.perf_counter() - t0
    return result


def atheris_available() -> bool:
    try:
        import atheris  # noqa: F401
    except ImportError:
        return False
    return True


def run_target(name: str, n: int, seed: int = 0) -> TargetResult:
    """Run `n` cases of one target."""
    if name == "wire":
        return drive(fc.hostile_wire(), check_wire, n, seed)
    if name == "reward_parse":
        return drive(reward_inputs(), check_reward_parse, n, seed)
    if name == "archive_messages":
        return drive(fc.replayed_stream(), check_archive, n, seed)
    if name == "tool_protocol":
        return drive(st.tuples(fc.model_response(), fc.openai_tool_calls()), check_tool_protocol, n, seed)
    if name.startswith("atheris_"):
        return run_atheris(name.removeprefix("atheris_"), n, seed)
    with tempfile.TemporaryDirectory() as d:
        if name == "collector_openapi":
            return run_collector_openapi(n, seed, Path(d))
        if name == "collector_hostile":
            rig = CollectorRig(Path(d))
            return drive(collector_request(), collector_checker(rig), n, seed)
    raise ValueError(f"unknown fuzz target {name!r}; known: {sorted(DEFAULT_CASES)}")


def run(cases: dict[str, int] | None = None, seed: int = 0, log: Callable[[str], None] = print) -> dict:
    """Every target; the JSON summary of `rtrl bench fuzz`."""
    cases = dict(cases or DEFAULT_CASES)
    if not atheris_available():
        log("fuzz: atheris is not installed (pip install atheris); its targets are skipped")
        cases = {k: v for k, v in cases.items() if not k.startswith("atheris_")}
    t0 = time.perf_counter()
    targets = {}
    for name, n in cases.items():
        log(f"fuzz: {name}: {n} cases ...")
        res = run_target(name, n, seed)
        targets[name] = res.as_dict()
        log(f"fuzz: {name}: {res.cases} cases, {res.crashes} crashes, {res.accepted} accepted, "
            f"{sum(res.rejected.values())} rejected, {res.seconds:.1f} s")
    total = Counter()
    for t in targets.values():
        total.update(t["rejected"])
    return {"cases": sum(t["cases"] for t in targets.values()),
            "crashes": sum(t["crashes"] for t in targets.values()),
            "accepted": sum(t["accepted"] for t in targets.values()),
            "rejected_by_reason": dict(sorted(total.items())), "seconds": round(time.perf_counter() - t0, 1),
            "seed": seed, "targets": targets}
