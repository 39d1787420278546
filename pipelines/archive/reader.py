"""Read the Parquet event log: the replay source for the reward job and for data engineers.

Only live files are read (listed by the current checkpoint or a manifest after it: `state.load_state`), so a
reader running beside the archiver never sees a half-committed batch, nor a compacted file and its inputs both. Results are `polars.DataFrame`s with the Arrow schema of `schemas/` (timestamps are
`Datetime("us", "UTC")`, nested hunks/tool calls are structs/lists) plus the provenance columns `_topic`,
`_partition`, `_offset`. Files written under an older schema version read at the current one: when the versions
since only added fields, their columns take the fields' defaults (`schemas.arrow.fill_defaults`); otherwise rows
are upgraded one by one through `schemas.from_arrow`.

Rows come sorted by (event_time, event_id, _topic, _partition, _offset): the same archive always gives the same
frame. With `dedupe=True` (the default) only the first row of each (org_id, event_id) in that order is kept: event
ids are the clients', so the same id in two orgs is two events.

`root` is a local folder or an object-store URL (`s3://bucket/archive`, see `schemas.storage`), as a `str` or
`Path`.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import date, datetime, timezone
from pathlib import Path

import polars as pl
import pyarrow as pa

from pipelines.archive.deadletter import DEAD_LETTER_SCHEMA
from pipelines.archive.manifest import ArchiveError, committed_files, manifested_files
from pipelines.archive.writer import (DEAD_LETTERS, DUPLICATE_SCHEMA, DUPLICATES, EVENTS, PROVENANCE,
                                     PROVENANCE_COLUMNS, FileEntry)
from schemas import EVENT_TYPES, Event, arrow_schema, from_arrow, storage, to_arrow
from schemas.arrow import fill_defaults
from schemas.compat import is_additive

SORT_KEY = ["event_time", "event_id", *PROVENANCE_COLUMNS]


def _check_tz(name: str, t: datetime | None) -> None:
    if t is not None and t.tzinfo is None:
        raise ValueError(f"{name} must be timezone-aware (event times are UTC), got naive {t!r}")


def _in_date_range(f: FileEntry, start: datetime | None, end: datetime | None) -> bool:
    d = date.fromisoformat(f.event_date) if f.event_date else None
    if d is None:
        return True
    # event_date is the UTC date of event_time; end is exclusive, but a date equal to end's can hold earlier rows.
    return (start is None or d >= start.astimezone(timezone.utc).date()) and (
        end is None or d <= end.astimezone(timezone.utc).date())


def event_table_schema(event_type: str) -> pa.Schema:
    """The schema of an archived data file: `arrow_schema(event_type)` + the provenance columns."""
    base = arrow_schema(event_type)
    return pa.schema(list(base) + list(PROVENANCE), metadata=base.metadata)


def _read(root: Path | str, f: FileEntry, columns: list[str] | None = None) -> pa.Table:
    loc = storage.join(root, f.path)
    try:
        return storage.read_parquet(loc, columns)
    except FileNotFoundError:
        raise ArchiveError(f"{loc} is listed as committed but missing: the archive is damaged, or this read "
                           "listed the archive longer than archive.retire_grace_s before the file was compacted "
                           "or expired (read again)") from None


def _file_version(table: pa.Table) -> int | None:
    """The schema version a data file was written at (its metadata), None when absent or unreadable."""
    raw = (table.schema.metadata or {}).get(b"rtrl.schema_version", b"")
    return int(raw) if raw.isdigit() else None


def _fill_added_fields(table: pa.Table, event_type: str, target: pa.Schema) -> pa.Table:
    """A file written before versions that only added fields: those columns take their defaults, every row reads
    at the current version -- what `from_arrow` would give, column-wise (an archive written before a bump is read
    whole by every replay; taking each row through the model would cost more than the replay itself)."""
    cls = EVENT_TYPES[event_type]
    filled = fill_defaults(table, cls)
    current = pa.repeat(pa.scalar(cls.SCHEMA_VERSION, pa.int64()), filled.num_rows)
    filled = filled.set_column(filled.schema.get_field_index("schema_version"), "schema_version", current)
    return filled.select(target.names).cast(target)


def conform(table: pa.Table, event_type: str) -> pa.Table:
    """A data file's table at the current schema version of its event type."""
    target = event_table_schema(event_type)
    version, current = _file_version(table), EVENT_TYPES[event_type].SCHEMA_VERSION
    if version == current and table.column_names == target.names:
        return table if table.schema.equals(target) else table.cast(target)
    if version is not None and version < current and is_additive(event_type, version, current):
        return _fill_added_fields(table, event_type, target)
    data = table.drop_columns([c for c in PROVENANCE_COLUMNS if c in table.column_names])
    upgraded = to_arrow(from_arrow(data), event_type)  # older versions -> current (schemas.compat upgraders)
    for field in PROVENANCE:
        upgraded = upgraded.append_column(field, table.column(field.name).cast(field.type))
    return upgraded


def _envelope_frame() -> pl.DataFrame:
    names = [*Event.model_fields, "event_date"]
    schema = event_table_schema(next(iter(EVENT_TYPES)))
    return pl.from_arrow(pa.schema([schema.field(n) for n in names] + list(PROVENANCE)).empty_table())


def list_files(root: str | Path, event_type: str | None = None, start: datetime | None = None,
               end: datetime | None = None) -> list[FileEntry]:
    """Committed data files that can hold events of `event_type` (all types if None) in [start, end)."""
    return [f for f in manifested_files(storage.normalize(root), EVENTS)
            if (event_type is None or f.event_type == event_type) and _in_date_range(f, start, end)]


