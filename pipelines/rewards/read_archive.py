"""ReadArchive: the Parquet event log (`rtrl archive`) as a bounded source of event batches, for replay.

What is read is a list of disjoint event-time spans (`ReadSpan`): every event in a span, or only background tasks'
events (`tasks_only`: the trajectories with a `task_id`, and the `task_outcome`s), which a replay reads around its
range for the long-loop join (pipelines/rewards/replay_job.py).

With `cuts` (pipelines/rewards/lateness.py) each file's late rows are dropped and counted as they are read,
before deduplication, with the cut-off the live cycles had for them (or, for events no recorded cycle read, the
one their receipt implies).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import apache_beam as beam
import polars as pl

from pipelines.archive.manifest import committed_files
from pipelines.archive.reader import list_files, read_columns, read_duplicates, read_file, read_times
from pipelines.archive.writer import EVENTS
from pipelines.rewards import progress
from pipelines.rewards.batches import EventBatch
from pipelines.rewards.frames import conform
from schemas import storage
from pipelines.rewards.lateness import ReplayCuts, late_counts, split_late

TASK_TYPES = ("task_outcome", "trajectory")


@dataclass(frozen=True)
class ReadSpan:
    """The events with start <= event_time < end; with `tasks_only`, only background tasks' events: the
    trajectories with a task_id and the task_outcomes."""
    start: datetime | None
    end: datetime | None
    tasks_only: bool = False

    @property
    def types(self) -> tuple[str, ...] | None:
        return TASK_TYPES if self.tasks_only else None


def tasks_only(frame: pl.DataFrame, event_type: str) -> pl.DataFrame:
    """The rows of an archived frame that belong to background tasks (`ReadSpan.tasks_only`)."""
    if event_type == "task_outcome":
        return frame
    if event_type != "trajectory" or "task_id" not in frame.columns:
        return frame.clear()
    return frame.filter(pl.col("task_id").is_not_null())


def _has_tasks(root: str, entry, span: ReadSpan) -> bool:
    """Whether a trajectory file holds a background task's request in the span."""
    return read_columns(root, entry, ["task_id"], span.start, span.end)["task_id"].is_not_null().any()


class ReadArchiveFileFn(beam.DoFn):
    """A committed data file, or (file, `ReadSpan`) -> its `EventBatch` (late rows dropped when `cuts` is given)
    and ("counts", {...}): the bounded join's source items (pipelines/rewards/bounded.py)."""

    def __init__(self, root: str, start: datetime | None, end: datetime | None, cuts: ReplayCuts | None = None,
                 clusters: dict[str, str] | None = None):
        self.root, self.start, self.end = root, start, end
        self.cuts, self.clusters = cuts, clusters or {}

    def process(self, item):
        entry, span = item if isinstance(item, tuple) else (item, ReadSpan(self.start, self.end))
        if span.tasks_only and entry.event_type == "trajectory" and not _has_tasks(self.root, entry, span):
            frame = pl.DataFrame()      # an interactive traffic's file: two columns read, not the file
        else:
            frame = read_file(self.root, entry, span.start, span.end)
        if span.tasks_only and frame.height:
            frame = tasks_only(frame, entry.event_type)
        progress.add("files_read")
        counts = {"events_read": frame.height}
        progress.add("events_read", frame.height)
        if self.cuts is not None and frame.height:
            cut, covered = self.cuts.cuts(frame, self.clusters.get(entry.path))
            counts.update(late_rule_live_cycle=covered, late_rule_receipt=frame.height - covered)
            frame, late = split_late(frame, cut)
            counts.update(late_counts(entry.event_type, late))
        if frame.height:
            yield EventBatch(entry.event_type, conform(frame, entry.event_type))
        yield "counts", counts


def file_clusters(root: str | Path) -> dict[str, str]:
    """The Kafka cluster id each committed data file's offsets refer to (path relative to the root)."""
    return {f.entry.path: f.cluster_id for f in committed_files(storage.normalize(root), EVENTS)}


