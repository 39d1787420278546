"""Arrow schemas for Parquet, derived from the pydantic models so the two can never drift.

Mapping: str -> string, int -> int64, float -> float64, bool -> bool, datetime -> timestamp[us, UTC],
Enum/Literal -> string, list[X] -> list<X>, nested model -> struct, `X | None` -> nullable X.
Every event table also carries `event_date` (date32 of event_time, the archive's partition key).

Parquet written before a version that added fields lacks their columns; `fill_defaults` adds them with the
field's default, column-wise (the compatibility rule, `schemas/compat.py`, gives every added field one).
"""

from __future__ import annotations

import enum
import functools
import types
import typing
from datetime import datetime
from typing import Any, Iterable

import pyarrow as pa
from pydantic import BaseModel

from schemas.envelope import Event
from schemas.events import EVENT_TYPES
from schemas.wire import parse_event

TIMESTAMP = pa.timestamp("us", tz="UTC")


def _arrow_type(annotation: Any) -> tuple[pa.DataType, bool]:
    """Return (arrow type, nullable) for a field annotation."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _arrow_type(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) != 1:
            raise TypeError(f"unsupported union {annotation}")
        return _arrow_type(args[0])[0], True
    if origin is typing.Literal:
        return pa.string(), False
    if origin is list:
        inner, _ = _arrow_type(typing.get_args(annotation)[0])
        return pa.list_(inner), False
    if isinstance(annotation, type):
        if issubclass(annotation, BaseModel):
            return pa.struct(_fields(annotation)), False
        if issubclass(annotation, enum.Enum) or annotation is str:
            return pa.string(), False
        if annotation is bool:
            return pa.bool_(), False
        if annotation is int:
            return pa.int64(), False
        if annotation is float:
            return pa.float64(), False
        if annotation is datetime:
            return TIMESTAMP, False
    raise TypeError(f"no Arrow mapping for {annotation!r}")


def _fields(model: type[BaseModel]) -> list[pa.Field]:
    out = []
    for name, info in model.model_fields.items():
        typ, nullable = _arrow_type(info.annotation)
        out.append(pa.field(name, typ, nullable=nullable))
    return out


@functools.cache
def model_arrow_schema(model: type[BaseModel]) -> pa.Schema:
    """The Arrow schema of any rtrl model (events, reward rows), field for field."""
    return pa.schema(_fields(model))


def column_defaults(model: type[BaseModel]) -> dict[str, Any]:
    """The value of every field that has a default, as Arrow stores it (an enum by its value): what a column the
    model has and an older table lacks reads as."""
    out = {}
    for name, info in model.model_fields.items():
        if not info.is_required():
            value = info.get_default(call_default_factory=True)
            out[name] = value.value if isinstance(value, enum.Enum) else value
    return out


def fill_defaults(table: pa.Table, model: type[BaseModel]) -> pa.Table:
    """`table` with each column of `model` that it lacks and that has a default appended, every row holding that
    default (older Parquet: rows written before the field existed read as the model reads them). A missing column
    without a default stays missing, for the caller's cast to report."""
    schema = model_arrow_schema(model)
    for name, value in column_defaults(model).items():
        if name not in table.column_names:
            field = schema.field(name)
            table = table.append_column(field, pa.repeat(pa.scalar(value, field.type), table.num_rows))
    return table


@functools.cache
def arrow_schema(event_type: str) -> pa.Schema:
    """The Parquet schema of one event type (the model's fields plus `event_date`)."""
    cls = EVENT_TYPES[event_type]
    meta = {b"rtrl.event_type": event_type.encode(), b"rtrl.schema_version": str(cls.SCHEMA_VERSION).encode()}
    return pa.schema(_fields(cls) + [pa.field("event_date", pa.date32(), nullable=False)], metadata=meta)


def to_arrow(events: Iterable[Event], event_type: str) -> pa.Table:
    """Events of one type -> Arrow table with that type's schema."""
    rows = []
    for e in events:
        if e.event_type != event_type:
            raise ValueError(f"to_arrow({event_type!r}) got a {e.event_type!r} event")
        row = e.model_dump(mode="python")
        row["event_date"] = e.event_time.date()
        rows.append(row)
    schema = arrow_schema(event_type)
    return pa.Table.from_pylist(rows, schema=schema) if rows else schema.empty_table()


def from_arrow(table: pa.Table) -> list[Event]:
    """Arrow table (one event type, any older schema version) -> validated models at the current version."""
    rows = table.drop_columns([c for c in ("event_date",) if c in table.column_names]).to_pylist()
    return [parse_event(row) for row in rows]
