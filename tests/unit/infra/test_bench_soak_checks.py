"""`rtrl bench soak`'s probes (state usage by part, process memory from /proc) and its checks, on made-up records."""

from __future__ import annotations

import os
from pathlib import Path

from infra.bench.soak_probe import process_rss, state_usage, tree_rss
from infra.bench.soak_verdict import (check_archive, check_disk, check_done, check_memory, check_time,
                                      check_traffic, verdict)


def _write(path: Path, size: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)


def test_state_usage_counts_each_part_once_and_the_rest_as_other(tmp_path):
    _write(tmp_path / "mlflow-artifacts" / "a" / "w.bin", 100)
    _write(tmp_path / "rewards" / "table" / "p.parquet", 10)
    _write(tmp_path / "rewards" / "carry" / "c1" / "s.parquet", 7)
    _write(tmp_path / "orchestrator" / "logs" / "c1.log", 3)
    _write(tmp_path / "logs" / "serving.log", 5)
    _write(tmp_path / "mlflow.db", 50)
    u = state_usage(tmp_path)
    assert u["registry_artifacts"] == {"bytes": 100, "files": 1}
    assert u["reward_tables"] == {"bytes": 10, "files": 1}
    assert u["carry"] == {"bytes": 7, "files": 1}
    assert u["logs"] == {"bytes": 8, "files": 2}
    assert u["archive"] == {"bytes": 0, "files": 0}
    assert u["other"] == {"bytes": 50, "files": 1}
    assert u["total"] == {"bytes": 175, "files": 6}


def _fake_proc(root: Path, pid: int, ppid: int, rss_kb: int) -> None:
    d = root / str(pid)
    d.mkdir(parents=True)
    (d / "stat").write_text(f"{pid} (some (odd) name) S {ppid} 1 1 0 -1\n")
    (d / "status").write_text(f"Name:\tx\nVmRSS:\t{rss_kb} kB\n")


def test_process_memory_sums_a_process_tree_from_proc(tmp_path):
    _fake_proc(tmp_path, 10, 1, 1000)      # serving's gateway
    _fake_proc(tmp_path, 11, 10, 2000)     # an engine
    _fake_proc(tmp_path, 12, 11, 500)      # the engine's worker
    _fake_proc(tmp_path, 20, 1, 300)       # the archiver
    assert tree_rss(10, tmp_path) == {"self": 1000 * 1024, "children": 2500 * 1024}
    got = process_rss({"serving": 10, "archiver": 20, "gone": 99}, tmp_path)
    assert got == {"serving": {"self": 1000 * 1024, "children": 2500 * 1024},
                   "archiver": {"self": 300 * 1024, "children": 0}}


def test_a_named_process_started_by_another_counts_under_its_own_name_only(tmp_path):
    _fake_proc(tmp_path, 5, 1, 400)        # the orchestrator
    _fake_proc(tmp_path, 10, 5, 1000)      # serving, its child
    _fake_proc(tmp_path, 11, 10, 2000)     # serving's engine
    _fake_proc(tmp_path, 30, 5, 100)       # a step's helper process
    got = process_rss({"orchestrator": 5, "serving": 10}, tmp_path)
    assert got["orchestrator"] == {"self": 400 * 1024, "children": 100 * 1024}
    assert got["serving"] == {"self": 1000 * 1024, "children": 2000 * 1024}


def test_process_memory_of_this_process_is_read_from_the_real_proc():
    mine = tree_rss(os.getpid())
    assert mine["self"] > 10 * 2**20


def _rec(i: int, train_s: float = 60.0, rss: float = 100.0, reg: int = 1000, cache: int = 1000,
         archive=(1000, 10), artifacts=3, aliased=2, records: int = 9000) -> dict:
    return {"cycle": f"c{i}", "status": "done", "records": records, "seconds": {"train": train_s, "collect": 0.2},
            "rss": {"serving": {"self": int(rss * 2**20), "children": 0}},
            "state": {"registry_artifacts": {"bytes": reg, "files": 1}, "caches": {"bytes": cache, "files": 1},
                      "archive": {"bytes": archive[0], "files": archive[1]}},
            "with_artifacts": [str(v) for v in range(artifacts)], "aliased": [str(v) for v in range(aliased)]}


