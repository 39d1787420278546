"""`rtrl replay` refuses, exit 1 with a message and before any work, an archive that does not exist, holds nothing,
or holds no event in the range; over imported events it replays."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from infra import cli
from pipelines.archive.wire_import import import_wire
from schemas import to_wire
from tests.unit.archive.helpers import T0, all_types, make_event

RANGE = ["--start", "2026-11-01T00:00Z", "--end", "2026-11-01T12:00Z"]


def replay(tmp_path, archive, *range_):
    return cli.main(["--set", f"state_dir={tmp_path}/state", "replay", "--events", str(archive),
                     *(range_ or RANGE), "--out", str(tmp_path / "out")])


def imported(tmp_path, events):
    src = tmp_path / "in.jsonl"
    src.write_bytes(b"".join(to_wire(e) + b"\n" for e in events))
    import_wire(src, tmp_path / "arc")
    return tmp_path / "arc"


def test_a_missing_archive_exits_1_saying_how_to_build_one(tmp_path, capsys):
    assert replay(tmp_path, tmp_path / "nowhere") == 1
    err = capsys.readouterr().err
    assert f"no archive at {tmp_path / 'nowhere'}" in err and "rtrl archive import" in err
    assert not (tmp_path / "out").exists()


def test_an_empty_archive_exits_1(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert replay(tmp_path, tmp_path / "empty") == 1
    assert "holds no committed events" in capsys.readouterr().err


def test_a_range_without_events_exits_1_naming_the_span_held(tmp_path, capsys):
    arc = imported(tmp_path, all_types(7))
    assert replay(tmp_path, arc, "--start", "2026-12-01T00:00Z", "--end", "2026-12-02T00:00Z") == 1
    err = capsys.readouterr().err
    assert "holds no event in [2026-12-01T00:00:00+00:00, 2026-12-02T00:00:00+00:00)" in err
    assert f"its events span {T0.isoformat()} .. {T0.isoformat()}" in err
    # same day, outside the hours: the date pruning alone would not see it
    assert replay(tmp_path, arc, "--start", "2026-11-01T11:00Z", "--end", "2026-11-01T12:00Z") == 1


@pytest.mark.slow
def test_imported_events_replay(tmp_path, capsys):
    arc = imported(tmp_path, [make_event("trajectory", T0 + timedelta(seconds=i), request_id=f"r{i}")
                              for i in range(3)])
    assert replay(tmp_path, arc) == 0
    summary = json.loads(capsys.readouterr().out)["replay"]
    assert summary["events_read"] == 3 and summary["rows"] == 3
