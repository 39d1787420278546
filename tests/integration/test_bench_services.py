"""The cycle as a service, end to end, through `rtrl bench services --json` (infra/bench/services.py): Postgres from
the system packages, moto's S3 server, the MLflow server over them, the Dagster webserver and daemon with Postgres
storage, the broker, serving and simulated users. The cadence sensor starts the cycle when rows are mature; the
trainer's process is killed mid-cycle and the sensor resumes the cycle to completion with every request's row once
and one candidate; the candidate's files are in S3; the gate ran on it and serving serves from the MLflow server; two
promoters race and one wins. A long run (the whole topology and a cycle): the `full` tier. The default tier covers
the parts: tests/integration/test_registry_server.py and test_orchestrator_service.py."""

import json
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.exclusive, pytest.mark.full,
              pytest.mark.timeout(2400)]


def test_the_sensor_starts_a_cycle_that_survives_a_killed_trainer_with_artifacts_in_s3_and_one_race_winner(
        bootstrapped, tmp_path):
    from infra.config import load_config
    from infra.orchestrator.steps import STEPS
    from registry.client import Registry

    state, _, _ = bootstrapped
    v0 = Registry.from_config(load_config(None, [f'state_dir="{state}"'])).local_path("1")
    proc = subprocess.run([sys.executable, "-m", "infra.cli", "--set", f'state_dir="{tmp_path}"',
                           "--set", f'policy.base_checkpoint="{v0}"', "bench", "services", "--json"],
                          capture_output=True, text=True, timeout=2300)
    assert proc.stdout.strip(), proc.stderr[-4000:]
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    assert proc.returncode == 0, (r, proc.stderr[-4000:])
    assert r["cycle_status"] == "done" and r["started_by"] == "sensor", r
    assert r["resumed_after_kill"] is True and len(r["dagster_runs"]) >= 2, r
    assert r["exactly_once"] is True and r["candidates_of_cycle"] == [r["candidate"]], r
    assert r["candidate_artifacts_uri"].startswith("s3://"), r
    assert r["gate_decision"] in ("promote", "keep_champion"), r
    assert r["promotion_race_winners"] == 1 and r["promotion_race"]["winner_is_champion"], r
    assert set(r["seconds_per_step"]) == set(STEPS), r   # every step of the cycle ran, `specialize` included
