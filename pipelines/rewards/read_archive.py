"""ReadArchive: the Parquet event log (`rtrl archive`) as a bounded source of event batches, for replay."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import apache_beam as beam
from apache_beam.metrics import Metrics

from pipelines.archive.reader import list_files, read_file
from pipelines.rewards import progress
from pipelines.rewards.batches import EventBatch
from pipelines.rewards.frames import conform


class ReadArchiveFileFn(beam.DoFn):
    def __init__(self, root: str, start: datetime | None, end: datetime | None):
        self.root, self.start, self.end = root, start, end
        self.events_read = Metrics.counter("rewards", "events_read")

    def process(self, entry):
        frame = read_file(self.root, entry, self.start, self.end)
        progress.add("files_read")
        if frame.height:
            self.events_read.inc(frame.height)
            progress.add("events_read", frame.height)
            batch = EventBatch(entry.event_type, conform(frame, entry.event_type))
            yield beam.window.TimestampedValue(batch, batch.min_time.timestamp())


class ReadArchive(beam.PTransform):
    """Every committed archive file that can hold events in [start, end) -> EventBatch per file."""

    def __init__(self, root: str | Path, start: datetime | None = None, end: datetime | None = None):
        super().__init__()
        self.root, self.start, self.end = str(root), start, end

    def expand(self, pbegin):
        files = list_files(self.root, None, self.start, self.end)
        progress.put("files_total", len(files))
        return (pbegin
                | "ListFiles" >> beam.Create(files, reshuffle=False)
                | "ReadFiles" >> beam.ParDo(ReadArchiveFileFn(self.root, self.start, self.end)))
