"""`rtrl schemas export` writes a JSON Schema per event type that documents producers and consumers."""

import json

from schemas import EVENT_TYPES
from schemas.jsonschema import export


def test_export_writes_one_schema_per_event_type_and_an_index(tmp_path):
    paths = export(tmp_path)
    assert len(paths) == len(EVENT_TYPES) + 1
    index = json.loads((tmp_path / "index.json").read_text())
    assert set(index) == set(EVENT_TYPES)
    for event_type, entry in index.items():
        schema = json.loads((tmp_path / entry["file"]).read_text())
        assert schema["$id"] == f"rtrl:{event_type}/v{entry['version']}"
        assert "Produced by:" in schema["description"] and "Consumed by:" in schema["description"]
        assert entry["producers"] and entry["consumers"] and entry["topic"]
        assert "event_id" in schema["required"]
