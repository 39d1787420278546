"""The on-disk spool: order, bound, fsync, durable cursor across reopen and crash, torn tails, segment deletion."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from instrumentation import spool as spool_module
from instrumentation.spool import Spool, SpoolError
from instrumentation.spool_format import HEADER, encode
from instrumentation.transport import Record

REPO = Path(__file__).parents[3]


def rec(i: int, size: int = 10) -> Record:
    return Record("telemetry.edits", f"user-{i % 3}".encode(), f"{i:08d}".encode() + b"x" * size)


def open_spool(path, **kw) -> Spool:
    return Spool(path, **{"max_bytes": 10 * 1024 * 1024, "fsync_every": 100, "segment_bytes": 4096, **kw})


def drain(sp: Spool, chunk: int = 7) -> list[Record]:
    out = []
    while True:
        records, pos = sp.read(chunk)
        if not records:
            return out
        out += records
        sp.commit(pos)


def segments(path: Path) -> list[str]:
    return sorted(p.name for p in path.glob("seg-*.log"))


def test_records_come_back_in_order_across_segments(tmp_path):
    sp = open_spool(tmp_path)
    records = [rec(i, size=200) for i in range(100)]
    assert sp.append(records[:60]) == 60 and sp.append(records[60:]) == 40
    assert len(segments(tmp_path)) > 3  # 4 KiB segments
    assert drain(sp) == records and sp.empty


def test_read_without_commit_returns_the_same_records_again(tmp_path):
    sp = open_spool(tmp_path)
    sp.append([rec(i) for i in range(5)])
    first, _ = sp.read(3)
    again, pos = sp.read(3)
    assert first == again == [rec(0), rec(1), rec(2)]
    sp.commit(pos)
    assert sp.read(10)[0] == [rec(3), rec(4)]


def test_bound_refuses_what_does_not_fit(tmp_path):
    one = len(encode(rec(0)))
    sp = open_spool(tmp_path, max_bytes=10 * one + one // 2)
    assert sp.append([rec(i) for i in range(15)]) == 10
    assert sp.bytes == 10 * one and sp.bytes <= sp.max_bytes
    assert drain(sp) == [rec(i) for i in range(10)]
    assert sp.append([rec(99)]) == 1  # room again once sent


def test_cursor_survives_reopen_so_sent_records_are_not_resent(tmp_path):
    sp = open_spool(tmp_path)
    sp.append([rec(i) for i in range(20)])
    records, pos = sp.read(12)
    sp.commit(pos)
    sp.close()
    again = open_spool(tmp_path)
    assert drain(again) == [rec(i) for i in range(12, 20)]


@pytest.mark.integration
def test_appended_records_survive_a_process_crash(tmp_path):
    script = textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {str(REPO)!r})
        from instrumentation.spool import Spool
        from instrumentation.transport import Record
        sp = Spool({str(tmp_path)!r}, max_bytes=1 << 20, fsync_every=1000)
        sp.append([Record("t", b"k", b"v%d" % i) for i in range(50)])
        records, pos = sp.read(20)
        sp.commit(pos)
        sp.append([Record("t", b"k", b"v%d" % i) for i in range(50, 60)])
        os._exit(9)  # no close, no sync
    """)
    assert subprocess.run([sys.executable, "-c", script], timeout=60).returncode == 9
    sp = open_spool(tmp_path)
    assert drain(sp) == [Record("t", b"k", b"v%d" % i) for i in range(20, 60)]


def test_fsync_every_n_records_and_on_sync(tmp_path, monkeypatch):
    synced = []
    real_fsync = os.fsync

    def counting_fsync(fd):
        if os.readlink(f"/proc/self/fd/{fd}").endswith(".log"):
            synced.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(spool_module.os, "fsync", counting_fsync)
    sp = open_spool(tmp_path, fsync_every=10, segment_bytes=1 << 20)
    for i in range(35):
        sp.append([rec(i)])
    assert len(synced) == 3
    sp.sync()
    assert len(synced) == 4
    sp.sync()  # nothing new: no fsync
    assert len(synced) == 4
    sp.close()


def test_torn_last_record_is_truncated_at_open(tmp_path):
    sp = open_spool(tmp_path, segment_bytes=1 << 20)
    sp.append([rec(i) for i in range(5)])
    sp.close()
    (seg,) = tmp_path.glob("seg-*.log")
    whole = seg.stat().st_size
    with open(seg, "ab") as f:
        f.write(encode(rec(5))[:-3])  # a crash in the middle of a write
    again = open_spool(tmp_path)
    assert again.truncated_bytes == len(encode(rec(5))) - 3 and seg.stat().st_size == whole
    again.append([rec(6)])
    assert drain(again) == [rec(0), rec(1), rec(2), rec(3), rec(4), rec(6)]


def test_corrupt_record_ends_its_segment_and_replay_goes_on(tmp_path):
    sp = open_spool(tmp_path, segment_bytes=1 << 20)
    sp.append([rec(i) for i in range(3)])
    sp.close()
    sp = open_spool(tmp_path, segment_bytes=1 << 20)
    sp.append([rec(i) for i in range(3, 6)])  # a second segment
    sp.close()
    first = sorted(tmp_path.glob("seg-*.log"))[0]
    data = bytearray(first.read_bytes())
    data[len(encode(rec(0))) + HEADER.size + 2] ^= 0xFF  # flip a byte inside the second record's body
    first.write_bytes(bytes(data))
    sp = open_spool(tmp_path)
    assert drain(sp) == [rec(0), rec(3), rec(4), rec(5)]
    assert sp.corrupt_segments == 1


def test_fully_sent_segments_are_deleted(tmp_path):
    sp = open_spool(tmp_path)
    sp.append([rec(i, size=500) for i in range(40)])
    before = segments(tmp_path)
    assert len(before) >= 4
    records, pos = sp.read(20)
    sp.commit(pos)
    remaining = segments(tmp_path)
    assert remaining == before[len(before) - len(remaining):] and len(remaining) < len(before)
    drain(sp)
    assert segments(tmp_path) == [] and sp.bytes == 0 and sp.empty


def test_spool_is_usable_again_after_it_was_emptied_and_reopened(tmp_path):
    sp = open_spool(tmp_path)
    sp.append([rec(1)])
    drain(sp)
    sp.append([rec(2)])
    sp.close()
    again = open_spool(tmp_path)
    assert drain(again) == [rec(2)]
    again.close()
    assert drain(open_spool(tmp_path)) == []


def test_a_directory_is_owned_by_one_open_spool(tmp_path):
    sp = open_spool(tmp_path)
    with pytest.raises(SpoolError, match="open in another process or client"):
        open_spool(tmp_path)
    sp.close()
    open_spool(tmp_path).close()


def test_closed_spool_refuses_reads_and_writes(tmp_path):
    sp = open_spool(tmp_path)
    sp.close()
    with pytest.raises(SpoolError):
        sp.append([rec(1)])
    with pytest.raises(SpoolError):
        sp.read(1)


def test_unreadable_cursor_replays_everything_rather_than_nothing(tmp_path):
    sp = open_spool(tmp_path)
    sp.append([rec(i) for i in range(4)])
    records, pos = sp.read(2)
    sp.commit(pos)
    sp.close()
    (tmp_path / "cursor.json").write_text("{not json")
    assert drain(open_spool(tmp_path)) == [rec(i) for i in range(4)]


def test_record_fields_round_trip_exactly(tmp_path):
    sp = open_spool(tmp_path)
    odd = [Record("trajectories", b"", b""), Record("telemetry.followups", "ü".encode(), bytes(range(256)))]
    sp.append(odd)
    assert drain(sp) == odd
