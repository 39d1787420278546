"""Kafka retention on the real embedded broker: the topics `rtrl up` creates carry retention.ms and retention.bytes
from config (read back with DescribeConfigs), a topic made before the setting is brought to it once, the memory
watch logs its warning past kafka.memory_warn_bytes and stops with the broker, and over storage "s3" broker-watch
deletes the record batches past retention that no live consumer group still needs, while a consumer keeps
consuming."""

import time

import pytest

from infra.stack.broker import Broker, align_topic_configs, ensure_topics
from infra.stack.log_retention import LogRetention
from schemas.kafka_clients import kafka_client_args
from schemas.topics import TOPICS
from tests.conftest import make_config
from tests.waiting import wait_for

pytestmark = [pytest.mark.integration]


def _retention(kafka, topics: list[str]) -> dict[str, dict[str, str]]:
    from kafka import KafkaAdminClient
    from kafka.admin import ConfigResource, ConfigResourceType

    admin = KafkaAdminClient(**kafka_client_args(kafka), request_timeout_ms=10_000)
    try:
        got = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, t) for t in topics],
                                     config_filter="all")["topic"]
    finally:
        admin.close()
    return {t: {k: v["value"] for k, v in got[t].items() if k.startswith("retention.")} for t in topics}


def test_the_stacks_topics_carry_the_configured_retention_and_a_watch_runs_on_the_log(stack):
    want = {"retention.ms": str(stack.cfg.kafka.retention_s * 1000), "retention.bytes": "-1"}
    assert _retention(stack.cfg.kafka, list(TOPICS)) == {t: want for t in TOPICS}
    assert stack.status()["services"]["broker-watch"]["running"]


def test_an_older_topic_is_given_the_retention_once_and_the_memory_watch_warns_past_its_bound(tmp_path):
    cfg = make_config(tmp_path, "kafka.storage_engine=memory", "kafka.memory_warn_bytes=1", "kafka.retention_s=3600")
    broker = Broker(cfg.kafka, cfg.state_path)
    try:
        broker.start()
        assert ensure_topics(cfg.kafka, {"trajectories": 1}) == ["trajectories"]      # made with no retention
        assert align_topic_configs(cfg.kafka, ["trajectories"], cfg.kafka.topic_configs()) == {
            "trajectories": {"retention.ms": "3600000", "retention.bytes": "-1"}}
        assert _retention(cfg.kafka, ["trajectories"]) == {
            "trajectories": {"retention.ms": "3600000", "retention.bytes": "-1"}}
        assert align_topic_configs(cfg.kafka, ["trajectories"], cfg.kafka.topic_configs()) == {}
        wait_for(lambda: "WARNING broker-watch:" in broker.watcher.logfile.read_text(), 30,
                 lambda: f"the memory watch's warning; its log:\n{broker.watcher.log_tail()}", interval_s=0.1)
    finally:
        broker.stop()
    assert not broker.watcher.is_running() and not broker.proc.is_running()


def test_over_s3_records_past_retention_are_deleted_unless_a_live_group_still_needs_them(tmp_path):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    retention_s = 4
    cfg = make_config(tmp_path, "kafka.storage_engine=s3", f"kafka.retention_s={retention_s}",
                      "kafka.retention_interval_s=0.5", "kafka.memory_warn_bytes=0")
    broker = Broker(cfg.kafka, cfg.state_path)
    tp = TopicPartition("events", 0)
    try:
        broker.start()
        assert broker.watcher.is_running()
        ensure_topics(cfg.kafka, {"events": 1}, configs=cfg.kafka.topic_configs())
        producer = KafkaProducer(**kafka_client_args(cfg.kafka), acks="all")
        group = KafkaConsumer(**kafka_client_args(cfg.kafka), group_id="live", enable_auto_commit=False)
        group.assign([tp])
        group.seek_to_beginning(tp)

        def produce(*values: bytes) -> None:
            for v in values:                     # one batch (one object in the store) each
                producer.send("events", v, partition=0).get(timeout=10)

        def consume(n: int) -> list[bytes]:
            got: list[bytes] = []
            wait_for(lambda: got.extend(r.value for rs in group.poll(timeout_ms=200).values() for r in rs)
                     or len(got) >= n, 20, lambda: f"{n} records for the group; got {got}", interval_s=0)
            return got

        def earliest() -> int:
            return group.beginning_offsets([tp])[tp]

        def commit_where_it_is() -> None:         # a live consumer commits as it goes, here without reading
            group.commit({tp: OffsetAndMetadata(group.position(tp), "", -1)})

        # the group reads and commits three records; once they are past retention they go (the newest batch stays)
        produce(b"old-0", b"old-1", b"old-2")
        assert consume(3) == [b"old-0", b"old-1", b"old-2"]
        commit_where_it_is()
        produce(b"held-3", b"held-4")
        # the group has not read 3 and 4, and keeps committing: they stay past retention
        wait_for(lambda: commit_where_it_is() or earliest() == 3, 30,
                 lambda: f"the batches before offset 3 deleted; earliest {earliest()}")
        for _ in range(int(2 * retention_s / 0.5)):
            commit_where_it_is()
            time.sleep(0.5)
        assert earliest() == 3
        # once it has read them they go too, and a new record is read by the group and by a reader from the start
        assert consume(2) == [b"held-3", b"held-4"]
        commit_where_it_is()
        produce(b"fresh-5")
        wait_for(lambda: earliest() == 5, 30, lambda: f"the batches before offset 5 deleted; earliest {earliest()}")
        assert consume(1) == [b"fresh-5"]
        for start in ("beginning", 1):           # from the log's start, and from a deleted position
            reader = KafkaConsumer(**kafka_client_args(cfg.kafka), group_id=None, enable_auto_commit=False)
            reader.assign([tp])
            reader.seek_to_beginning(tp) if start == "beginning" else reader.seek(tp, start)
            seen: list[bytes] = []
            wait_for(lambda: seen.extend(r.value for rs in reader.poll(timeout_ms=200).values() for r in rs) or seen,
                     20, f"a record for a reader from {start}", interval_s=0)
            assert seen == [b"fresh-5"]
            reader.close()
        log = LogRetention(broker.store.url).listing()
        assert sum("/records/" in o["Key"] for o in log) == 1
        assert "deleted" in broker.watcher.logfile.read_text()
        for c in (group, producer):
            c.close()
    finally:
        broker.stop()
    assert not broker.watcher.is_running() and not broker.store.proc.is_running()
