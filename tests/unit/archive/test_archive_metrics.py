"""The archiver's `/metrics`: what it committed, its dead letters by reason, the batch in flight, when it last
committed and how far it is behind Kafka, read from a run over a fake log and scraped over HTTP."""

from __future__ import annotations

import socket
import urllib.request
from datetime import datetime, timezone

import pytest
from prometheus_client import generate_latest

from pipelines.archive.metrics import registry_for, serve_metrics
from schemas.events import EVENT_TYPES
from tests.prometheus_text import samples, value
from tests.unit.archive.helpers import FakeLog, all_types, make_archiver

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)


class LaggingSource:
    """A source whose broker reports `behind` records past every partition's position."""

    def __init__(self, source, behind: int):
        self.source, self.behind_by = source, behind

    def __getattr__(self, name):
        return getattr(self.source, name)

    def lag(self):
        return {tp: self.behind_by for tp in self.source.pos}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_scrape_reads_what_the_archiver_committed_and_how_far_it_is_behind(tmp_path):
    log = FakeLog(partitions=2)
    n = 2 * len(EVENT_TYPES)
    log.produce(all_types(n))
    log.append("trajectories", b"not json", partition=0)
    a, source = make_archiver(tmp_path, log, wall_clock=lambda: NOW)
    a.source = LaggingSource(source, behind=3)
    a.run(until_idle_s=1.0)
    assert a.check_cluster() is True                       # the periodic check reads the lag
    m = samples(generate_latest(registry_for(a)).decode())
    assert value(m, "rtrl_archive_events_written_total") == n
    assert value(m, "rtrl_archive_messages_total") == n + 1
    assert sum(v for (name, _), v in m.items() if name == "rtrl_archive_dead_letters_total") == 1
    assert value(m, "rtrl_archive_batch_messages") == 0
    assert value(m, "rtrl_archive_last_commit_timestamp_seconds") == NOW.timestamp()
    topics = {t for t, _ in source.pos}
    partitions = {t: sum(1 for x, _ in source.pos if x == t) for t in topics}
    for topic in topics:
        assert value(m, "rtrl_archive_consumer_lag_records", topic=topic) == 3 * partitions[topic]


def test_without_a_lag_reading_no_topic_is_reported_behind(tmp_path):
    log = FakeLog(partitions=1)
    log.produce(all_types(4))
    a, _ = make_archiver(tmp_path, log)
    a.run(until_idle_s=1.0)
    m = samples(generate_latest(registry_for(a)).decode())
    assert not [k for k in m if k[0] == "rtrl_archive_consumer_lag_records"]
    assert value(m, "rtrl_archive_events_written_total") == 4


@pytest.mark.integration     # a listening socket
def test_the_metrics_are_served_over_http(tmp_path):
    log = FakeLog(partitions=1)
    log.produce(all_types(3))
    a, _ = make_archiver(tmp_path, log)
    a.run(until_idle_s=1.0)
    port = free_port()
    server, _ = serve_metrics(a, "127.0.0.1", port)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            assert value(samples(r.read().decode()), "rtrl_archive_events_written_total") == 3
    finally:
        server.shutdown()
