"""`rtrl chaos` end to end: a short run over real processes (Tansu broker on its object store, collector,
archiver, vLLM serving, the reward job, simulated users) with 8 seeded faults covering every cheap fault type and
one expensive one; every served request that matured has exactly one reward row, none has two."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from infra.argv import rtrl_argv

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.exclusive, pytest.mark.timeout(1200)]

REPO = Path(__file__).resolve().parents[2]
FAULTS = 8


def _v0(request, into: Path) -> None:
    """The default policy v0 as a checkpoint folder: the one `rtrl demo` caches, else the session's bootstrap."""
    cached = REPO / ".rtrl" / "policy-v0"
    if (cached / "config.json").exists():
        shutil.copytree(cached, into)
        return
    from infra.config import load_config
    from registry.client import Registry

    state, _, _ = request.getfixturevalue("bootstrapped")
    registry = Registry.from_config(load_config(None, [f'state_dir="{state}"']))
    shutil.copytree(registry.local_path(registry.version_of("champion")), into)


# Every cheap fault type and one expensive one (about 8 minutes on 2 cores): in --full only. The default tier proves
# exactly-once under each kind of fault at a smaller size, one component at a time: the archiver SIGKILLed
# mid-batch (test_archive_kafka), the broker restarted under the SDK and the collector (test_ingest_end_to_end,
# test_sdk_kafka), the reward job killed mid-cycle and rerun (test_rewards_cycle), a cycle crashed after each step
# and resumed (test_cycle_orchestrated), hostile and replayed messages (tests/unit/fuzz).
LATENESS_WALL_S = 60


@pytest.mark.full
def test_chaos_run_with_injected_faults_loses_and_duplicates_no_reward(request, tmp_path):
    _v0(request, tmp_path / "policy-v0")
    out = subprocess.run(rtrl_argv("chaos", "--faults", str(FAULTS), "--seed", "3", "--json", "--users", "8",
                                   "--warmup", "10", "--cycle-every", "3", "--lateness", str(LATENESS_WALL_S),
                                   overrides=[f'state_dir="{tmp_path}"']),
                         capture_output=True, text=True, cwd=REPO, timeout=1100)
    assert out.stdout.strip(), out.stderr[-4000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["faults_injected"] >= FAULTS, report["faults"]
    assert len(report["faults_by_type"]) >= 7, report["faults_by_type"]
    assert report["requests_served"] > 0 and report["rewards_expected"] > 0, report
    assert report["rewards_lost"] == 0, report["audit"]
    assert report["rewards_duplicated"] == 0, report["audit"]
    assert report["audit"]["rewards_unexpected"] == 0, report["audit"]
    assert out.returncode == 0, out.stderr[-4000:]
    assert not (tmp_path / "chaos" / "run").exists() or not any(
        (tmp_path / "chaos" / "run").glob("*.json")), "the run left processes behind"
