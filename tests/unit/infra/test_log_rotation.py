"""Logs rotate by size: a log over its bound is copied to <name>.1 and truncated in place, N copies are kept, and a
writer holding the file open (as the stack's processes hold theirs) goes on writing at the new end."""

from __future__ import annotations

from infra.stack.logs import copies, rotate, rotate_all
from infra.stack.process import ManagedProcess


def test_a_log_over_its_bound_is_rotated_and_its_open_writer_goes_on_at_the_new_end(tmp_path):
    log = tmp_path / "serving.log"
    with open(log, "ab", buffering=0) as writer:          # the child's appending file descriptor
        writer.write(b"a" * 100)
        assert not rotate(log, max_bytes=100, keep=2), "at the bound: not rotated"
        writer.write(b"b" * 10)
        assert rotate(log, max_bytes=100, keep=2)
        assert log.stat().st_size == 0 and (tmp_path / "serving.log.1").read_bytes() == b"a" * 100 + b"b" * 10
        writer.write(b"after\n")
    assert log.read_bytes() == b"after\n", "no hole: the writer appends at the new end"


def test_only_keep_copies_are_kept_newest_first(tmp_path):
    log = tmp_path / "archiver.log"
    for generation in range(5):
        log.write_bytes(str(generation).encode() * 20)
        assert rotate(log, max_bytes=10, keep=3)
    assert [p.name for p in copies(log)] == ["archiver.log.1", "archiver.log.2", "archiver.log.3"]
    assert [p.read_bytes()[:1] for p in copies(log)] == [b"4", b"3", b"2"]
    log.write_bytes(b"x" * 20)
    assert rotate(log, max_bytes=10, keep=1) and [p.name for p in copies(log)] == ["archiver.log.1"], \
        "a lowered keep drops the copies past it"
    log.write_bytes(b"y" * 20)
    assert rotate(log, max_bytes=10, keep=0) and copies(log) == [] and log.stat().st_size == 0


def test_every_log_of_a_folder_is_rotated_and_nothing_else(tmp_path):
    (tmp_path / "c7").mkdir()
    for name in ("broker.log", "c7/train.log", "notes.txt", "small.log"):
        (tmp_path / name).write_bytes(b"z" * (5 if name == "small.log" else 50))
    assert rotate_all(tmp_path, max_bytes=10, keep=1) == ["broker.log", "c7/train.log"]
    assert (tmp_path / "notes.txt").stat().st_size == 50 and (tmp_path / "small.log").stat().st_size == 5
    assert rotate_all(tmp_path / "missing", 10, 1) == []


def test_a_managed_process_log_is_bounded_by_the_defaults_unless_told_otherwise(tmp_path):
    p = ManagedProcess("collector", tmp_path)
    assert (p.log_max_bytes, p.log_keep) == (64 * 2**20, 3)
    assert ManagedProcess("collector", tmp_path, log_max_bytes=4096, log_keep=1).log_keep == 1
