"""The compatibility rule: the current models read every fixture of every version ever written."""

import json
from pathlib import Path

import pyarrow as pa
import pytest

from schemas import CURRENT_VERSIONS, EVENT_TYPES, from_arrow, parse_event
from schemas.arrow import column_defaults, fill_defaults
from schemas.compat import is_additive, upgrade
from schemas.events import Trajectory

FIXTURES = Path(__file__).parents[3] / "schemas" / "fixtures"
ALL_FIXTURES = sorted(FIXTURES.glob("*/v*.json"))


def test_every_event_type_has_a_fixture_for_every_version_up_to_the_current_one():
    for event_type, current in CURRENT_VERSIONS.items():
        have = {int(p.stem[1:]) for p in (FIXTURES / event_type).glob("v*.json")}
        assert have == set(range(1, current + 1)), event_type


@pytest.mark.parametrize("path", ALL_FIXTURES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_current_schema_reads_older_fixture(path):
    d = json.loads(path.read_text())
    event = parse_event(d)
    assert event.schema_version == EVENT_TYPES[d["event_type"]].SCHEMA_VERSION
    for key, value in d.items():  # nothing the old producer wrote is lost or changed
        if key not in ("schema_version", "event_time", "received_time"):
            dumped = json.loads(event.model_dump_json())[key]
            assert dumped == value, key


def test_trajectory_v1_reads_as_untruncated_temperature_one_sampling():
    event = parse_event(json.loads((FIXTURES / "trajectory" / "v1.json").read_text()))
    assert (event.temperature, event.top_p, event.top_k) == (1.0, 1.0, -1)


def test_parquet_written_with_an_older_schema_reads_with_the_current_one():
    d = json.loads((FIXTURES / "trajectory" / "v1.json").read_text())
    old_table = pa.Table.from_pylist([{**d, "event_time": parse_event(d).event_time}])
    assert "temperature" not in old_table.column_names
    [event] = from_arrow(old_table)
    assert event.schema_version == Trajectory.SCHEMA_VERSION
    assert event.temperature == 1.0 and event.response_kind == "unknown"
    assert event.group_id is None and event.cut_short is False          # v4: one sample, the stream ran to its end


def test_missing_columns_with_defaults_are_filled_column_wise_as_the_model_reads_them():
    v3 = json.loads((FIXTURES / "trajectory" / "v3.json").read_text())
    old_table = pa.Table.from_pylist([{**v3, "event_time": parse_event(v3).event_time}])
    filled = fill_defaults(old_table, Trajectory)
    assert filled.column("group_id").to_pylist() == [None] and filled.column("cut_short").to_pylist() == [False]
    assert filled.schema.field("group_id").type == pa.string() and filled.schema.field("group_id").nullable
    assert column_defaults(Trajectory)["response_kind"] == "unknown"   # an enum as Arrow stores it
    assert "request_id" not in column_defaults(Trajectory)            # required: never made up
    assert fill_defaults(old_table.drop_columns(["request_id"]), Trajectory).num_columns == filled.num_columns - 1


def test_only_versions_without_an_upgrader_between_them_are_additive():
    assert is_additive("trajectory", 2, Trajectory.SCHEMA_VERSION)
    assert is_additive("trajectory", 3, 4) and is_additive("trajectory", 4, 4)
    assert not is_additive("trajectory", 1, 4)                         # v1 -> v2 has an upgrader
    assert not is_additive("trajectory", 5, 4) and not is_additive("trajectory", 0, 4)


def test_upgrade_refuses_a_version_from_the_future():
    with pytest.raises(ValueError, match="newer"):
        upgrade({"event_type": "trajectory", "schema_version": 3}, 2)


def test_upgrade_refuses_a_version_below_one_without_looping():
    with pytest.raises(ValueError, match=">= 1"):
        upgrade({"event_type": "trajectory", "schema_version": -10**12}, 2)
