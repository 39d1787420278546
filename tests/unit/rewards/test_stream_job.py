"""The streaming job: its unbounded ReadFromKafka source is constructed and configured (it cannot expand here:
that needs Beam's Java expansion service), and the job built on Kafka-shaped records from a TestStream writes the
same rows as a one-pass computation, with dead letters that keep their Kafka offsets."""

from __future__ import annotations

import uuid
from datetime import timedelta

import apache_beam as beam
import pytest
from apache_beam.coders import RowCoder
from apache_beam.io.kafka import ReadFromKafka
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.portability.api import external_transforms_pb2
from apache_beam.testing.test_stream import TestStream

from pipelines.rewards import stream_job
from pipelines.rewards.assemble import assemble_rewards
from pipelines.rewards.assemble_fn import END_OF_TIME
from pipelines.rewards.classifiers import get_classifier
from pipelines.rewards.frames import frames_from_events
from pipelines.rewards.spec import RewardSpec
from schemas.reward_table import read_reward_table
from schemas import to_wire, topic_for
from tests.unit.rewards.builders import T0, applied, followup, snapshot, trajectory

SPEC = RewardSpec()
_DEAD: dict[str, list] = {}


def _collect(key: str, item) -> None:
    _DEAD.setdefault(key, []).append(item)


def test_kafka_source_is_an_unbounded_read_from_kafka_of_the_telemetry_topics_with_metadata():
    src = stream_job.kafka_source("broker-1:9092,broker-2:9092", group_id="rewards-prod",
                                  expansion_service="localhost:8097")
    assert isinstance(src, ReadFromKafka)
    assert src._urn == ReadFromKafka.URN_WITH_METADATA and src._expansion_service == "localhost:8097"
    cfg = external_transforms_pb2.ExternalConfigurationPayload.FromString(src._payload)
    row = RowCoder(cfg.schema).decode(cfg.payload)
    assert row.consumer_config["bootstrap.servers"] == "broker-1:9092,broker-2:9092"
    assert row.consumer_config["group.id"] == "rewards-prod"
    assert sorted(row.topics) == sorted(topic_for(t) for t in ("trajectory", "edit_applied", "codebase_snapshot",
                                                               "followup_message", "tool_call_result",
                                                               "task_outcome"))
    assert row.timestamp_policy == "CreateTime" and row.max_num_records is None and row.max_read_time is None
    assert row.commit_offset_in_finalize


@pytest.mark.slow
def test_streaming_job_on_kafka_records_writes_the_rows_of_one_pass_and_dead_letters_keep_offsets(tmp_path):
    events = [trajectory("r1", 0), applied("r1", 10, "abcd"), snapshot(400, "abc"),
              trajectory("r2", 30, session_id="s2"), followup("r2", 60, "that is wrong", session_id="s2"),
              trajectory("r3", 5000, workspace_id="ws9")]
    records = [beam.Row(topic=topic_for(e.event_type), partition=0, offset=i, timestamp=None, key=None,
                        value=to_wire(e)) for i, e in enumerate(events)]
    records.append(beam.Row(topic=topic_for("trajectory"), partition=1, offset=7, timestamp=None, key=b"u",
                            value=b"\xff not json"))
    ts = TestStream().add_elements([beam.window.TimestampedValue(r, (T0 + timedelta(seconds=10 * i)).timestamp())
                                    for i, r in enumerate(records)]).advance_watermark_to_infinity()
    run_id = str(uuid.uuid4())
    opts = PipelineOptions()
    opts.view_as(StandardOptions).streaming = True
    with beam.Pipeline(options=opts) as p:
        _written, dead = stream_job.build(p, ts, SPEC, tmp_path / "out", shards=2)
        _ = dead | beam.Map(lambda d: _collect(run_id, d))
    table = read_reward_table(tmp_path / "out")
    expected = assemble_rewards(frames_from_events(events), SPEC, get_classifier(SPEC.classifier), END_OF_TIME).rows
    assert table.to_dicts() == expected.to_dicts() and table.height == 3
    windows = sorted(f.parent.name for f in (tmp_path / "out").rglob("part-s*.parquet"))
    assert windows and all(w.startswith("window=2026") for w in windows)
    [d] = _DEAD.pop(run_id)
    assert (d.reason, d.message.topic, d.message.partition, d.message.offset) == (
        "invalid_json", topic_for("trajectory"), 1, 7)


def test_rtrl_rewards_stream_refuses_the_direct_runner_with_a_pointer_to_cycles(tmp_path, capsys):
    from infra.cli import main

    rc = main(["--set", f'state_dir="{tmp_path}"', "rewards-stream", "--out", str(tmp_path / "o"), "--",
               "--runner=DirectRunner"])
    assert rc == 2 and "portable runner" in capsys.readouterr().err
