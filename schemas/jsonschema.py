"""JSON Schema export (`rtrl schemas export DIR`): one file per event type, plus an index."""

from __future__ import annotations

import json
from pathlib import Path

from schemas.events import EVENT_TYPES
from schemas.topics import topic_for


def json_schema(event_type: str) -> dict:
    cls = EVENT_TYPES[event_type]
    schema = cls.model_json_schema()
    schema["$id"] = f"rtrl:{event_type}/v{cls.SCHEMA_VERSION}"
    schema["description"] = (
        f"{(cls.__doc__ or '').strip()}\n\nProduced by: {cls.PRODUCERS}.\nConsumed by: {cls.CONSUMERS}.\n"
        f"Kafka topic: {topic_for(event_type)}. Content fields (empty under privacy_mode): "
        f"{', '.join(cls.CONTENT_FIELDS) or 'none'}.").strip()
    return schema


def export(directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    index = {}
    for event_type, cls in sorted(EVENT_TYPES.items()):
        path = directory / f"{event_type}.v{cls.SCHEMA_VERSION}.schema.json"
        path.write_text(json.dumps(json_schema(event_type), indent=2, sort_keys=True) + "\n")
        written.append(path)
        index[event_type] = {"version": cls.SCHEMA_VERSION, "file": path.name, "topic": topic_for(event_type),
                             "producers": cls.PRODUCERS, "consumers": cls.CONSUMERS}
    idx = directory / "index.json"
    idx.write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
    written.append(idx)
    return written
