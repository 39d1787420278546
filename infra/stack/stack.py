"""Bring the embedded stack up and down as one unit: object store + broker (+ topics), MLflow store (+ UI).

Every step is idempotent: `up` twice starts nothing new; `down` twice stops nothing the second time; state and
logs live under `<state_dir>/run` and `<state_dir>/logs`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from infra.config import RtrlConfig
from infra.stack.broker import Broker, align_topic_configs, ensure_topics
from infra.stack.mlflow_store import MlflowStore
from infra.stack.process import ManagedProcess, StackError, stop_together
from schemas.topics import TOPICS

# Services started by other subcommands that `rtrl down` also stops, so nothing is left behind.
WORKERS = ("simulator", "steps", "orchestrator", "dashboard", "collector", "archiver", "serving", "mlflow-server",
           "orchestrator-webserver", "orchestrator-daemon", "metrics")


@dataclass
class Stack:
    cfg: RtrlConfig
    broker: Broker = field(init=False)
    mlflow: MlflowStore = field(init=False)

    def __post_init__(self):
        state = self.cfg.state_path
        self.broker = Broker(self.cfg.kafka, state)
        self.mlflow = MlflowStore(self.cfg.mlflow, self.cfg.mlflow_tracking_uri(),
                                  self.cfg.path_or_default(self.cfg.mlflow.artifact_root, "mlflow-artifacts"), state)

    @property
    def embedded_broker(self) -> bool:
        return not self.cfg.kafka.bootstrap_servers

    def topic_partitions(self) -> dict[str, int]:
        return {t: self.cfg.kafka.partitions_for(t) for t in TOPICS}

    def up(self, mlflow_ui: bool = False, log=print) -> dict:
        t0 = time.monotonic()
        self.cfg.state_path.mkdir(parents=True, exist_ok=True)
        if self.embedded_broker:
            tls = " behind a mutual-TLS terminator (stunnel)" if self.cfg.kafka.tls_terminator_dir else ""
            log(f"broker: starting Tansu on {self.cfg.kafka.bootstrap()}{tls} (storage: "
                f"{self.cfg.kafka.storage_engine})")
            self.broker.start()
        configs = self.cfg.kafka.topic_configs()
        created = ensure_topics(self.cfg.kafka, self.topic_partitions(),
                                replication={t: self.cfg.kafka.replication_for(t) for t in TOPICS}, configs=configs)
        log(f"topics: {len(TOPICS)} ready ({len(created)} created); retention {_retention(configs)}")
        self._align([t for t in TOPICS if t not in created], configs, log)
        self.mlflow.ensure_store()
        log(f"mlflow: tracking store {self.mlflow.tracking_uri}")
        if mlflow_ui:
            self.mlflow.start_ui()
            log(f"mlflow: UI at {self.mlflow.ui_url}")
        log(f"up in {time.monotonic() - t0:.1f}s; state in {self.cfg.state_path}")
        return self.status()

    def _align(self, topics: list[str], configs: dict[str, str], log) -> None:
        """The retention settings on topics that existed already; a cluster that refuses (no AlterConfigs right, say)
        leaves them as they are, with a warning."""
        from kafka.errors import KafkaError

        try:
            changed = align_topic_configs(self.cfg.kafka, topics, configs)
        except (KafkaError, StackError) as e:
            log(f"WARNING topics: could not set the retention of the existing topics ({e}); set "
                f"{_retention(configs)} on them by hand")
            return
        for topic, c in changed.items():
            log(f"topics: {topic}: set {_retention(c)}")

    def status(self) -> dict:
        procs = {"broker": self.broker.proc, "mlflow-ui": self.mlflow.ui}
        if self.broker.watcher.is_running():
            procs["broker-watch"] = self.broker.watcher
        if self.broker.store is not None:
            procs["objectstore"] = self.broker.store.proc
        if self.broker.terminator is not None:
            procs["kafka-tls"] = self.broker.terminator.proc
        procs.update({w: ManagedProcess(w, self.cfg.state_path) for w in WORKERS})
        services = {}
        for name, proc in procs.items():
            info = proc.info()
            services[name] = {"running": info is not None, "pid": info and info["pid"], "log": str(proc.logfile)}
        healthy = self.broker.answers_metadata() if (self.embedded_broker and services["broker"]["running"]) else None
        return {"state_dir": str(self.cfg.state_path), "bootstrap": self.cfg.kafka.bootstrap(),
                "broker_healthy": healthy, "mlflow_tracking_uri": self.mlflow.tracking_uri,
                "mlflow_ui": self.mlflow.ui_url if services["mlflow-ui"]["running"] else None,
                "services": services}

    def down(self, log=print, also: tuple[str, ...] = (), timeout_s: float = 10.0) -> list[str]:
        """Stop the workers (and the managed processes named in `also`) and the MLflow UI all at once, each given
        `timeout_s` after SIGTERM, then the broker, which they may still write to while they stop."""
        t0 = time.monotonic()
        names = dict.fromkeys([*WORKERS, *also])
        stopped = stop_together([*(ManagedProcess(w, self.cfg.state_path) for w in names), self.mlflow.ui], timeout_s)
        if self.broker.stop():
            stopped.append("broker")
        log(f"stopped: {', '.join(stopped) or 'nothing was running'}"
            + (f" in {time.monotonic() - t0:.1f}s" if stopped else ""))
        return stopped


def _retention(configs: dict[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in configs.items())
