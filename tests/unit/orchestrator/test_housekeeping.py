"""After a cycle ends: step logs of cycles older than the last `keep_cycles` are removed (failed and stuck
cycles keep theirs, as do folders that are not a cycle's), and logs over their bound are rotated."""

from __future__ import annotations

from datetime import datetime, timezone
from types import SimpleNamespace

from infra.orchestrator.config import OrchestratorConfig
from infra.orchestrator.housekeeping import after_cycle, old_cycles, rotate_logs
from infra.orchestrator.ledger import BLOCKED, DONE, FAILED, STUCK, CycleRecord, Ledger

NOW = datetime(2026, 11, 1, tzinfo=timezone.utc)


def rec(cid: str, seq: int, status: str = DONE) -> CycleRecord:
    return CycleRecord(cid, seq, NOW.isoformat(), 0.0, status=status)


def test_step_logs_of_finished_cycles_older_than_the_window_are_the_ones_removed():
    folders = {"c1": rec("c1", 1), "c2": rec("c2", 2, BLOCKED), "c3": rec("c3", 3, FAILED), "c4": rec("c4", 4, STUCK),
               "c5": rec("c5", 5), "c6": rec("c6", 6), "demo": None}
    assert old_cycles(folders, latest_seq=6, keep_cycles=2) == ["c1", "c2"]
    assert old_cycles(folders, latest_seq=6, keep_cycles=1) == ["c1", "c2", "c5"]
    assert old_cycles(folders, latest_seq=6, keep_cycles=20) == []


def test_after_a_cycle_old_step_logs_go_and_oversized_logs_rotate(tmp_path):
    cfg = SimpleNamespace(state_path=tmp_path, orchestrator=OrchestratorConfig(
        source="files", keep_cycles=2, log_max_bytes=4096, log_keep=1))
    ledger = Ledger(tmp_path)
    logs = tmp_path / "orchestrator" / "logs"
    for i in range(1, 5):
        ledger.save(rec(f"c{i}", i))
        (logs / f"c{i}").mkdir(parents=True)
        (logs / f"c{i}" / "train.log").write_text("step\n")
    (logs / "demo").mkdir()
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "serving.log").write_bytes(b"x" * 5000)
    (tmp_path / "orchestrator" / "cadence.jsonl").write_bytes(b"{}\n" * 2000)
    said = []
    out = after_cycle(cfg, ledger, ledger.load("c4"), said.append)
    assert out == {"carry_removed": [], "step_logs_removed": ["c1", "c2"],
                   "logs_rotated": ["logs/serving.log", "orchestrator/cadence.jsonl"]}
    assert sorted(p.name for p in logs.iterdir()) == ["c3", "c4", "demo"]
    assert (tmp_path / "logs" / "serving.log.1").stat().st_size == 5000
    assert any("step logs removed: c1, c2" in line for line in said)
    assert rotate_logs(cfg) == [], "within their bounds now"


def test_a_clean_up_that_fails_is_reported_and_the_rest_still_runs(tmp_path):
    cfg = SimpleNamespace(state_path=tmp_path, orchestrator=OrchestratorConfig())   # kafka source, no rewards root
    said = []
    out = after_cycle(cfg, Ledger(tmp_path), rec("c1", 1), said.append)
    assert "carry_removed" not in out and out["logs_rotated"] == []
    assert any(line.startswith("housekeeping: carry removed failed: AttributeError") for line in said)
