"""ReadArchive: the Parquet event log (`rtrl archive`) as a bounded source of event batches, for replay.

With `cuts` (pipelines/rewards/lateness.py) each file's late rows are dropped and counted as they are read,
before deduplication, with the cut-off the live cycles had for them (or, for events no recorded cycle read, the
one their receipt implies).
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import apache_beam as beam
import polars as pl

from pipelines.archive.manifest import load_manifests
from pipelines.archive.reader import list_files, read_duplicates, read_file, read_times
from pipelines.archive.writer import EVENTS
from pipelines.rewards import progress
from pipelines.rewards.batches import EventBatch
from pipelines.rewards.frames import conform
from schemas import storage
from pipelines.rewards.lateness import ReplayCuts, late_counter, split_late


class ReadArchiveFileFn(beam.DoFn):
    """A committed data file -> its `EventBatch` (late rows dropped when `cuts` is given) and ("counts", {...}):
    the bounded join's source items (pipelines/rewards/bounded.py)."""

    def __init__(self, root: str, start: datetime | None, end: datetime | None, cuts: ReplayCuts | None = None,
                 clusters: dict[str, str] | None = None):
        self.root, self.start, self.end = root, start, end
        self.cuts, self.clusters = cuts, clusters or {}

    def process(self, entry):
        frame = read_file(self.root, entry, self.start, self.end)
        progress.add("files_read")
        counts = {"events_read": frame.height}
        progress.add("events_read", frame.height)
        if self.cuts is not None and frame.height:
            cut, covered = self.cuts.cuts(frame, self.clusters.get(entry.path))
            counts.update(late_rule_live_cycle=covered, late_rule_receipt=frame.height - covered)
            frame, late = split_late(frame, cut)
            counts[late_counter(entry.event_type)] = late
        if frame.height:
            yield EventBatch(entry.event_type, conform(frame, entry.event_type))
        yield "counts", counts


def file_clusters(root: str | Path) -> dict[str, str]:
    """The Kafka cluster id each committed data file's offsets refer to (path relative to the root)."""
    return {f.path: m.cluster_id for m in load_manifests(storage.normalize(root)) for f in m.files
            if f.kind == EVENTS}


def _in(frame: pl.DataFrame, start: datetime | None, end: datetime | None) -> pl.DataFrame:
    return frame.filter((pl.col("event_time") >= start) if start else pl.lit(True),
                        (pl.col("event_time") < end) if end else pl.lit(True))


def receipt_times(root: str | Path, start: datetime | None, end: datetime | None) -> pl.DataFrame:
    """(event_time, received_time) of every committed event in [start, end), the duplicate copies the archiver
    dropped included: what receipt cut-offs are made of."""
    frames = [read_times(root, f, start, end) for f in list_files(root, None, start, end)]
    frames.append(_in(read_duplicates(root), start, end).select("event_time", "received_time"))
    return pl.concat(frames)


def count_duplicate_copies(root: str | Path, start: datetime | None, end: datetime | None,
                           cuts: ReplayCuts | None) -> dict[str, int]:
    """The copies the archiver dropped as duplicates in [start, end), counted as the live job counted them: late
    when older than their cut-off, else a duplicate of the copy the archive kept."""
    copies = _in(read_duplicates(root), start, end)
    counts = {"events_read": copies.height, "duplicates_dropped": 0}
    for (cluster, event_type), part in sorted(copies.partition_by("cluster_id", "event_type", as_dict=True).items(),
                                              key=str):
        late = 0
        if cuts is not None:
            cut, _ = cuts.cuts(part, cluster)
            late = part.height - split_late(part, cut)[0].height
        counts[late_counter(event_type)] = counts.get(late_counter(event_type), 0) + late
        counts["duplicates_dropped"] += part.height - late
    return counts


class ReadArchive(beam.PTransform):
    """Every committed archive file that can hold events in [start, end) -> EventBatch per file, late rows
    dropped when `cuts` is given."""

    def __init__(self, root: str | Path, start: datetime | None = None, end: datetime | None = None,
                 cuts: ReplayCuts | None = None):
        super().__init__()
        self.root, self.start, self.end, self.cuts = str(root), start, end, cuts

    def expand(self, pbegin):
        files = list_files(self.root, None, self.start, self.end)
        progress.put("files_total", len(files))
        clusters = file_clusters(self.root) if self.cuts is not None else None
        return (pbegin
                | "ListFiles" >> beam.Create(files, reshuffle=False)
                | "ReadFiles" >> beam.ParDo(ReadArchiveFileFn(self.root, self.start, self.end, self.cuts,
                                                              clusters)))
