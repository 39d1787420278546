"""The orchestrator's service form, as files and rules (infra/orchestrator/instance.py, definitions.py): the
instance's dagster.yaml and workspace.yaml, the cycle job's executor, the ledger at a configured location, and
liveness from the Dagster run a ledger record names."""

from __future__ import annotations

from datetime import datetime, timezone
from types import SimpleNamespace

import dagster as dg   # imported at collection: its first import runs `file` (platform.architecture), a process
import pytest
import yaml

from infra.config import ConfigError, load_config
from infra.orchestrator.definitions import STEP_EXECUTOR, cycle_job, run_alive
from infra.orchestrator.instance import PG_URL_ENV, service_env, service_home
from infra.stack.postgres import sqlalchemy_url
from infra.orchestrator.ledger import Ledger

URL = "postgresql://rtrl@db.internal:5432/dagster"


@pytest.fixture
def cfg(tmp_path):
    return load_config(None, [f'state_dir="{tmp_path / "state"}"', f'orchestrator.postgres_url="{URL}"',
                              f'orchestrator.ledger="{tmp_path / "shared" / "ledger"}"'])


def test_the_service_instance_stores_runs_in_postgres_named_by_the_environment_not_on_disk(cfg):
    home = service_home(cfg)
    settings = yaml.safe_load((home / "dagster.yaml").read_text())
    assert settings["storage"] == {"postgres": {"postgres_url": {"env": PG_URL_ENV}}}
    assert settings["telemetry"] == {"enabled": False} and settings["run_monitoring"]["enabled"] is True
    assert settings["run_coordinator"]["class"] == "QueuedRunCoordinator"
    assert "db.internal" not in (home / "dagster.yaml").read_text()
    workspace = yaml.safe_load((home / "workspace.yaml").read_text())
    assert workspace["load_from"][0]["python_module"]["module_name"] == "infra.orchestrator.definitions"
    env = service_env(cfg, "/etc/rtrl/rtrl.toml", ["a=1"])
    assert env[PG_URL_ENV] == "postgresql+psycopg2://rtrl@db.internal:5432/dagster"
    assert env["DAGSTER_HOME"] == str(home) and env["RTRL_CONFIG"] == "/etc/rtrl/rtrl.toml"


def test_the_embedded_default_has_no_service_instance(tmp_path):
    local = load_config(None, [f'state_dir="{tmp_path}"'])
    assert not local.orchestrator.service()
    with pytest.raises(ValueError, match="postgres_url"):
        service_home(local)
    assert sqlalchemy_url("sqlite:///x.db") == "sqlite:///x.db"


def test_a_heartbeat_slower_than_a_third_of_the_staleness_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="run_stale_s"):
        load_config(None, [f'state_dir="{tmp_path}"', "orchestrator.heartbeat_s=60", "orchestrator.run_stale_s=120"])


def test_the_cycle_job_runs_each_step_in_its_own_process_one_at_a_time():
    assert cycle_job.executor_def is STEP_EXECUTOR
    assert STEP_EXECUTOR.name == "multiprocess"


def test_the_ledger_lives_where_the_configuration_says_and_records_the_run_executing_a_cycle(cfg, tmp_path):
    ledger = Ledger.for_config(cfg)
    rec = ledger.begin("c1", datetime(2026, 1, 1, tzinfo=timezone.utc), 0.0, dagster_run_id="run-1")
    assert (tmp_path / "shared" / "ledger" / "c1.json").is_file()
    assert not (cfg.state_path / "orchestrator" / "cycles").exists()
    again = Ledger.for_config(cfg).begin("c1", datetime(2026, 1, 2, tzinfo=timezone.utc), 1.0,
                                         dagster_run_id="run-2")
    assert (rec.seq, again.seq, again.dagster_run_id) == (1, 1, "run-2")
    assert [r.cycle_id for r in Ledger.for_config(cfg).all()] == ["c1"]


class _Runs:
    """A DagsterInstance's run lookup, for the liveness rule (`definitions.run_alive`)."""

    def __init__(self, statuses):
        self.statuses = statuses

    def get_run_by_id(self, run_id):
        status = self.statuses.get(run_id)
        return None if status is None else SimpleNamespace(run_id=run_id, status=status)


def test_a_cycle_is_alive_while_the_dagster_run_it_names_is_active_whatever_host_runs_it(cfg):
    rec = Ledger.for_config(cfg).begin("c1", datetime(2026, 1, 1, tzinfo=timezone.utc), 0.0, dagster_run_id="r1")
    rec.runner_pid = 1   # a pid on this host that is alive: not consulted when a run is named
    assert run_alive(_Runs({"r1": dg.DagsterRunStatus.STARTED}), rec)
    assert run_alive(_Runs({"r1": dg.DagsterRunStatus.QUEUED}), rec)
    assert not run_alive(_Runs({"r1": dg.DagsterRunStatus.FAILURE}), rec)
    assert not run_alive(_Runs({}), rec)
