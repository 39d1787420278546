"""`[orchestrator]` and `[demo]`: the cycle's cadence and steps, and the `rtrl demo` loop (docs/orchestrator.md).

Times are in the orchestrator's clock: wall time in production, the simulated clock in the demo and tests (the
same clock the simulated users stamp event times with, so "every five hours" means five hours of event time).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from infra.stack.logs import LOG_KEEP, LOG_MAX_BYTES


class OrchestratorConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    interval_s: float = Field(default=5 * 3600, gt=0, le=30 * 86400,
                              description="Cadence: a cycle starts at most this long after the previous cycle "
                                          "STARTED (a true interval, not a cron slot), in the orchestrator's clock.")
    min_mature_rows: int = Field(default=200, ge=1, le=100_000_000,
                                 description="A cycle starts only when at least this many served requests since "
                                             "the last cycle are mature (their reward rows can no longer change).")
    source: Literal["kafka", "files"] = Field(
        default="kafka", description="Where a cycle's traffic comes from: the Kafka offset range since the last cycle "
        "(production), or `<traffic_dir>/<cycle id>.jsonl`, wire-format events of users drained before the cycle "
        "(the in-process executor of the learning loop and the tests: no offset range, no carry, every request "
        "mature).")
    traffic_dir: str = Field(default="", description="With source = \"files\": the folder of the cycles' traffic "
                             "files (a path or object-store URL); '' = <state_dir>/traffic.")
    range_idle_s: float = Field(default=2.0, gt=0, le=600, description="The collect step reads the Kafka range on "
                                "past the log end it saw until every partition is quiet this long (at most 3x this "
                                "while traffic goes on): the rest of the last record batch (pipelines.rewards."
                                "kafka_range.fix_range).")
    sensor_interval_s: float = Field(default=30.0, gt=0, le=3600,
                                     description="Wall seconds between two evaluations of the cadence sensor.")
    clock: Literal["wall", "accelerated"] = Field(
        default="wall", description="wall: real time (production). accelerated: the simulated clock of "
        "<state_dir>/orchestrator/clock.json (written by `rtrl demo`), `speed` simulated seconds per wall second.")
    deploy_timeout_s: float = Field(default=600.0, gt=0, le=7200,
                                    description="How long the deploy step waits for serving to serve the new "
                                                "champion (blue/green load) before the cycle fails.")
    step_timeout_s: float = Field(default=3600.0, gt=0, le=86400,
                                  description="Most wall seconds one step (a subprocess) may run.")
    dagster_port: int = Field(default=13000, ge=1, le=65535, description="Dagster UI port (`rtrl orchestrator`).")
    dagster_host: str = Field(default="127.0.0.1", description="Dagster UI bind address; localhost by default "
                              "(the UI has no authentication: reach it through a tunnel or port-forward).")
    postgres_url: str = Field(default="", description="The orchestrator as a service: Dagster's run, event-log and "
                              "schedule storage in this Postgres database (postgresql://user@host:5432/dagster; the "
                              "password from PGPASSWORD or ~/.pgpass, never here), run monitoring on, and `rtrl "
                              "orchestrator` runs dagster-webserver and dagster-daemon over it. '' = the local SQLite "
                              "instance in <state_dir>/dagster (`dagster dev`).")
    ledger: str = Field(default="", description="Where the cycle ledger lives: a folder or an object-store URL "
                        "(s3://bucket/ledger) that every host running a cycle's steps reaches. '' = "
                        "<state_dir>/orchestrator/cycles.")
    heartbeat_s: float = Field(default=30.0, gt=0, le=3600, description="A running cycle step logs a heartbeat to "
                               "its Dagster run this often.")
    run_stale_s: float = Field(default=300.0, gt=0, le=86400, description="The cadence sensor takes a started "
                               "cycle run whose last event is older than this for dead (its run worker is gone: a "
                               "killed host or process), marks it failed and resumes the cycle. Compares the run's "
                               "event times with the sensor's clock: keep it well above the hosts' clock skew and "
                               "heartbeat_s.")
    retry_backoff_s: float = Field(default=300.0, gt=0, le=86400, description="A failed cycle (a step raised, or its "
                                   "runner died) is retried this long after its failure, twice as long after each "
                                   "further failure in a row (capped exponential backoff, infra.orchestrator.backoff), "
                                   "in the orchestrator's clock.")
    retry_backoff_max_s: float = Field(default=3600.0, gt=0, le=7 * 86400, description="The longest wait between two "
                                       "tries of a failed cycle (the cap of the backoff).")
    max_failures: int = Field(default=6, ge=1, le=1000, description="After this many failures in a row (no step "
                              "finished in between) the cycle is stuck: no executor runs it and the cadence starts "
                              "nothing, saying why, until an operator clears it (`rtrl cycle ID --unstick` lets the "
                              "cadence retry it, `rtrl cycle ID --retry` runs it at once).")
    log_max_bytes: int = Field(default=LOG_MAX_BYTES, ge=4096, le=2**40, description="A log over this many bytes is "
                               "rotated (copied to <name>.1, truncated in place): the stack's processes' logs "
                               "(<state_dir>/logs), the cycles' step logs (<state_dir>/orchestrator/logs) and the "
                               "cadence's decisions (<state_dir>/orchestrator/cadence.jsonl), at every cadence tick "
                               "and after every cycle; a process's log also when it starts (with the default).")
    log_keep: int = Field(default=LOG_KEEP, ge=0, le=100, description="Rotated copies kept of each log (<name>.1 "
                          "... <name>.N); older ones are removed.")
    keep_cycles: int = Field(default=20, ge=1, le=100_000, description="The step logs (<state_dir>/orchestrator/"
                             "logs/<cycle id>) and the Dagster runs, with their event logs, of the last this many "
                             "cycles are kept; those of older finished cycles are removed as cycles go by (step logs "
                             "after each cycle, runs when the cadence starts a new one). Failed and stuck cycles keep "
                             "theirs.")

    @model_validator(mode="after")
    def _backoff_cap_above_base(self):
        if self.retry_backoff_max_s < self.retry_backoff_s:
            raise ValueError(f"orchestrator.retry_backoff_max_s ({self.retry_backoff_max_s:g}) must be at least "
                             f"retry_backoff_s ({self.retry_backoff_s:g}): it caps the waits that start there")
        return self

    @model_validator(mode="after")
    def _heartbeat_within_staleness(self):
        if self.run_stale_s < 3 * self.heartbeat_s:
            raise ValueError(f"orchestrator.run_stale_s ({self.run_stale_s:g}) must be at least 3x heartbeat_s "
                             f"({self.heartbeat_s:g}): a live run would look dead between two heartbeats")
        return self

    def service(self) -> bool:
        """Whether the orchestrator runs as a service (Postgres storage, webserver and daemon)."""
        return bool(self.postgres_url)


class DemoConfig(BaseModel):
    """`rtrl demo`'s own settings: how many cycles, users and how fast, and its time budget. What the demo changes in
    the other sections (the cadence, the trainer's batch, the gate's size, serving's spares) is the overlay
    infra/configs/demo.toml, layered under the user's own config (infra/orchestrator/demo.py)."""

    model_config = ConfigDict(extra="forbid")

    cycles: int = Field(default=3, ge=1, le=100, description="Cycles to run (`--cycles`).")
    users: int = Field(default=648, ge=1, le=10_000, description="Simulated users driving the serving endpoint.")
    speed: float = Field(default=60.0, gt=0, le=100_000, description="Simulated seconds per wall second of the "
                         "users and of the orchestrator's clock.")
    pace: float = Field(default=0.16667, gt=0, le=100, description="Each simulated user's request rate relative "
                        "to the simulator's: its think and session-gap times are divided by this, so more users "
                        "(more A/B units per arm) make the same load on serving.")
    preload_steps: bool = Field(default=True, description="Import the cycle steps' libraries (torch, Beam, MLflow, "
                                "DeepSpeed, ...) in a background thread while the stack, serving and the users start: "
                                "the steps run in the demo's process, and the first would otherwise wait for them.")
    new_split: bool = Field(default=True, description="Salt the A/B split anew for every demo "
                            "(`<serving.experiment>-<8 hex digits>`, kept for --resume), so that the arms' users "
                            "differ from one demo to the next; false = serving.experiment as configured.")
    ab_window: Literal["last_cycle", "since_first_promotion"] = Field(
        default="since_first_promotion",
        description="Traffic the A/B table compares: requests served since the treatment arm first differed from "
                    "control, or only those of the last cycle's range.")
    ab_tail: bool = Field(default=True, description="After the last cycle, run the next cycle's first steps "
                          "(collect, distill, validate, measure) so the A/B also counts the traffic served while the "
                          "last cycle ran; that cycle's training runs when the loop goes on (`--resume`, the "
                          "orchestrator).")
    ab_tail_wait_s: float = Field(default=0.0, ge=0, le=3600, description="Wall seconds of traffic to wait for "
                                  "after the last cycle before that measurement (with ab_tail).")
    ab_tail_until_s: float = Field(default=520.0, ge=0, le=86400, description="With ab_tail: take that measurement no "
                                   "earlier than this many wall seconds after the demo started, so a demo whose "
                                   "cycles finish early spends the rest of its time budget on A/B traffic (0 = no "
                                   "such floor). A demo past it measures at once.")
    budget_s: float = Field(default=570.0, ge=0, le=86400, description="Wall seconds the demo aims to finish in: "
                            "each cycle after the first gets its share of the time left, and trains fewer rows "
                            "(trainer.max_rows) and runs fewer gate samples (gate.tasks.samples_per_task) when this "
                            "machine is too slow for the demo's settings (infra.orchestrator.budget; 0 = always the "
                            "demo's settings).")
    train_min_rows: int = Field(default=256, ge=1, description="Fewest rows a budgeted cycle trains before its gate "
                                "runs fewer samples (with demo.gate_min_samples: down to one step of rows).")
    gate_min_samples: int = Field(default=1, ge=1, le=100, description="Fewest samples per task a budgeted cycle's "
                                  "gate runs (1: one episode per task and arm, still paired by task; a wider "
                                  "interval keeps the champion more often).")
    background_nice: int = Field(default=10, ge=0, le=19, description="Nice value of the archiver, which nothing in "
                                 "the demo waits for: it takes the CPU only when training, the gate, the reward job "
                                 "and serving leave it (0 = as the rest).")
    timeout_s: float = Field(default=3600.0, gt=0, le=86400, description="Wall seconds before the demo gives up.")
