"""Kafka retention from config: the topic configs every topic is created with, which settings an existing topic is
given, and the embedded broker's memory watch (a warning once per crossing of kafka.memory_warn_bytes)."""

import pytest
from pydantic import ValidationError

from infra.stack.broker import configs_to_set
from infra.stack.broker_watch import REARM, MemoryWatch, resident_bytes
from infra.stack.config import KafkaConfig

GIB = 2**30


def test_topics_keep_a_day_and_have_no_size_bound_by_default():
    cfg = KafkaConfig()
    assert cfg.retention_s == 24 * 3600 >= 2 * 5 * 3600 + 4 * 3600    # two 5-hour cycles plus an outage margin
    assert cfg.topic_configs() == {"retention.ms": "86400000", "retention.bytes": "-1"}


def test_retention_settings_render_as_kafka_topic_configs_and_0_means_unbounded():
    assert KafkaConfig(retention_s=3600, retention_bytes=10**9).topic_configs() == {
        "retention.ms": "3600000", "retention.bytes": "1000000000"}
    assert KafkaConfig(retention_s=0).topic_configs()["retention.ms"] == "-1"
    with pytest.raises(ValidationError):
        KafkaConfig(retention_s=-1)


def test_an_existing_topic_is_given_only_the_settings_it_lacks_or_holds_another_value_of():
    wanted = {"retention.ms": "86400000", "retention.bytes": "-1"}
    assert configs_to_set({}, wanted) == wanted                                   # created before retention
    assert configs_to_set({"retention.ms": "604800000", "retention.bytes": "-1",
                           "cleanup.policy": "delete"}, wanted) == {"retention.ms": "86400000"}
    assert configs_to_set({"retention.ms": "86400000", "retention.bytes": "-1"}, wanted) == {}


def test_the_memory_watch_warns_once_per_crossing_of_the_bound():
    w = MemoryWatch(2 * GIB, "broker")
    assert w.observe(GIB) is None and w.observe(2 * GIB) is None                 # at the bound is not past it
    warning = w.observe(2 * GIB + 1)
    assert warning.startswith("WARNING broker-watch:") and "kafka.memory_warn_bytes" in warning
    assert "the broker (storage \"memory\")" in warning and "2.00 GiB" in warning
    assert w.observe(3 * GIB) is None and w.observe(int(1.95 * GIB)) is None     # still above REARM x bound
    back = w.observe(int(REARM * 2 * GIB) - 1)
    assert back is not None and not back.startswith("WARNING") and "back under" in back
    assert w.observe(GIB) is None
    assert w.observe(5 * GIB).startswith("WARNING")                               # a second crossing warns again


def test_the_object_store_is_named_as_the_holder_of_the_log_over_s3_storage():
    assert "the object store (storage \"s3\")" in MemoryWatch(1, "objectstore").observe(2)


def test_resident_bytes_come_from_vmrss_in_kb():
    status = "Name:\ttansu\nVmPeak:\t  900000 kB\nVmRSS:\t  123456 kB\nThreads:\t8\n"
    assert resident_bytes(status) == 123456 * 1024
    assert resident_bytes("Name:\tzombie\nState:\tZ (zombie)\n") is None