def read_file(root: str | Path, entry: FileEntry, start: datetime | None = None,
              end: datetime | None = None) -> pl.DataFrame:
    """One committed data file at the current schema version, rows with start <= event_time < end."""
    df = pl.from_arrow(conform(_read(storage.normalize(root), entry), entry.event_type))
    if start is not None:
        df = df.filter(pl.col("event_time") >= start)
    if end is not None:
        df = df.filter(pl.col("event_time") < end)
    return df


def read_times(root: str | Path, entry: FileEntry, start: datetime | None = None,
               end: datetime | None = None) -> pl.DataFrame:
    """`event_time` and `received_time` of one committed data file's rows with start <= event_time < end: two
    columns read, not the file (a file from before `received_time` existed reads it as null)."""
    df = read_columns(root, entry, ["received_time"], start, end)
    return df.with_columns(pl.col("received_time").cast(pl.Datetime("us", "UTC")))


def read_columns(root: str | Path, entry: FileEntry, columns: list[str], start: datetime | None = None,
                 end: datetime | None = None) -> pl.DataFrame:
    """`event_time` and `columns` of one committed data file's rows with start <= event_time < end, at the current
    schema version: those columns read, not the file (unless the file predates one of them: then the whole file
    is read and upgraded, and the column takes its default)."""
    root = storage.normalize(root)
    names = ["event_time", *(c for c in columns if c != "event_time")]
    try:
        df = pl.from_arrow(_read(root, entry, names))
    except (KeyError, pa.ArrowInvalid):
        df = read_file(root, entry).select(names)
    df = df.with_columns(pl.col("event_time").cast(pl.Datetime("us", "UTC")))
    if start is not None:
        df = df.filter(pl.col("event_time") >= start)
    if end is not None:
        df = df.filter(pl.col("event_time") < end)
    return df


def read_events(root: str | Path, event_type: str | None = None, start: datetime | None = None,
                end: datetime | None = None, dedupe: bool = True) -> pl.DataFrame:
    """Archived events with `start <= event_time < end` (either bound optional, timezone-aware), of one event type
    or all. For all types the frame has the union of their columns (null where a type has no such column)."""
    _check_tz("start", start)
    _check_tz("end", end)
    if event_type is not None and event_type not in EVENT_TYPES:
        raise ValueError(f"unknown event type {event_type!r}; known: {sorted(EVENT_TYPES)}")
    root = storage.normalize(root)
    by_type: dict[str, list[FileEntry]] = defaultdict(list)
    for f in list_files(root, event_type, start, end):
        by_type[f.event_type].append(f)
    frames = []
    for t in sorted(by_type):
        table = pa.concat_tables([conform(_read(root, f), t) for f in by_type[t]])
        frames.append(pl.from_arrow(table))
    if not frames:
        return pl.from_arrow(event_table_schema(event_type).empty_table()) if event_type else _envelope_frame()
    df = frames[0] if len(frames) == 1 else pl.concat(frames, how="diagonal_relaxed")
    if start is not None:
        df = df.filter(pl.col("event_time") >= start)
    if end is not None:
        df = df.filter(pl.col("event_time") < end)
    df = df.sort(SORT_KEY)
    if dedupe:   # by tenant key: an event id is the client's, unique only within its org
        df = df.unique(subset=["org_id", "event_id"], keep="first", maintain_order=True)
    return df


def archived_event_ids(root: str | Path) -> set[str]:
    """The event_id of every archived event (all types, all times)."""
    root = storage.normalize(root)
    ids: set[str] = set()
    for f in manifested_files(root, EVENTS):
        ids.update(_read(root, f, ["event_id"]).column("event_id").to_pylist())
    return ids


def read_duplicates(root: str | Path) -> pl.DataFrame:
    """Every duplicate copy the archiver dropped (event_type, event_id, event_time, received_time, provenance)
    with `cluster_id`, in source order."""
    root = storage.normalize(root)
    frames = [pl.from_arrow(_read(root, f.entry)).with_columns(cluster_id=pl.lit(f.cluster_id))
              for f in committed_files(root, DUPLICATES)]
    if not frames:
        return pl.from_arrow(DUPLICATE_SCHEMA.empty_table()).with_columns(cluster_id=pl.lit(None, pl.String))
    return pl.concat(frames).sort(["cluster_id", "_topic", "_partition", "_offset"])


def read_dead_letters(root: str | Path) -> pl.DataFrame:
    """Every archived dead letter (raw value, reason, field, detail, source topic/partition/offset), in source
    order."""
    root = storage.normalize(root)
    tables = [_read(root, f) for f in manifested_files(root, DEAD_LETTERS)]
    table = pa.concat_tables(tables) if tables else DEAD_LETTER_SCHEMA.empty_table()
    return pl.from_arrow(table).sort(["cluster_id", "topic", "partition", "offset"])


def event_time_span(root: str | Path, start: datetime | None = None,
                    end: datetime | None = None) -> tuple[datetime, datetime] | None:
    """(earliest, latest) event_time of the committed events with start <= event_time < end (either bound
    optional), None when there is none. Reads only the event_time column of the files whose dates can hold such
    events: cheap enough to check an archive before a replay."""
    _check_tz("start", start)
    _check_tz("end", end)
    root = storage.normalize(root)
    lo = hi = None
    for f in list_files(root, None, start, end):
        col = pl.from_arrow(_read(root, f, ["event_time"]).column("event_time"))
        if start is not None:
            col = col.filter(col >= start)
        if end is not None:
            col = col.filter(col < end)
        if col.len():
            a, b = col.min(), col.max()
            lo, hi = (a, b) if lo is None else (min(lo, a), max(hi, b))
    return None if lo is None else (lo, hi)
