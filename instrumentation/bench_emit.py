"""Benchmark: latency of `TelemetryClient.emit` on the caller's thread, with a transport that discards.

    python -m instrumentation.bench_emit [--n 100000] [--sampling 0.5]

Prints JSON: emit latency percentiles in microseconds over N emits of pre-built events (event construction is
not timed), the emit throughput, and the client's stats after a flush. The sender thread runs meanwhile
(redaction, serialization), so the tail includes waits for the GIL that a real caller would also see.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import uuid
from datetime import datetime, timezone

from instrumentation.config import SdkConfig
from instrumentation.sdk import TelemetryClient
from schemas.events import EditApplied, FollowupMessage, Hunk


class DiscardTransport:
    def send(self, records) -> None:
        pass

    def close(self) -> None:
        pass


def make_events(n: int) -> list:
    now = datetime.now(timezone.utc)
    env = dict(event_time=now, user_id="u1", org_id="o1", workspace_id="w1", session_id="s1", client_version="1.0")
    events = []
    for i in range(n):
        if i % 2:
            events.append(FollowupMessage(event_id=str(uuid.uuid4()), text="that did not work, try again", **env))
        else:
            events.append(EditApplied(event_id=str(uuid.uuid4()), request_id=f"r{i}", file_id="f1",
                                      hunks=[Hunk(old_start=1, old_count=1, new_fingerprints=["0123456789abcdef"])],
                                      **env))
    return events


def percentile(sorted_values: list[int], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))] / 1000


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--sampling", type=float, default=None, help="keep-fraction for followup_message")
    args = ap.parse_args(argv)
    events = make_events(args.n)
    cfg = SdkConfig(queue_size=max(args.n, 1), sampling={"followup_message": args.sampling} if args.sampling else {})
    with tempfile.TemporaryDirectory() as spool_dir:
        client = TelemetryClient(DiscardTransport(), cfg, spool_dir, name="bench")
        emit, clock = client.emit, time.perf_counter_ns
        lat = [0] * args.n
        t0 = clock()
        for i, event in enumerate(events):
            a = clock()
            emit(event)
            lat[i] = clock() - a
        wall = (clock() - t0) / 1e9
        client.flush(60)
        stats = client.stats()
        client.close()
    lat.sort()
    out = {"n": args.n, "p50_us": percentile(lat, 0.50), "p90_us": percentile(lat, 0.90),
           "p99_us": percentile(lat, 0.99), "p999_us": percentile(lat, 0.999), "max_us": lat[-1] / 1000,
           "mean_us": sum(lat) / len(lat) / 1000, "emits_per_s": round(args.n / wall), "stats": stats}
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
