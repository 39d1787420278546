"""A cycle's reward run over traffic held in files instead of a Kafka range: the in-process executor's source
(`orchestrator.source = "files"`: the learning loop, `rtrl bench specialize`, tests), where the users are
simulated in the executor's process and drained before the cycle starts.

    write_traffic(path, events)                                   # the cycle's events, wire format, one per line
    summary = run_files("c3", [path], table, spec, result=...)    # -> {"partitions", "counters", ...}

The events go the production way from the wire bytes on: `parse_one` (dead letters for what does not validate),
event batches per type, `BoundedRewards` (dedupe, the join, maturity) and its sink (the reward table's partition
`window=<cycle id>`, written atomically, the task-outcome table beside it). What differs from a Kafka cycle, and
why: there is no offset range (the files are the cycle's input, whole), no carry (the users of a cycle are drained:
every request's events, and every background task's outcome, are in its file), and every request is mature (the
run's `as_of` is past the last event by the longest window), so nothing is pending or late.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines.archive.deadletter import DeadLetter
from pipelines.rewards.batches import EventBatch
from pipelines.rewards.bounded import BoundedRewards, Sink, read_summary, run_to_end
from pipelines.rewards.parse import parse_one
from pipelines.rewards.spec import RewardSpec
from schemas import storage
from schemas.wire import to_wire

BATCH_EVENTS = 5000


def write_traffic(path: str | Path, events) -> int:
    """`events` (schemas `Event`s) as wire-format lines in `path`, written atomically; how many."""
    lines = b"".join(to_wire(e) + b"\n" for e in events)
    storage.write_bytes(storage.normalize(str(path)), lines)
    return lines.count(b"\n")


def read_items(paths: list[str]):
    """The bounded join's source items from traffic files: event batches per type, dead letters, the counts."""
    counts: dict[str, int] = {}
    pending: dict[str, list] = {}
    for path in paths:
        for line in storage.read_bytes(storage.normalize(path)).splitlines():
            if not line.strip():
                continue
            counts["events_read"] = counts.get("events_read", 0) + 1
            out = parse_one(line)
            if isinstance(out, DeadLetter):
                counts[f"dead_letter_{out.reason}"] = counts.get(f"dead_letter_{out.reason}", 0) + 1
                yield "dead", out
                continue
            counts["events_parsed"] = counts.get("events_parsed", 0) + 1
            batch = pending.setdefault(out.event_type, [])
            batch.append(out)
            if len(batch) >= BATCH_EVENTS:
                yield EventBatch.of(out.event_type, pending.pop(out.event_type))
    for event_type in sorted(pending):
        yield EventBatch.of(event_type, pending.pop(event_type))
    yield "counts", counts


def drained_as_of(items: list, spec: RewardSpec) -> datetime | None:
    """A time past every request's maturity in the source items (`read_items`): the last event time plus the longest
    window the spec waits for (the long loop's horizon and its lateness included), or None for no valid events."""
    times = [b.frame["event_time"].max() for b in items if isinstance(b, EventBatch)]
    if not times:
        return None
    longest = max(spec.maturity_delay_s(question=True) + spec.followup_window_s,
                  spec.long_horizon_s + spec.outcome_lateness_s)
    return max(times) + timedelta(seconds=longest + 1)


def events_read(items: list) -> int:
    """How many lines of the files were events (valid or not)."""
    counts = [x[1] for x in items if isinstance(x, tuple) and x[0] == "counts"]
    return sum(c.get("events_read", 0) for c in counts)


def run_files(cycle_id: str, paths: list[str], table: str | Path, spec: RewardSpec, result: str | Path,
              dead_letters: str | Path | None = None, shards: int = 1,
              beam_args: list[str] | None = None) -> dict:
    """The reward rows of the traffic in `paths`, as the partition `window=cycle_id` of `table` (and the outcome
    table beside it); the run's summary ({"partitions", "outcome_partitions", "counters", ...})."""
    items = list(read_items(paths))
    as_of = drained_as_of(items, spec)
    sink = Sink(table=str(table), window=cycle_id, result=str(result),
                dead_letters=None if dead_letters is None else str(dead_letters))
    if as_of is None:
        return {"partitions": [], "outcome_partitions": [], "counters": {}, "carried": 0, "dead_letters": 0}
    p = beam.Pipeline(options=PipelineOptions(beam_args or ["--runner=DirectRunner"]))
    _ = (p | "Traffic" >> beam.Create(items, reshuffle=False)
         | "Rewards" >> BoundedRewards(spec, shards, as_of, sink))
    run_to_end(p)
    return read_summary(sink)
