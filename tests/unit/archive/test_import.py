"""`rtrl archive import`: wire JSON lines -> a committed archive the replay reads; bad lines -> dead letters with
file:line and reason; older schema versions upgraded; directories walked. `import_frames` takes older frames."""

from __future__ import annotations

import gzip
import json
from datetime import timedelta
from pathlib import Path

import polars as pl
import pytest

from infra import cli
from pipelines.archive.importer import import_frames
from pipelines.archive.manifest import load_manifests
from pipelines.archive.reader import read_events
from pipelines.archive.wire_import import import_wire
from schemas import EVENT_TYPES, to_arrow, to_wire
from tests.unit.archive.helpers import FIXTURES, T0, all_types, make_event


def write_lines(path: Path, lines: list[bytes | str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = b"".join((x if isinstance(x, bytes) else x.encode()) + b"\n" for x in lines)
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
    return path


def test_valid_events_land_and_the_reader_gives_them_back(tmp_path):
    events = all_types(3 * len(EVENT_TYPES))     # three of each type
    n = len(events)
    for e in events:
        e.received_time = None
    events[0].received_time = T0 + timedelta(seconds=5)  # kept
    src = write_lines(tmp_path / "in.jsonl", [to_wire(e) for e in events])
    s = import_wire(src, tmp_path / "arc")
    assert s.events_read == n and s.imported_total == n and s.dead_letters == 0 and s.dead_letter_file is None
    assert s.imported == {t: 3 for t in sorted(EVENT_TYPES)}
    assert s.received_time_filled == n - 1
    df = read_events(tmp_path / "arc")
    assert sorted(df["event_id"]) == sorted(e.event_id for e in events)
    by_id = {r["event_id"]: r for r in df.select("event_id", "event_time", "received_time").to_dicts()}
    assert by_id[events[0].event_id]["received_time"] == T0 + timedelta(seconds=5)
    assert all(by_id[e.event_id]["received_time"] == e.event_time for e in events[1:])  # received at event_time
    assert {m.cluster_id for m in load_manifests(tmp_path / "arc")} == {s.import_id}
    assert json.loads((tmp_path / "arc" / "_imports" / f"{s.import_id}.json").read_text())["imported_total"] == n


def test_two_imports_add_up_without_overwriting_each_other(tmp_path):
    a, b = all_types(7), all_types(7)
    import_wire(write_lines(tmp_path / "a.jsonl", [to_wire(e) for e in a]), tmp_path / "arc")
    import_wire(write_lines(tmp_path / "b.jsonl", [to_wire(e) for e in b]), tmp_path / "arc")
    assert read_events(tmp_path / "arc").height == 14


def test_bad_lines_are_dead_letters_with_file_line_and_reason(tmp_path):
    good = make_event("edit_applied")
    bad_field = json.loads(to_wire(make_event("edit_applied")))
    bad_field["user_id"] = ""
    newer = json.loads(to_wire(make_event("followup_message")))
    newer["schema_version"] = 99
    src = write_lines(tmp_path / "in.jsonl", [
        to_wire(good), "", "{not json", '{"event_type": "nope", "schema_version": 1}', json.dumps(bad_field),
        "[1, 2]", json.dumps(newer), to_wire(good)])  # blank line skipped; the last a duplicate event_id
    s = import_wire(src, tmp_path / "arc")
    assert s.events_read == 7 and s.imported_total == 1 and s.duplicates_dropped == 1 and s.dead_letters == 5
    assert s.dead_letters_by_reason == {"invalid_field": 1, "invalid_json": 1, "not_an_object": 1,
                                        "unknown_event_type": 1, "unsupported_schema_version": 1}
    letters = [json.loads(x) for x in Path(s.dead_letter_file).read_text().splitlines()]
    assert [(d["file"], d["line"], d["reason"]) for d in letters] == [
        (str(src), 3, "invalid_json"), (str(src), 4, "unknown_event_type"), (str(src), 5, "invalid_field"),
        (str(src), 6, "not_an_object"), (str(src), 7, "unsupported_schema_version")]
    assert letters[2]["field"] == "user_id" and letters[1]["raw"].startswith('{"event_type": "nope"')
    assert read_events(tmp_path / "arc")["event_id"].to_list() == [good.event_id]


def test_an_older_version_event_is_upgraded(tmp_path):
    v1 = json.loads((FIXTURES / "trajectory" / "v1.json").read_text())
    assert v1["schema_version"] == 1 and "temperature" not in v1
    s = import_wire(write_lines(tmp_path / "old.jsonl", [json.dumps(v1)]), tmp_path / "arc")
    assert s.imported == {"trajectory": 1} and s.dead_letters == 0
    row = read_events(tmp_path / "arc", "trajectory").row(0, named=True)
    assert row["event_id"] == v1["event_id"]
    assert row["schema_version"] == EVENT_TYPES["trajectory"].SCHEMA_VERSION
    assert (row["temperature"], row["top_p"], row["top_k"]) == (1.0, 1.0, -1)   # the v1 -> v2 upgrader


def test_a_directory_is_walked_recursively(tmp_path):
    events = all_types(9)
    write_lines(tmp_path / "in" / "a.jsonl", [to_wire(e) for e in events[:3]])
    write_lines(tmp_path / "in" / "deep" / "b.json.gz", [to_wire(e) for e in events[3:6]])
    write_lines(tmp_path / "in" / "deep" / "er" / "c.ndjson", [to_wire(e) for e in events[6:]] + ["oops"])
    write_lines(tmp_path / "in" / "notes.txt", ["not an event"])  # not an input file
    s = import_wire(tmp_path / "in", tmp_path / "arc")
    assert s.files == 3 and s.imported_total == 9 and s.dead_letters == 1
    letter = json.loads(Path(s.dead_letter_file).read_text())
    assert (letter["file"], letter["line"]) == (str(tmp_path / "in" / "deep" / "er" / "c.ndjson"), 4)
    assert read_events(tmp_path / "arc").height == 9


def test_import_frames_fills_the_defaults_of_an_older_additive_version(tmp_path):
    events = [make_event("trajectory", T0 + timedelta(seconds=i), request_id=f"r{i}") for i in range(3)]
    frame = pl.from_arrow(to_arrow(events, "trajectory")).drop("group_id", "cut_short", "response_kind", "event_date")
    frame = frame.with_columns(schema_version=pl.lit(2, pl.Int64)).select(reversed(frame.columns))  # any order
    assert import_frames(tmp_path / "arc", {"trajectory": frame}) == 3
    df = read_events(tmp_path / "arc", "trajectory")
    assert df["schema_version"].to_list() == [EVENT_TYPES["trajectory"].SCHEMA_VERSION] * 3
    assert df["cut_short"].to_list() == [False] * 3 and df["group_id"].to_list() == [None] * 3


def test_import_frames_upgrades_a_version_with_an_upgrader_row_by_row(tmp_path):
    events = [make_event("trajectory", T0, request_id="r0")]
    frame = pl.from_arrow(to_arrow(events, "trajectory")).drop(
        "temperature", "top_p", "top_k", "group_id", "cut_short", "response_kind").with_columns(
        schema_version=pl.lit(1, pl.Int64))
    import_frames(tmp_path / "arc", {"trajectory": frame})
    assert read_events(tmp_path / "arc", "trajectory").select("temperature", "top_k").row(0) == (1.0, -1)


# --- the command ---------------------------------------------------------------------------------------------------

def test_the_command_prints_a_summary_and_writes_to_the_configured_archive_by_default(tmp_path, capsys):
    src = write_lines(tmp_path / "in.jsonl", [to_wire(e) for e in all_types(7)] + ["{bad"])
    rc = cli.main(["--set", f"state_dir={tmp_path}/state", "archive", "import", str(src)])
    out, err = capsys.readouterr()
    assert rc == 0, err
    s = json.loads(out)["archive_import"]
    assert s["archive"] == str(tmp_path / "state" / "archive") and s["imported_total"] == 7
    assert s["events_read"] == 8 and s["dead_letters"] == 1 and "1 dead letter(s)" in err
    assert read_events(tmp_path / "state" / "archive").height == 7


def test_strict_exits_3_on_dead_letters_and_nothing_valid_exits_1(tmp_path, capsys):
    src = write_lines(tmp_path / "in.jsonl", [to_wire(make_event()), "{bad"])
    assert cli.main(["archive", "import", str(src), "--archive", str(tmp_path / "a"), "--strict"]) == 3
    bad = write_lines(tmp_path / "bad.jsonl", ["{bad"])
    assert cli.main(["archive", "import", str(bad), "--archive", str(tmp_path / "b")]) == 1
    assert "no valid event" in capsys.readouterr().err
    assert cli.main(["archive", "import", str(tmp_path / "missing.jsonl"), "--archive", str(tmp_path / "c")]) == 1
    assert "no such file or directory" in capsys.readouterr().err


@pytest.mark.parametrize("sub", [["archive", "import", "--help"], ["archive", "--help"]])
def test_help_explains(sub, capsys):
    with pytest.raises(SystemExit):
        cli.main(sub)
    out = capsys.readouterr().out
    assert "import" in out and ("dead letter" in out or "SUBCOMMAND" in out)
