"""Benchmark: latency of `TelemetryClient.emit` on the caller's thread, with a transport that discards, without
and with the write-ahead log (`sdk.write_ahead`).

    python -m instrumentation.bench_emit [--n 100000] [--sampling 0.5] [--kind mixed|trajectory]
                                         [--write-ahead both|off|on] [--dir DIR]
    rtrl bench emit ...                   (the same)

Prints JSON: per mode, emit latency percentiles in microseconds over N emits of pre-built events (event
construction is not timed), the emit throughput, the throughput until `flush` returned (everything sent), and the
client's stats after the flush. The sender thread runs meanwhile (in the default mode it does the redaction and
serialization, so the tail includes waits for the GIL that a real caller would also see); in write-ahead mode the
caller prepares each record and writes it to the log (fsync every `spool_fsync_every` records) in `--dir`.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
import uuid
from datetime import datetime, timezone

# The SDK and the schemas are imported where they are used: `rtrl` builds its parser from `add_arguments`.


class DiscardTransport:
    def send(self, records) -> None:
        pass

    def close(self) -> None:
        pass


def make_events(n: int, kind: str = "mixed") -> list:
    """`mixed`: edit_applied and followup_message alternately; `trajectory`: serving's event, 64 prompt and 128
    completion tokens with their logprobs."""
    from schemas.events import EditApplied, FollowupMessage, Hunk, Trajectory

    now = datetime.now(timezone.utc)
    env = dict(event_time=now, user_id="u1", org_id="o1", workspace_id="w1", session_id="s1", client_version="1.0")
    rng = random.Random(0)
    events = []
    for i in range(n):
        if kind == "trajectory":
            events.append(Trajectory(event_id=str(uuid.uuid4()), request_id=f"r{i}", policy_version="3", arm="control",
                                     prompt_token_ids=[rng.randrange(32000) for _ in range(64)],
                                     completion_token_ids=[rng.randrange(32000) for _ in range(128)],
                                     behaviour_logprobs=[-rng.random() * 5 for _ in range(128)], latency_ms=120.5,
                                     prompt_tokens=64, completion_tokens=128, **env))
        elif i % 2:
            events.append(FollowupMessage(event_id=str(uuid.uuid4()), text="that did not work, try again", **env))
        else:
            events.append(EditApplied(event_id=str(uuid.uuid4()), request_id=f"r{i}", file_id="f1",
                                      hunks=[Hunk(old_start=1, old_count=1, new_fingerprints=["0123456789abcdef"])],
                                      **env))
    return events


def percentile(sorted_values: list[int], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))] / 1000


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--n", type=int, default=100_000, help="events emitted per mode (default 100000)")
    ap.add_argument("--sampling", type=float, default=None, help="keep-fraction for followup_message")
    ap.add_argument("--kind", choices=("mixed", "trajectory"), default="mixed", help="mixed: edit_applied and "
                    "followup_message (~400 bytes); trajectory: serving's event, 64+128 tokens (~2.5 KB)")
    ap.add_argument("--write-ahead", choices=("both", "off", "on"), default="both",
                    help="measure without the write-ahead log, with it, or both (default)")
    ap.add_argument("--dir", default=None, help="where the spool and the log go (default: a temporary directory)")


def measure(events: list, cfg, directory: str | None) -> dict:
    """Emit `events` through a fresh client (`cfg`: SdkConfig), flush, and report latency, throughput and the
    client's stats."""
    from instrumentation.sdk import TelemetryClient

    n = len(events)
    with tempfile.TemporaryDirectory(dir=directory) as spool_dir:
        client = TelemetryClient(DiscardTransport(), cfg, spool_dir, name="bench")
        emit, clock = client.emit, time.perf_counter_ns
        lat = [0] * n
        t0 = clock()
        for i, event in enumerate(events):
            a = clock()
            emit(event)
            lat[i] = clock() - a
        wall = (clock() - t0) / 1e9
        client.flush(600)
        flushed = (clock() - t0) / 1e9
        stats = client.stats()
        client.close()
    lat.sort()
    return {"p50_us": percentile(lat, 0.50), "p90_us": percentile(lat, 0.90), "p99_us": percentile(lat, 0.99),
            "p999_us": percentile(lat, 0.999), "max_us": lat[-1] / 1000, "mean_us": round(sum(lat) / n / 1000, 3),
            "emits_per_s": round(n / wall), "sent_per_s": round(n / flushed), "stats": stats}


def run(args: argparse.Namespace) -> dict:
    from instrumentation.config import SdkConfig

    events = make_events(args.n, args.kind)
    cfg = SdkConfig(queue_size=max(args.n, 1), sampling={"followup_message": args.sampling} if args.sampling else {})
    out: dict = {"n": args.n, "kind": args.kind}
    for mode, on in (("without_write_ahead", False), ("with_write_ahead", True)):
        if args.write_ahead in ("both", "on" if on else "off"):
            out[mode] = measure(events, cfg.model_copy(update={"write_ahead": on}), args.dir)
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(ap)
    out = run(ap.parse_args(argv))
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
