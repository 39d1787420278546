"""The archiver's Prometheus metrics: `GET /metrics` on `archive.metrics_port` (docs/monitoring.md lists each one).

Read from its `ArchiveStats` at each scrape (the archiver's loop writes them; a scrape only reads):

    rtrl_archive_messages_total                     Kafka records consumed into committed batches
    rtrl_archive_events_written_total               rows in committed data files
    rtrl_archive_duplicates_dropped_total           records whose event id was archived already
    rtrl_archive_dead_letters_total{reason}         records sent to the dead-letter topic
    rtrl_archive_files_written_total, rtrl_archive_bytes_written_total, rtrl_archive_manifests_total
    rtrl_archive_poll_errors_total, rtrl_archive_maintenance_errors_total, rtrl_archive_kafka_commit_errors_total
    rtrl_archive_batch_messages                     messages in the batch not committed yet
    rtrl_archive_last_commit_timestamp_seconds      when the last batch committed (0: none yet)
    rtrl_archive_consumer_lag_records{topic}        records Kafka holds past the archiver's position, summed over
                                                    the topic's partitions (read every `archive.cluster_check_s`)
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry

from pipelines.archive.deadletter import REASONS
from schemas.prometheus import counter, counter_by, gauge, gauge_by

COUNTERS = (("messages", "rtrl_archive_messages", "Kafka records consumed into committed batches"),
            ("events_written", "rtrl_archive_events_written", "Rows in committed data files"),
            ("duplicates_dropped", "rtrl_archive_duplicates_dropped", "Records whose event id was archived already"),
            ("files_written", "rtrl_archive_files_written", "Data files committed"),
            ("bytes_written", "rtrl_archive_bytes_written", "Bytes of data files committed"),
            ("manifests", "rtrl_archive_manifests", "Partition batches committed"),
            ("poll_errors", "rtrl_archive_poll_errors", "Kafka polls that failed"),
            ("maintenance_errors", "rtrl_archive_maintenance_errors", "Maintenance runs that failed (retried)"),
            ("kafka_commit_errors", "rtrl_archive_kafka_commit_errors",
             "Consumer-group commits that failed (monitoring only: the manifests are the truth)"))


class ArchiverCollector:
    def __init__(self, stats: Callable, batch_messages: Callable[[], int]):
        self.stats, self.batch_messages = stats, batch_messages

    def collect(self):
        st = self.stats()
        for attr, name, help_ in COUNTERS:
            yield counter(name, help_, getattr(st, attr))
        yield counter_by("rtrl_archive_dead_letters", "Records sent to the dead-letter topic, by reason", "reason",
                         st.dead_letters, REASONS)
        yield gauge("rtrl_archive_batch_messages", "Messages in the batch not committed yet", self.batch_messages())
        yield gauge("rtrl_archive_last_commit_timestamp_seconds", "When the last batch committed (epoch seconds; 0: "
                    "none since start)", st.last_commit_wall)
        by_topic: dict[str, int] = {}
        for tp, n in st.lag.items():
            topic = tp.rsplit("/", 1)[0]
            by_topic[topic] = by_topic.get(topic, 0) + n
        yield gauge_by("rtrl_archive_consumer_lag_records", "Records Kafka holds past the archiver's position, summed "
                       "over the topic's partitions", "topic", dict(sorted(by_topic.items())))


def registry_for(archiver) -> CollectorRegistry:
    """A registry reading `archiver`'s stats and batch at each scrape."""
    registry = CollectorRegistry()
    registry.register(ArchiverCollector(lambda: archiver.stats, lambda: len(archiver.batch)))
    return registry


def serve_metrics(archiver, host: str, port: int):
    """Serve `GET /metrics` for `archiver` on host:port in a daemon thread; returns (server, thread)."""
    from prometheus_client import start_http_server

    return start_http_server(port, addr=host, registry=registry_for(archiver))