def test_flat_records_pass_every_check():
    recs = [_rec(i, archive=(1000 * i, 10 * i)) for i in range(1, 25)]
    v = verdict(recs, 24, keep=3)
    assert v["ok"], v


def test_a_step_that_slows_down_fails_the_time_check_and_sub_second_noise_does_not():
    recs = [_rec(i, train_s=60.0 if i < 19 else 80.0) for i in range(1, 25)]
    t = check_time(recs)
    assert not t["ok"] and not t["steps"]["train"]["ok"] and t["steps"]["collect"]["ok"]
    assert t["steps"]["train"]["ratio"] == round(80 / 60, 3)


def test_longer_ranges_at_the_end_fail_the_traffic_check_and_noise_within_the_ratio_passes():
    recs = [_rec(i, records=9000 if i < 19 else 12000) for i in range(1, 25)]
    t = check_traffic(recs)
    assert not t["ok"] and t["ratio"] == round(12000 / 9000, 3)
    recs = [_rec(i, records=9000 + (500 if i % 2 else -500)) for i in range(1, 25)]
    assert check_traffic(recs)["ok"]
    recs = [_rec(i, records=9000 if i < 19 else 6000) for i in range(1, 25)]      # shorter ranges: not alike either
    assert not check_traffic(recs)["ok"]


def test_growing_memory_fails_and_a_process_gone_at_the_end_fails():
    recs = [_rec(i, rss=100.0 + 5 * i) for i in range(1, 25)]
    assert not check_memory(recs)["ok"]
    recs = [_rec(i) for i in range(1, 25)]
    recs[-1]["rss"] = {}
    assert check_memory(recs)["processes"]["serving"]["reason"] == "not running at the end"


def test_registry_bytes_that_keep_growing_after_the_window_fills_fail_the_disk_check():
    recs = [_rec(i, reg=1000 * i) for i in range(1, 25)]
    d = check_disk(recs, keep=3)
    assert not d["ok"] and not d["registry_artifacts"]["ok"] and d["caches"]["ok"]


def test_more_unaliased_versions_with_artifacts_than_k_fail_the_disk_check():
    recs = [_rec(i, artifacts=7, aliased=3) for i in range(1, 25)]
    d = check_disk(recs, keep=3)
    assert not d["ok"] and d["versions"] == {"max_unaliased_with_artifacts": 4, "keep": 3, "ok": False}


def test_one_version_more_or_less_after_the_window_filled_is_the_level_not_growth():
    sizes = [1, 2, 3, 4, 5, 6, 5, 5, 6, 5, 6, 5, 5, 6, 6, 5, 5, 6, 5, 6]     # versions held: a kept candidate adds one
    recs = [_rec(i + 1, reg=100 * n) for i, n in enumerate(sizes)]
    assert check_disk(recs, keep=3)["ok"]
    recs[-1]["state"]["registry_artifacts"]["bytes"] = 700                     # a seventh one: growth
    assert not check_disk(recs, keep=3)["registry_artifacts"]["ok"]


def test_archive_files_growing_faster_than_bytes_fail():
    recs = [_rec(i, archive=(1000 * i, 10 * i * i)) for i in range(1, 25)]
    assert not check_archive(recs)["ok"]


def test_too_short_a_run_never_passes_the_window_checks():
    recs = [_rec(i) for i in range(1, 4)]
    assert not check_time(recs)["ok"] and not check_memory(recs)["ok"] and not check_disk(recs, 3)["ok"]
    assert not check_archive(recs)["ok"] and not check_traffic(recs)["ok"]


def test_a_cycle_not_done_or_missing_fails():
    recs = [_rec(i) for i in range(1, 25)]
    assert not check_done(recs, 25)["ok"]
    recs[5]["status"] = "failed"
    assert check_done(recs, 24)["not_done"] == ["c6"]
