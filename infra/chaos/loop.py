"""The loop a chaos run attacks, in a private state dir on free ports: the embedded stack with a durable log
(`kafka.storage_engine = "s3"`: a broker kill must not lose acknowledged messages), the ingest collector, the
archiver, policy v0 and serving (`rtrl serve --detach`). Everything is started from, and stopped by, its own
state dir; no other stack on the machine is touched.

Event-time settings (`chaos_overrides`). An outage delays events: a client spools while the collector or the
broker is down and replays afterwards. The reward job treats an event later than `rewards.allowed_lateness_s`
behind its range's watermark as late (counted, not used), so a chaos run sets the allowed lateness to cover its
longest tolerated delay in wall seconds at the simulated speed; the reward windows are shortened so requests
mature within the run.
"""

from __future__ import annotations

import os
import shutil
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Callable

from infra.bench.ports import free_port
from infra.config import load_config
from infra.orchestrator.rtrl_cli import RtrlCli
from infra.stack.process import ManagedProcess
from infra.stack.stack import WORKERS, Stack
from trainer.bootstrap.bootstrap import stale_reason

USERS_CLIENT = "chaos-users"


def default_serving_cores() -> str:
    """The last core: vLLM's own choice is core 0 for every engine, and two engine workers bound to one core stall
    each other (another stack on the machine, e.g. `rtrl demo`, binds its serving to core 0)."""
    n = os.cpu_count() or 1
    return str(n - 1) if n > 1 else ""


def chaos_overrides(state: Path, speed: float, lateness_wall_s: float, users: int, seed: int,
                    serving_cores: str) -> list[str]:
    """The config keys a chaos run sets on top of the user's: state dir, free ports, a durable broker log, short
    reward windows, allowed lateness = `lateness_wall_s` of wall time, fast-reacting SDK, a small trainer."""
    start = (datetime.now(timezone.utc) - timedelta(days=3)).replace(microsecond=0)  # events never in the future
    return [f'state_dir="{state}"', f"kafka.port={free_port(pair=True)}", 'kafka.storage_engine="s3"',
            f"collector.port={free_port()}", f"serving.port={free_port()}", f"mlflow.ui_port={free_port()}",
            f"orchestrator.dagster_port={free_port()}", f"dashboard.port={free_port()}",
            f'serving.cpu_cores="{serving_cores}"',
            "rewards.horizon_s=600", "rewards.apply_window_s=300", "rewards.followup_window_s=300",
            f"rewards.allowed_lateness_s={speed * lateness_wall_s:g}",
            "simulator.snapshot_delay_s=600", "simulator.revert_delay_s=[60.0, 500.0]",
            "simulator.session_gap_s=[60.0, 600.0]", f"simulator.speed={speed:g}", f"simulator.users={users}",
            f"simulator.seed={seed}", f'simulator.start_time="{start.isoformat()}"', "simulator.request_timeout_s=30",
            # one partition per topic and serving's batches every 2 s: each produced batch is an object in the
            # broker's object store, and Tansu 0.6.0 lists every object of a partition on each fetch, so reads cost
            # (objects)^2; serving writes its events ahead (sdk.write_ahead), so a long linger loses nothing on a
            # kill (the users' SDK batches every 5 s: infra.chaos.users)
            "kafka.partitions=1", "sdk.linger_ms=2000", "sdk.send_timeout_s=5", "sdk.retry_interval_s=0.5",
            "trainer.threads=1", "trainer.min_rows=1", "trainer.rows_per_step=32", "trainer.micro_batch=8"]


class Loop:
    def __init__(self, config_path: str | None, overrides: list[str], state: Path, log: Callable[[str], None]):
        self.state, self.log = state, log
        self.overrides = overrides
        self.cfg = load_config(config_path, overrides)
        self.cli = RtrlCli(config_path, overrides, state / "chaos" / "logs", timeout_s=1800)
        self.stack = Stack(self.cfg)

    def prepare(self) -> None:
        """A fresh state dir: whatever an earlier chaos run left there is stopped and removed."""
        if self.state.exists():
            self.stop()
            shutil.rmtree(self.state)
        self.state.mkdir(parents=True)

    def up(self, v0_cache: Path) -> str:
        """Stack, collector (+ the users' API key), archiver, v0, serving. Returns the users' API key."""
        from schemas.api_keys import KeyStore

        self.stack.up(log=lambda m: self.log(f"[stack] {m}"))
        key = KeyStore(self.cfg.path_or_default(self.cfg.collector.api_keys_file, "collector_keys.json")).create(
            USERS_CLIENT, org="*", role="client")  # the simulated users belong to several orgs
        self.cli.run("collector", "--detach", step="collector", expect_json=False)
        self.cli.run("archive", "--detach", step="archiver", expect_json=False)
        self.log(f"[loop] collector and archiver up; registering policy v0")
        self.ensure_v0(v0_cache)
        self.log("[loop] starting serving (vLLM engine load)")
        self.cli.run("serve", "--detach", step="serving", expect_json=False)
        return key

    def ensure_v0(self, cache: Path) -> None:
        """v0: `rtrl bootstrap` with its default policy kept in `cache` (`rtrl demo` keeps one there): registered
        from there when current, else bootstrapped (minutes) and kept there."""
        stale = stale_reason(cache, self.cfg.policy)
        if stale and not self.cfg.policy.base_checkpoint:
            self.log(f"[loop] not reusing a cached policy v0 ({stale}): bootstrapping it (a few minutes, once)")
        cli = RtrlCli(self.cli.config, [*self.overrides, f'policy.cache_dir="{cache}"'], self.cli.log_dir)
        cli.run("bootstrap", step="bootstrap", echo=self.log if stale else None)

    def stop(self) -> None:
        """Stop every process started from this state dir (the stack's workers, the broker and object store)."""
        cfg = self.cfg
        for w in WORKERS:
            ManagedProcess(w, cfg.state_path).stop(timeout_s=30)
        Stack(cfg).down(log=lambda m: self.log(f"[stack] {m}"))
