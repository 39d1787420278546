"""`rtrl offline-ab` on the real v0 (`bootstrapped`): every row is accounted for in each split, the same checkpoint
twice gives the same rows (one sampling seed, the deterministic clock; the two served at once, each in a process of
its own), and its paired difference from itself is exactly zero, interval included (the pairing cancels every
user's own spread)."""

import json
import subprocess
from pathlib import Path

import pytest

from infra.argv import rtrl_argv

pytestmark = [pytest.mark.integration, pytest.mark.full, pytest.mark.timeout(900)]

REPO = Path(__file__).parents[2]


def test_offline_ab_splits_every_row_and_repeats_itself_on_the_same_population(bootstrapped):
    state, _, _ = bootstrapped
    # `1 1`: both at once, a process and a thread each.
    out = subprocess.run(rtrl_argv("offline-ab", "1", "1", "--users", "24", "--hours", "1.5",
                                   overrides=[f'state_dir="{state}"']),
                         capture_output=True, text=True, cwd=REPO, timeout=800)
    assert out.returncode == 0, out.stderr[-4000:]
    result = json.loads(out.stdout)
    first, again = result["checkpoints"]
    assert "[offline-ab]" in out.stderr and result["users"] == 24
    rows = first["all"]["rows"]
    assert rows >= 60, first["all"]
    assert first["first_turn"]["rows"] + first["retry"]["rows"] == rows
    assert sum(k["rows"] for k in first["by_task_kind"].values()) == rows
    assert set(first["by_task_kind"]) <= {"change_constant", "rename_function", "fix_off_by_one", "add_parameter"}
    assert len(first["by_task_kind"]) >= 3
    for split in ("all", "first_turn", "retry"):
        assert {k: v for k, v in again[split].items()} == first[split], split
    for metric in ("edit_persistence_rate", "dissatisfied_followup_rate", "shown_edit_persistence_rate"):
        d = again["vs_first"][metric]   # paired user by user: identical rows differ by exactly nothing
        assert d["diff"] == pytest.approx(0.0, abs=1e-12) and d["paired_users"] >= 20, d
        assert d["ci_low"] == pytest.approx(0.0, abs=1e-12) and d["ci_high"] == pytest.approx(0.0, abs=1e-12), d
    assert "vs_first" not in first
