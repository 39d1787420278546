"""Data pipelines: the archiver (Kafka -> Parquet event log), the Beam reward job and replay, the data-quality
suites and the A/B metrics."""
