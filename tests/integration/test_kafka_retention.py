"""Kafka retention on the real embedded broker: the topics `rtrl up` creates carry retention.ms and retention.bytes
from config (read back with DescribeConfigs), a topic made before the setting is brought to it once, and the memory
watch logs its warning past kafka.memory_warn_bytes and stops with the broker."""

import pytest

from infra.stack.broker import Broker, align_topic_configs, ensure_topics
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
