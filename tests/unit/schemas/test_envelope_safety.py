"""Ids are visible ASCII (no space, no control character: safe as a Kafka key, in a file name, in a terminal), and
free text is stored without control characters (tabs and line breaks stay)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from schemas import SchemaError, parse_event

FIXTURES = Path(__file__).parents[3] / "schemas" / "fixtures"


def fixture(kind: str) -> dict:
    return json.loads((FIXTURES / kind / "v1.json").read_text())


@pytest.mark.parametrize("field,value", [("user_id", "u\x00-1"), ("org_id", "org a"), ("session_id", "s\r\nX: y"),
                                         ("user_id", "u\x1b[31m"), ("workspace_id", "w\u00e9"),
                                         ("request_id", "r\n1")])
def test_an_id_with_a_space_a_control_or_a_non_ascii_character_is_refused(field, value):
    e = fixture("edit_applied")
    e[field] = value
    with pytest.raises(SchemaError) as err:
        parse_event(e)
    assert err.value.field == field


def test_free_text_keeps_line_breaks_and_tabs_and_loses_control_characters():
    e = fixture("followup_message")
    e["text"] = "still broken\x00\r\n\tsee \x1b[31mred\x1b[0m\x7f\x85"
    assert parse_event(e).text == "still broken\r\n\tsee [31mred[0m"
