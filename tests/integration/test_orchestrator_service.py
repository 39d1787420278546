"""The orchestrator as a service (docs/orchestrator.md#as-a-service): `rtrl orchestrator` with
`orchestrator.postgres_url` runs dagster-webserver and dagster-daemon over Postgres (system packages); the cadence
sensor's ticks are recorded there, with its reasons; a daemon killed with SIGKILL and started again goes on ticking
from the same storage. The whole cycle through this topology is `rtrl bench services` (tests/integration/
test_bench_services.py)."""

from __future__ import annotations

import json
import subprocess
import uuid

import pytest

from infra.argv import rtrl_argv
from infra.config import load_config
from infra.stack.process import ManagedProcess
from tests.conftest import free_port
from tests.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _ticks(pg, db: str) -> list[tuple[str, str]]:
    """(status, skip reason) of the cadence sensor's ticks in Dagster's Postgres storage, oldest first."""
    rows = pg.execute("SELECT status, tick_body FROM job_ticks ORDER BY id", db)
    return [(status, json.loads(body).get("skip_reason") or "") for status, body in rows]


def test_the_daemon_over_postgres_records_the_sensors_ticks_and_goes_on_after_a_kill(stack, postgres_server,
                                                                                      s3_server, tmp_path):
    db = f"dagster_{uuid.uuid4().hex[:8]}"
    url = postgres_server.create_database(db)
    overrides = [f'state_dir="{tmp_path / "state"}"', f"kafka.port={stack.cfg.kafka.port}",
                 f'orchestrator.postgres_url="{url}"', f'orchestrator.ledger="{s3_server.url("ledger")}"',
                 "orchestrator.sensor_interval_s=1", f"orchestrator.dagster_port={free_port()}",
                 "orchestrator.min_mature_rows=5"]
    cfg = load_config(None, overrides)
    out = subprocess.run(rtrl_argv("orchestrator", "--detach", overrides=overrides), capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    started = json.loads(out.stdout.strip().splitlines()[-1])["orchestrator"]
    assert started["service"] and started["webserver"]["pid"] and started["daemon"]["pid"]
    home = tmp_path / "state" / "dagster-service"
    assert url not in (home / "dagster.yaml").read_text(), "the database URL stays in the environment"
    daemon = ManagedProcess("orchestrator-daemon", cfg.state_path)
    try:
        wait_for(lambda: any("too few mature rows" in r for _, r in _ticks(postgres_server, db)), 180,
                 "a sensor tick with its skip reason in Postgres")
        assert {s for s, _ in _ticks(postgres_server, db)} <= {"SKIPPED", "STARTED"}
        daemon.kill()
        before = len(_ticks(postgres_server, db))
        again = subprocess.run(rtrl_argv("orchestrator", "--detach", "--only", "daemon", overrides=overrides),
                               capture_output=True, text=True, timeout=300)
        assert again.returncode == 0, again.stderr[-3000:]
        wait_for(lambda: len(_ticks(postgres_server, db)) >= before + 2, 180, "ticks after the restart")
    finally:
        subprocess.run(rtrl_argv("down", overrides=overrides), capture_output=True, timeout=120)
    assert not daemon.is_running()
