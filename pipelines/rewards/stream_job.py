"""The streaming reward job: an unbounded Kafka read for a portable runner (Flink, Spark, Dataflow) -> the same
Parse, ComputeRewards and reward-table sink as cycle and replay runs.

    rtrl rewards-stream --out DIR -- --runner=FlinkRunner --flink_master=HOST:8081

The source is Beam's cross-language `ReadFromKafka` (Java KafkaIO) with metadata, so every record keeps its
topic/partition/offset for dead letters; element timestamps follow the records' CreateTime, and KafkaIO's
watermark drives the join's event-time timers. Expanding it needs Beam's Java expansion service (a JDK and the
`beam-sdks-java-io-expansion-service` jar, fetched from Maven by Beam or passed as `expansion_service`), so it runs
where a portable runner runs, not on the DirectRunner of this machine; cycles here use bounded offset ranges
(`cycle_job`). Rows reach the table as they mature: each emitted frame is a file under
`window=<hour of mature time>` (`WriteRewardParts`).
"""

from __future__ import annotations

from pathlib import Path

import apache_beam as beam

from pipelines.archive.messages import SourceMessage
from pipelines.rewards.compute import ComputeRewards
from pipelines.rewards.parse import DEAD_LETTER, ParseEventsFn
from pipelines.rewards.sink import WriteRewardParts
from pipelines.rewards.spec import RewardSpec
from schemas.kafka_clients import KafkaTarget, kafka_consumer_config
from schemas.topics import EVENT_TOPICS


def kafka_source(bootstrap: KafkaTarget, topics: tuple[str, ...] = EVENT_TOPICS, group_id: str = "rtrl-rewards",
                 expansion_service: str | None = None):
    """Beam's ReadFromKafka configured for the telemetry topics (raw bytes, with metadata, CreateTime); bootstrap and
    security from `kafka_consumer_config` (Java client properties)."""
    from apache_beam.io.kafka import ReadFromKafka

    return ReadFromKafka(
        consumer_config={**kafka_consumer_config(bootstrap), "group.id": group_id, "auto.offset.reset": "earliest",
                         "enable.auto.commit": "false"},
        topics=list(topics), with_metadata=True, timestamp_policy=ReadFromKafka.create_time_policy,
        commit_offset_in_finalize=True, expansion_service=expansion_service)


def to_message(record) -> SourceMessage:
    """A KafkaIO record row (topic, partition, offset, timestamp, key, value, ...) as a SourceMessage."""
    return SourceMessage(record.topic, int(record.partition), int(record.offset),
                         None if record.value is None else bytes(record.value),
                         None if getattr(record, "key", None) is None else bytes(record.key),
                         getattr(record, "timestamp", None))


def build(p: beam.Pipeline, source: beam.PTransform, spec: RewardSpec, out: str | Path, shards: int | None = None):
    """source -> KafkaIO-shaped records. Returns (files written, dead letters)."""
    parsed = (p | "ReadKafka" >> source
              | "ToMessage" >> beam.Map(to_message)
              | "Parse" >> beam.ParDo(ParseEventsFn()).with_outputs(DEAD_LETTER, main="events"))
    rows, _carry, outcomes = parsed.events | "ComputeRewards" >> ComputeRewards(spec, shards)
    written = ((rows | "WriteRewardParts" >> WriteRewardParts(out),
                outcomes | "WriteOutcomeParts" >> WriteRewardParts(out, outcomes=True))
               | "Written" >> beam.Flatten())
    return written, parsed[DEAD_LETTER]
