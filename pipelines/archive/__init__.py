"""pipelines/archive: Kafka event topics -> the Parquet event log (exactly once across crashes).

Kept import-free (the config module is loaded by every CLI command). Public API:
    pipelines.archive.archiver.Archiver          -- `Archiver.from_config(cfg).run(until_idle_s=None, stop_event=None)`
    pipelines.archive.stats.ArchiveStats         -- what a run did (batches, events, duplicates, dead letters, positions)
    pipelines.archive.reader.read_events         -- manifested rows as a polars.DataFrame (time range, dedupe)
    pipelines.archive.reader.archived_event_ids  -- set of archived event_ids
    pipelines.archive.reader.read_dead_letters   -- the dead-letter Parquet as a polars.DataFrame
    pipelines.archive.layout                     -- where files live under the root
"""
