"""The compatibility rule: the current models read every fixture of every version ever written."""

import json
from pathlib import Path

import pyarrow as pa
import pytest

from schemas import CURRENT_VERSIONS, EVENT_TYPES, from_arrow, parse_event
from schemas.compat import upgrade

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
    assert event.schema_version == 3 and event.temperature == 1.0 and event.response_kind == "unknown"


def test_upgrade_refuses_a_version_from_the_future():
    with pytest.raises(ValueError, match="newer"):
        upgrade({"event_type": "trajectory", "schema_version": 3}, 2)


def test_upgrade_refuses_a_version_below_one_without_looping():
    with pytest.raises(ValueError, match=">= 1"):
        upgrade({"event_type": "trajectory", "schema_version": -10**12}, 2)
