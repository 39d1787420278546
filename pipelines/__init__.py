"""Data pipelines: the archiver (Kafka -> Parquet event log) and, from issue 3, the Beam reward job."""
