"""The archiver's view of Kafka: every partition of the event topics, by manual assignment, from given offsets.

No consumer-group membership (joins take ~23 s on the embedded broker and rebalance under our feet): partitions
are assigned explicitly and positions come from the archive's manifests. Offsets are also committed to the
consumer group `group_id` after each durable batch, for monitoring only; they are never read back.
End offsets are never used to decide that the archiver is caught up: Tansu reports a high watermark that is too
low (the last batch's base offset + 1). They are only used the other way round (`behind`): a position below even
that watermark proves there is more to read.
"""

from __future__ import annotations

import time
from typing import Protocol

from pipelines.archive.messages import SourceMessage
from schemas.kafka_clients import KafkaTarget, bootstrap_of, kafka_client_args

TopicPartitionKey = tuple[str, int]


class Source(Protocol):
    def cluster_id(self) -> str: ...
    def partitions(self) -> list[TopicPartitionKey]: ...
    def assign(self, positions: dict[TopicPartitionKey, int | None]) -> None: ...
    def poll(self, max_records: int, timeout_ms: int) -> list[SourceMessage]: ...
    def behind(self) -> bool: ...
    def commit(self, positions: dict[TopicPartitionKey, int]) -> None: ...
    def close(self) -> None: ...


class SourceError(RuntimeError):
    pass


class KafkaSource:
    """`Source` over kafka-python. `assign({tp: offset or None})`: None reads that partition from its beginning."""

    def __init__(self, bootstrap_servers: KafkaTarget, topics: tuple[str, ...], group_id: str,
                 topic_wait_s: float = 30.0, client_id: str = "rtrl-archiver", check_crcs: bool = True):
        from kafka import KafkaAdminClient, KafkaConsumer

        self.bootstrap_servers = bootstrap_of(bootstrap_servers)
        self.topics = topics
        self.topic_wait_s = topic_wait_s
        self._consumer = KafkaConsumer(**kafka_client_args(bootstrap_servers), group_id=group_id,
                                       client_id=client_id, enable_auto_commit=False, auto_offset_reset="earliest",
                                       max_partition_fetch_bytes=4 * 1024 * 1024, check_crcs=check_crcs)
        self._admin = KafkaAdminClient(**kafka_client_args(bootstrap_servers), client_id=client_id + "-admin")

    def cluster_id(self) -> str:
        cid = self._admin.describe_cluster().get("cluster_id")
        if not cid:
            raise SourceError(f"Kafka at {self.bootstrap_servers} reported no cluster id")
        return str(cid)

    def partitions(self) -> list[TopicPartitionKey]:
        """All partitions of the topics; waits up to `topic_wait_s` for topics that do not exist yet."""
        deadline = time.monotonic() + self.topic_wait_s
        while True:
            found = {t: self._consumer.partitions_for_topic(t) for t in self.topics}
            missing = sorted(t for t, ps in found.items() if not ps)
            if not missing:
                return sorted((t, p) for t, ps in found.items() for p in ps)
            if time.monotonic() >= deadline:
                raise SourceError(f"topics {missing} do not exist on {self.bootstrap_servers} (run `rtrl up`, which "
                                  "creates them)")
            time.sleep(0.5)

    def assign(self, positions: dict[TopicPartitionKey, int | None]) -> None:
        from kafka import TopicPartition

        tps = {tp: TopicPartition(*tp) for tp in positions}
        self._consumer.assign(list(tps.values()))
        start = [tps[tp] for tp, off in positions.items() if off is None]
        if start:
            self._consumer.seek_to_beginning(*start)
        for tp, off in positions.items():
            if off is not None:
                self._consumer.seek(tps[tp], off)

    def poll(self, max_records: int, timeout_ms: int) -> list[SourceMessage]:
        records = self._consumer.poll(timeout_ms=timeout_ms, max_records=max_records)
        out = []
        for recs in records.values():
            for r in recs:
                out.append(SourceMessage(r.topic, r.partition, r.offset, r.value, r.key, r.timestamp,
                                         tuple((k, v) for k, v in (r.headers or ()))))
        return out

    def behind(self) -> bool:
        """True if some partition certainly has records past the consumer's position (position < high watermark;
        the watermark may be too low, never too high, so False does not prove the archiver is caught up)."""
        ends = self._consumer.end_offsets(list(self._consumer.assignment()))
        return any(self._consumer.position(tp) < end for tp, end in ends.items())

    def lag(self) -> dict[TopicPartitionKey, int]:
        """Records past the consumer's position per assigned partition (Kafka's high watermark minus it)."""
        ends = self._consumer.end_offsets(list(self._consumer.assignment()))
        return {(tp.topic, tp.partition): max(0, end - self._consumer.position(tp)) for tp, end in ends.items()}

    def commit(self, positions: dict[TopicPartitionKey, int]) -> None:
        from kafka import TopicPartition
        from kafka.structs import OffsetAndMetadata

        self._consumer.commit({TopicPartition(*tp): OffsetAndMetadata(off, "", -1) for tp, off in positions.items()},
                              timeout_ms=5000)

    def close(self) -> None:
        self._consumer.close(autocommit=False)
        self._admin.close()
