"""Retention over the embedded broker's storage "s3" (infra/stack/log_retention.py): which of Tansu's batch objects go
(past retention.ms or retention.bytes, oldest first, never the newest, never past what a live consumer group has
committed), how Tansu's keys and meta.json are read, and the moto server's two leaks kept shut
(infra/stack/moto_server.py)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from infra.stack.log_retention import (Batch, Commit, Retention, batch_key, commit_key, commit_offset,
                                       expired_batches, meta_key, plan, topic_retention)

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=timezone.utc)
HOUR = Retention(ms=3_600_000)


def ago(minutes: float) -> datetime:
    return NOW - timedelta(minutes=minutes)


def batches(*spec: tuple[int, float, int]) -> list[Batch]:
    """(base offset, minutes ago written, size) each."""
    return [Batch(f"b{base}", base, ago(m), size) for base, m, size in spec]


def bases(found: list[Batch]) -> list[int]:
    return [b.base for b in found]


def test_batches_written_more_than_retention_ms_ago_go_oldest_first_and_the_newest_always_stays():
    log = batches((0, 180, 10), (5, 120, 10), (9, 61, 10), (12, 59, 10), (20, 1, 10))
    assert bases(expired_batches(log, HOUR, [], NOW)) == [0, 5, 9]
    everything_old = batches((0, 300, 10), (5, 200, 10), (9, 100, 10))
    assert bases(expired_batches(everything_old, HOUR, [], NOW)) == [0, 5]     # 9 is the partition's newest
    assert expired_batches(batches((0, 300, 10)), HOUR, [], NOW) == []


def test_exactly_at_the_horizon_is_past_it_and_the_listing_order_does_not_matter():
    log = batches((7, 30, 1), (0, 60, 1), (3, 59.99, 1))
    assert bases(expired_batches(log, HOUR, [], NOW)) == [0]


def test_what_is_left_is_a_contiguous_tail_the_first_batch_that_stays_stops_the_deletion():
    # a batch written out of order (a newer time on a lower offset) keeps every batch after it
    log = batches((0, 120, 1), (4, 10, 1), (8, 120, 1), (12, 1, 1))
    assert bases(expired_batches(log, HOUR, [], NOW)) == [0]


def test_a_live_group_holds_the_batches_it_has_not_committed_past():
    log = batches((0, 180, 1), (5, 170, 1), (9, 160, 1), (12, 150, 1), (20, 1, 1))
    # committed 9: it has read offsets 0..8, i.e. batches 0 and 5 (batch 5 ends where batch 9 begins)
    assert bases(expired_batches(log, HOUR, [Commit(9, ago(1))], NOW)) == [0, 5]
    assert bases(expired_batches(log, HOUR, [Commit(8, ago(1))], NOW)) == [0]      # 8 is inside batch 5
    # the slowest live group rules
    assert bases(expired_batches(log, HOUR, [Commit(20, ago(1)), Commit(5, ago(2))], NOW)) == [0]
    assert expired_batches(log, HOUR, [Commit(0, ago(1))], NOW) == []


def test_a_group_that_has_not_committed_within_retention_ms_holds_nothing():
    log = batches((0, 180, 1), (5, 170, 1), (9, 1, 1))
    assert bases(expired_batches(log, HOUR, [Commit(0, ago(61))], NOW)) == [0, 5]
    assert bases(expired_batches(log, HOUR, [Commit(0, ago(61)), Commit(5, ago(59))], NOW)) == [0]


def test_retention_bytes_deletes_the_oldest_while_the_newer_batches_still_hold_the_bound():
    log = batches((0, 3, 100), (1, 2, 100), (2, 1, 100), (3, 0, 100))
    size_only = Retention(bytes=200)
    assert bases(expired_batches(log, size_only, [], NOW)) == [0, 1]       # 200 bytes left
    assert bases(expired_batches(log, Retention(bytes=250), [], NOW)) == [0]   # 300 left: one more would leave 200
    assert bases(expired_batches(log, Retention(bytes=0), [], NOW)) == [0, 1, 2]   # the newest stays
    # without a time bound every group that committed holds, however long ago
    assert bases(expired_batches(log, size_only, [Commit(1, ago(10_000))], NOW)) == [0]
    # either bound deletes
    both = Retention(ms=3_600_000, bytes=10_000)
    old = batches((0, 90, 100), (1, 2, 100), (2, 1, 100))
    assert bases(expired_batches(old, both, [], NOW)) == [0]


def test_a_topic_without_bounds_keeps_everything():
    log = batches((0, 10_000, 10**9), (1, 5_000, 10**9), (2, 1, 1))
    assert expired_batches(log, Retention(), [], NOW) == []
    assert not Retention(-1, -1).bounded and Retention(0, -1).bounded and Retention(-1, 0).bounded


def test_tansus_object_keys_are_read_from_their_layout():
    assert batch_key("clusters/rtrl-ab12/topics/telemetry.snapshots/partitions/0000000002/records/"
                     "00000000000000000145.batch") == (("rtrl-ab12", "telemetry.snapshots", 2), 145)
    assert commit_key("clusters/rtrl-ab12/groups/consumers/rtrl-archiver/offsets/trajectories/partitions/"
                      "0000000001.json") == (("rtrl-ab12", "trajectories", 1), "rtrl-archiver")
    assert meta_key("clusters/rtrl-ab12/meta.json") == "rtrl-ab12"
    for other in ("clusters/c/topics/t/partitions/0000000000/watermark.json", "clusters/c/groups/consumers/g.json",
                  "clusters/c/meta.json/x", "clusters/c/topics/t/partitions/0000000000/records/x.batch",
                  "other/c/topics/t/partitions/0000000000/records/00000000000000000000.batch"):
        assert batch_key(other) is None and commit_key(other) is None and meta_key(other) is None, other


def test_the_topics_retention_is_read_from_meta_json_as_tansu_writes_it():
    # a meta.json as Tansu 0.6.0 wrote it (one producer, one topic), with a second topic without settings
    meta = json.loads('{"producers":{"1":{"sequences":{"0":{"t":{"0":6758}}}}},"topics":{"t":{"id":"01a243be-031e-'
                      '7b23-b0ff-a8dd06240bd2","topic":{"name":"t","num_partitions":3,"replication_factor":1,'
                      '"assignments":[],"configs":[{"name":"retention.ms","value":"10000"},{"name":"retention.bytes",'
                      '"value":"-1"}]}},"u":{"topic":{"name":"u","configs":[{"name":"retention.ms","value":null}]}}},'
                      '"transactions":{}}')
    assert topic_retention(meta) == {"t": Retention(10_000, -1), "u": Retention(-1, -1)}
    assert topic_retention({}) == {}


def test_a_commit_that_cannot_be_read_holds_the_whole_partition():
    assert commit_offset(b'{"offset":6758,"leader_epoch":-1,"timestamp":null,"metadata":""}') == 6758
    assert commit_offset(b"not json") == 0 and commit_offset(b'{"offset":"x"}') == 0 and commit_offset(b"[]") == 0


def test_plan_applies_each_topics_rule_to_each_partition_of_each_cluster():
    def obj(key, minutes, size=10):
        return {"Key": key, "LastModified": ago(minutes), "Size": size}

    def rec(cluster, topic, p, base):
        return f"clusters/{cluster}/topics/{topic}/partitions/{p:010}/records/{base:020}.batch"

    listing = [obj("clusters/c1/meta.json", 0), obj("clusters/c2/meta.json", 0),
               obj(rec("c1", "t", 0, 0), 120), obj(rec("c1", "t", 0, 4), 90), obj(rec("c1", "t", 0, 8), 1),
               obj(rec("c1", "t", 1, 0), 120), obj(rec("c1", "t", 1, 3), 1),
               obj(rec("c1", "keep", 0, 0), 120), obj(rec("c1", "keep", 0, 1), 1),
               obj(rec("c2", "t", 0, 0), 120), obj(rec("c2", "t", 0, 2), 1),
               obj(rec("c1", "unknown", 0, 0), 120), obj(rec("c1", "unknown", 0, 1), 1),
               obj("clusters/c1/groups/consumers/g/offsets/t/partitions/0000000001.json", 1),
               obj("clusters/c1/topics/t/partitions/0000000000/watermark.json", 0)]
    hour = {"topic": {"configs": [{"name": "retention.ms", "value": "3600000"}]}}
    metas = {"c1": {"topics": {"t": hour, "keep": {"topic": {"configs": [{"name": "retention.ms", "value": "-1"}]}}}},
             "c2": {"topics": {"t": hour}}}
    commits = {"clusters/c1/groups/consumers/g/offsets/t/partitions/0000000001.json": b'{"offset": 2}'}
    doomed = {b.key for b in plan(listing, metas, commits, NOW)}
    assert doomed == {rec("c1", "t", 0, 0), rec("c1", "t", 0, 4), rec("c2", "t", 0, 0)}


# --- moto, the object store's server -------------------------------------------------------------------------------

def test_moto_keeps_no_model_object_once_untracked(monkeypatch):
    from moto.core.common_models import BaseModel
    from moto.s3.models import FakeKey

    from infra.stack.moto_server import untrack_models

    monkeypatch.setattr(BaseModel, "__new__", BaseModel.__dict__["__new__"])   # restored after the test
    monkeypatch.setattr(FakeKey, "instances_tracked", [])
    FakeKey("tracked", b"v", account_id="123456789012", region_name="us-east-1").dispose()
    assert len(FakeKey.instances_tracked) == 1      # what moto does: every object it ever made, kept for good
    untrack_models()
    untrack_models()                                # idempotent
    key = FakeKey("untracked", b"v", account_id="123456789012", region_name="us-east-1")
    assert key.value == b"v" and len(FakeKey.instances_tracked) == 1
    key.dispose()


def test_moto_keeps_only_the_newest_continuation_tokens(monkeypatch):
    from moto.s3.models import S3Backend

    from infra.stack.moto_server import RecentTokens, bound_pagination_tokens

    tokens = RecentTokens(limit=3)
    for i in range(5):
        tokens[f"t{i}"] = f"key{i}"
    assert list(tokens) == ["t2", "t3", "t4"] and tokens.get("t0") is None and tokens["t4"] == "key4"
    monkeypatch.setattr(S3Backend, "__init__", S3Backend.__dict__["__init__"])
    assert isinstance(S3Backend("us-east-1", "123456789012")._pagination_tokens, dict)   # moto's own attribute
    bound_pagination_tokens()
    bound_pagination_tokens()
    assert isinstance(S3Backend("us-east-1", "123456789012")._pagination_tokens, RecentTokens)


@pytest.mark.parametrize("engine, interval, bound, expect", [
    ("s3", 60.0, 2**31, ["--object-store", "--retention-interval", "60"]),
    ("s3", 0.0, 2**31, []),
    ("memory", 60.0, 2**31, []),
])
def test_broker_watch_is_told_to_enforce_retention_over_s3_only(tmp_path, engine, interval, bound, expect):
    from infra.stack.broker import Broker
    from infra.stack.config import KafkaConfig

    broker = Broker(KafkaConfig(storage_engine=engine, retention_interval_s=interval, memory_warn_bytes=bound),
                    tmp_path)
    started = []
    broker.watcher.start = lambda argv, **_: started.append(argv)
    broker._watch()
    (argv,) = started
    assert [a for a in argv if a in expect or a == "60"] == expect
    if expect:
        assert argv[argv.index("--object-store") + 1] == broker.store.url


def test_no_watcher_without_a_bound_and_without_retention_to_enforce(tmp_path):
    from infra.stack.broker import Broker
    from infra.stack.config import KafkaConfig

    for cfg in (KafkaConfig(memory_warn_bytes=0), KafkaConfig(storage_engine="s3", memory_warn_bytes=0,
                                                               retention_interval_s=0)):
        broker = Broker(cfg, tmp_path)
        broker.watcher.start = lambda argv, **_: pytest.fail(f"started {argv}")
        broker._watch()
    broker = Broker(KafkaConfig(storage_engine="s3", memory_warn_bytes=0), tmp_path)
    started = []
    broker.watcher.start = lambda argv, **_: started.append(argv)
    broker._watch()
    assert started and started[0][started[0].index("--bound") + 1] == "0"


def test_the_memory_warning_says_why_the_log_is_large_over_each_engine():
    from infra.stack.broker_watch import MemoryWatch

    enforced = MemoryWatch(1, "objectstore", enforced=True).observe(2)
    assert "retention window" in enforced and "lower kafka.retention_s" in enforced
    assert "deletes no record" in MemoryWatch(1, "broker").observe(2)


def test_a_pass_that_cannot_reach_the_store_is_logged_and_the_watch_goes_on():
    from botocore.exceptions import EndpointConnectionError

    from infra.stack.broker_watch import enforce_retention
    from infra.stack.log_retention import Enforced

    class Unreachable:
        def enforce(self, now):
            raise EndpointConnectionError(endpoint_url="http://127.0.0.1:1")

    class Deletes:
        def __init__(self, n):
            self.n = n

        def enforce(self, now):
            assert now.tzinfo is not None
            return Enforced(self.n, self.n * 2**20, 3, 3 * 2**20, 9)

    lines = []
    enforce_retention(Unreachable(), lines.append)
    enforce_retention(Deletes(0), lines.append)      # nothing deleted: nothing logged
    enforce_retention(Deletes(2), lines.append)
    assert len(lines) == 2 and "could not enforce" in lines[0]
    assert lines[1] == ("broker-watch: deleted 2 record batches (2.0 MiB) past their topic's retention; the log holds "
                        "3 batches (3.0 MiB)")


class FakeS3:
    """The calls LogRetention makes of a boto3 S3 client, over a dict of {key: (body, written)}."""

    def __init__(self, objects: dict[str, tuple[bytes, datetime]]):
        self.objects = objects
        self.deletes: list[int] = []

    def get_paginator(self, name):
        assert name == "list_objects_v2"
        fake = self

        class Pages:
            def paginate(self, Bucket, Prefix):
                keys = sorted(k for k in fake.objects if k.startswith(Prefix))
                for i in range(0, len(keys), 2):          # two keys a page: the pages are joined
                    yield {"Contents": [{"Key": k, "LastModified": fake.objects[k][1],
                                         "Size": len(fake.objects[k][0])} for k in keys[i:i + 2]]}
        return Pages()

    def get_object(self, Bucket, Key):
        import io
        return {"Body": io.BytesIO(self.objects[Key][0])}

    def delete_objects(self, Bucket, Delete):
        self.deletes.append(len(Delete["Objects"]))
        for o in Delete["Objects"]:
            del self.objects[o["Key"]]


def test_enforce_deletes_the_planned_batches_and_reports_what_is_left(monkeypatch):
    from infra.stack import log_retention
    from infra.stack.log_retention import LogRetention

    part = "clusters/c/topics/t/partitions/0000000000"
    objects = {f"{part}/records/{i:020}.batch": (b"x" * 100, ago(100 - i)) for i in range(5)}
    objects["clusters/c/meta.json"] = (b'{"topics":{"t":{"topic":{"configs":[{"name":"retention.ms","value":'
                                       b'"3600000"}]}}}}', ago(0))
    objects[f"{part}/watermark.json"] = (b'{"high":5}', ago(0))
    s3 = FakeS3(objects)
    monkeypatch.setattr(log_retention, "DELETE_CHUNK", 2)
    store = LogRetention.__new__(LogRetention)
    store.bucket, store.s3 = "tansu", s3
    done = store.enforce(NOW)
    # written 100..96 minutes ago, an hour's retention: all but the newest go, two keys a request
    assert (done.deleted, done.deleted_bytes, done.batches, done.log_bytes, done.objects) == (4, 400, 1, 100, 3)
    assert s3.deletes == [2, 2] and sorted(objects) == sorted([f"{part}/records/{4:020}.batch",
                                                               "clusters/c/meta.json", f"{part}/watermark.json"])
    assert store.enforce(NOW).deleted == 0


def test_the_soaks_probe_reads_the_log_from_the_object_store_over_s3_only(monkeypatch):
    from infra.bench.soak_probe import kafka_log_usage
    from infra.stack import log_retention
    from infra.stack.config import KafkaConfig

    seen = []
    monkeypatch.setattr(log_retention, "log_usage", lambda url: seen.append(url) or {"bytes": 7, "batches": 1,
                                                                                       "objects": 4})
    assert kafka_log_usage(KafkaConfig()) == {"engine": "memory", "bytes": None}
    assert kafka_log_usage(KafkaConfig(bootstrap_servers="k:9092", storage_engine="s3")) == {"engine": "cluster",
                                                                                            "bytes": None}
    assert kafka_log_usage(KafkaConfig(storage_engine="s3", port=30000)) == {"engine": "s3", "bytes": 7,
                                                                             "batches": 1, "objects": 4}
    assert seen == ["http://127.0.0.1:30001"]


def test_moto_records_no_empty_tag_set(monkeypatch):
    from moto.utilities.tagging_service import TaggingService

    from infra.stack.moto_server import skip_empty_tags

    monkeypatch.setattr(TaggingService, "tag_resource", TaggingService.__dict__["tag_resource"])
    tagger = TaggingService()
    tagger.tag_resource("arn:a", [])
    assert tagger.has_tags("arn:a")                 # what moto does for every object written
    skip_empty_tags()
    skip_empty_tags()
    tagger = TaggingService()
    tagger.tag_resource("arn:a", [])
    assert not tagger.has_tags("arn:a") and tagger.list_tags_for_resource("arn:a") == {"Tags": []}
    tagger.tag_resource("arn:b", [{"Key": "k", "Value": "v"}])
    tagger.tag_resource("arn:b", [])                 # a resource with tags keeps them
    assert tagger.get_tag_dict_for_resource("arn:b") == {"k": "v"}


def test_the_object_store_runs_this_module_with_two_malloc_arenas(tmp_path, monkeypatch):
    from infra.stack.broker import ObjectStore
    from infra.stack.config import KafkaConfig

    store = ObjectStore(KafkaConfig(storage_engine="s3"), tmp_path)
    started = {}
    monkeypatch.setattr(store.proc, "start", lambda argv, env=None, extra=None: started.update(argv=argv, env=env))
    monkeypatch.setattr(store.proc, "wait_healthy", lambda *a, **k: None)
    monkeypatch.setattr(store, "_make_bucket", lambda: None)
    monkeypatch.setattr("infra.stack.broker.port_is_free", lambda host, port: True)
    store.start()
    assert started["argv"][1:3] == ["-m", "infra.stack.moto_server"] and started["env"] == {"MALLOC_ARENA_MAX": "2"}