def _in(frame: pl.DataFrame, start: datetime | None, end: datetime | None) -> pl.DataFrame:
    return frame.filter((pl.col("event_time") >= start) if start else pl.lit(True),
                        (pl.col("event_time") < end) if end else pl.lit(True))


def receipt_times(root: str | Path, start: datetime | None, end: datetime | None) -> pl.DataFrame:
    """(event_time, received_time) of every committed event in [start, end), the duplicate copies the archiver
    dropped included: what receipt cut-offs are made of."""
    frames = [read_times(root, f, start, end) for f in list_files(root, None, start, end)]
    frames.append(_in(read_duplicates(root), start, end).select("event_time", "received_time"))
    return pl.concat(frames)


def task_request_ids(root: str | Path, start: datetime | None, end: datetime | None) -> pl.Series:
    """The event ids of the archived trajectories of background tasks in [start, end) (three columns read)."""
    frames = [read_columns(root, f, ["event_id", "task_id"], start, end)
              for f in list_files(root, "trajectory", start, end)]
    ids = [f.filter(pl.col("task_id").is_not_null())["event_id"] for f in frames]
    return pl.concat(ids) if ids else pl.Series("event_id", [], dtype=pl.String)


def count_duplicate_copies(root: str | Path, start: datetime | None, end: datetime | None,
                           cuts: ReplayCuts | None, spans: list[ReadSpan] | None = None) -> dict[str, int]:
    """The copies the archiver dropped as duplicates in [start, end), counted as the live job counted them: late
    when older than their cut-off, else a duplicate of the copy the archive kept. With `spans` (instead of start
    and end): the copies in each span, only those of background tasks' events in a `tasks_only` one."""
    every = read_duplicates(root)
    parts = []
    for span in spans if spans is not None else [ReadSpan(start, end)]:
        copies = _in(every, span.start, span.end)
        if span.tasks_only:
            tasks = task_request_ids(root, span.start, span.end)
            copies = copies.filter((pl.col("event_type") == "task_outcome")
                                   | ((pl.col("event_type") == "trajectory")
                                      & pl.col("event_id").is_in(tasks.implode())))
        parts.append(copies)
    copies = pl.concat(parts)
    counts = {"events_read": copies.height, "duplicates_dropped": 0}
    for (cluster, event_type), part in sorted(copies.partition_by("cluster_id", "event_type", as_dict=True).items(),
                                              key=str):
        late = 0
        if cuts is not None:
            cut, _ = cuts.cuts(part, cluster)
            late = part.height - split_late(part, cut)[0].height
        for name, n in late_counts(event_type, late).items():
            counts[name] = counts.get(name, 0) + n
        counts["duplicates_dropped"] += part.height - late
    return counts


class ReadArchive(beam.PTransform):
    """Every committed archive file that can hold events in [start, end) -- or in each of `spans` (disjoint) --
    -> EventBatch per file and span, late rows dropped when `cuts` is given."""

    def __init__(self, root: str | Path, start: datetime | None = None, end: datetime | None = None,
                 cuts: ReplayCuts | None = None, spans: list[ReadSpan] | None = None):
        super().__init__()
        self.root, self.start, self.end, self.cuts = str(root), start, end, cuts
        self.spans = spans if spans is not None else [ReadSpan(start, end)]

    def expand(self, pbegin):
        items = [(f, span) for span in self.spans for f in list_files(self.root, None, span.start, span.end)
                 if span.types is None or f.event_type in span.types]
        progress.put("files_total", len(items))
        clusters = file_clusters(self.root) if self.cuts is not None else None
        return (pbegin
                | "ListFiles" >> beam.Create(items, reshuffle=False)
                | "ReadFiles" >> beam.ParDo(ReadArchiveFileFn(self.root, self.start, self.end, self.cuts,
                                                              clusters)))
