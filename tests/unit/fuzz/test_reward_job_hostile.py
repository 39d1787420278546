"""Nothing malformed reaches a reward row: the streaming reward job, fed real events interleaved with
hostile messages (malformed, oversized, wrong-type, unicode-edge, privacy mode with content) and replays of the real
ones, writes exactly the rows of the real events alone, and dead-letters every hostile message with a reason."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.testing.test_stream import TestStream

from pipelines.archive.deadletter import REASONS
from pipelines.rewards import stream_job
from pipelines.rewards.assemble import assemble_rewards
from pipelines.rewards.assemble_fn import END_OF_TIME
from pipelines.rewards.classifiers import get_classifier
from pipelines.rewards.frames import frames_from_events
from pipelines.rewards.spec import RewardSpec
from schemas.reward_table import read_reward_table
from schemas import SchemaError, parse_wire, to_wire, topic_for
from tests.unit.rewards.builders import T0, applied, followup, snapshot, trajectory

SPEC = RewardSpec()
_DEAD: dict[str, list] = {}


def _collect(key: str, item) -> None:
    _DEAD.setdefault(key, []).append(item)


def _hostile(valid: list) -> list[bytes]:
    """Each one a mutation of a real event that must be refused."""
    traj = json.loads(to_wire(valid[0]))
    fol = json.loads(to_wire(valid[4]))

    def j(d: dict, **kw) -> bytes:
        return json.dumps({**d, **kw, "event_id": str(uuid.uuid4())}).encode("utf-8", "surrogatepass")

    return [
        b"", b"\xff\xfe not json", b"[" * 50_000, b"null", b'"a string"', b"\xef\xbb\xbf" * 2 + to_wire(valid[0]),
        j(traj, behaviour_logprobs=[-1.0] * (len(traj["completion_token_ids"]) + 1)),   # logprobs do not match
        j(traj, completion_token_ids=[2**64] * len(traj["completion_token_ids"])),        # past int64
        j(traj, latency_ms="fast"), j(traj, prompt_token_ids="1,2,3"),                   # wrong types
        j(traj, privacy_mode=True),                                                      # privacy with content
        j(traj, event_time="9999-12-31T23:59:59-14:00"), j(traj, event_time="2026-11-01T12:00:00"),
        j(traj, user_id="\ud800"), j(traj, request_id="x" * 129), j(traj, schema_version=99),
        j(fol, text="\ud83d that is wrong"), j(fol, text="y" * 100_001), j(fol, privacy_mode=True),
        j(fol, event_type="followup_message\x00"), j(fol, extra_field=1),
        to_wire(valid[4])[:-1] + b', "pad": "' + b"p" * (4 * 1024 * 1024) + b'"}',          # over the wire cap
        to_wire(valid[1])[:-1] + b', "hunks": 1}',                                          # duplicate key, wrong type
    ]


def test_hostile_and_replayed_messages_change_no_reward_row_and_each_is_dead_lettered_with_a_reason(tmp_path):
    valid = [trajectory("r1", 0, tokens=3), applied("r1", 10, "abcd"), snapshot(400, "abc"),
             trajectory("r2", 30, session_id="s2", tokens=2), followup("r2", 60, "that is wrong", session_id="s2"),
             trajectory("r3", 90, session_id="s3", privacy_mode=True)]
    hostile = _hostile(valid)
    for h in hostile:
        with pytest.raises(SchemaError):
            parse_wire(h)
    replays = [to_wire(e) for e in valid]  # a client retry, or a hostile replay: same event ids
    values = [to_wire(e) for e in valid] + hostile + replays
    records = [beam.Row(topic=topic_for("trajectory"), partition=0, offset=i, timestamp=None, key=None, value=v)
               for i, v in enumerate(values)]
    ts = TestStream().add_elements([beam.window.TimestampedValue(r, (T0 + timedelta(seconds=i)).timestamp())
                                    for i, r in enumerate(records)]).advance_watermark_to_infinity()
    run_id = str(uuid.uuid4())
    opts = PipelineOptions()
    opts.view_as(StandardOptions).streaming = True
    with beam.Pipeline(options=opts) as p:
        _written, dead = stream_job.build(p, ts, SPEC, tmp_path / "out", shards=2)
        _ = dead | beam.Map(lambda d: _collect(run_id, d))
    table = read_reward_table(tmp_path / "out")
    expected = assemble_rewards(frames_from_events(valid), SPEC, get_classifier(SPEC.classifier), END_OF_TIME).rows
    assert table.to_dicts() == expected.to_dicts()
    assert sorted(table["request_id"].to_list()) == ["r1", "r2"]  # the privacy-mode request gets no row
    letters = _DEAD.pop(run_id)
    assert sorted(d.message.offset for d in letters) == list(range(len(valid), len(valid) + len(hostile)))
    assert all(d.reason in REASONS and d.detail for d in letters)
