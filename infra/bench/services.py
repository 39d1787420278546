"""`rtrl bench services`: the cycle as a service, once, on this machine, then torn down (docs/deployment.md).

    result, ok = run(args, cfg, log)

The topology of docs/deployment.md with every service a real process on loopback:
  - Postgres from the system packages (infra.stack.postgres): Dagster's storage, the MLflow server's backend store
    and the promotion's advisory lock;
  - moto's S3 server: the event archive, the reward job's state, the cycle ledger and, behind the
    MLflow server (proxied: its clients hold no S3 credentials for it), the checkpoints;
  - the MLflow server, the broker, the archiver, serving with its two arms, simulated users on the accelerated clock;
  - the Dagster webserver and daemon over Postgres: the cadence sensor, in the daemon, starts the cycle.
It then checks what the issue asks of that topology: the sensor starts a cycle on its own when rows are mature; a
step process killed mid-cycle (the trainer) is resumed by the sensor to completion with every served request's
row once and one candidate; the candidate's files are in S3; the gate and serving loaded it from the MLflow server;
two promoters racing in two processes leave exactly one winner. It reuses `rtrl demo`'s loop set-up (its overlay,
cached v0 and gate suite, serving and users) in `<state_dir>/bench-services`, removed at the end.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

BUCKET = "rtrl"
CYCLE = "c1"
KILLED_STEP = "train"


def add_arguments(parser) -> None:
    parser.add_argument("--timeout", type=float, default=1500.0, metavar="S",
                        help="wall seconds before giving up (default 1500)")
    parser.add_argument("--no-kill", action="store_true", help="do not kill the trainer mid-cycle")
    parser.add_argument("--keep", action="store_true", help="leave the state folder (<state_dir>/bench-services) "
                        "for inspection; the processes are stopped either way")


class Ports:
    def __init__(self):
        from infra.bench.ports import free_port

        self.kafka = free_port(pair=True)     # the object store listens on kafka.port + 1
        self.postgres, self.mlflow, self.serving = free_port(), free_port(), free_port()
        self.collector, self.dagster = free_port(), free_port()

    @property
    def s3(self) -> str:
        return f"http://127.0.0.1:{self.kafka + 1}"


def topology_overrides(p: Ports) -> list[str]:
    """Every setting that turns the embedded default into the services topology (docs/deployment.md), for these
    ports; the AWS_* environment (`s3_env`) points the S3 clients at the same server."""
    pg = f"postgresql://rtrl@127.0.0.1:{p.postgres}"
    return [f"kafka.port={p.kafka}", f"serving.port={p.serving}", "mlflow.server.workers=1",
            f"collector.port={p.collector}", f"orchestrator.dagster_port={p.dagster}",
            f'archive.output_dir="s3://{BUCKET}/archive"', f'rewards_dir="s3://{BUCKET}/rewards"',
            f'mlflow.tracking_uri="http://127.0.0.1:{p.mlflow}"', f"mlflow.server.port={p.mlflow}",
            f'mlflow.server.backend_store_uri="{pg}/mlflow"',
            f'mlflow.server.artifacts_destination="s3://{BUCKET}/mlflow"',
            f'mlflow.promotion_lock="{pg}/mlflow"',
            f'orchestrator.postgres_url="{pg}/dagster"', f'orchestrator.ledger="s3://{BUCKET}/ledger"']


def s3_env(p: Ports) -> dict[str, str]:
    from infra.stack.broker import S3_CREDENTIALS

    return {"AWS_ACCESS_KEY_ID": S3_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            "AWS_SECRET_ACCESS_KEY": S3_CREDENTIALS["AWS_SECRET_ACCESS_KEY"], "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT_URL_S3": p.s3}


def _s3():
    import boto3

    return boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL_S3"])


def s3_keys(url: str) -> list[str]:
    bucket, _, prefix = url.removeprefix("s3://").partition("/")
    pages = _s3().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix.rstrip("/") + "/")
    return sorted(o["Key"] for page in pages for o in page.get("Contents", []))


def _wait(what: str, check, timeout_s: float, log, every: float = 2.0, alive=None):
    t0 = time.monotonic()
    last_note = t0
    while True:
        value = check()
        if value:
            return value
        if alive is not None:
            alive()
        if time.monotonic() - t0 > timeout_s:
            raise TimeoutError(f"bench services: {what} did not happen within {timeout_s:.0f}s")
        if time.monotonic() - last_note > 60:
            log(f"[services] still waiting: {what} ({time.monotonic() - t0:.0f}s)")
            last_note = time.monotonic()
        time.sleep(every)


def run(args, cfg, log) -> tuple[dict, bool]:
    import shutil

    from infra.config import load_config
    from infra.stack.postgres import LocalPostgres

    t0 = time.monotonic()
    ports = Ports()
    os.environ.update(s3_env(ports))
    overrides = [*args.overrides, *topology_overrides(ports)]
    base = load_config(args.config, overrides)
    demo = ServicesLoop(base, args.config, overrides, log)
    pg = LocalPostgres(demo.state, ports.postgres)
    result: dict = {"topology": "postgres + moto s3 + mlflow server + dagster webserver/daemon + broker + serving"}
    seconds: dict[str, float] = {}
    try:
        demo.prepare_state(resume=False)
        t = time.monotonic()
        pg.start()
        for db in ("dagster", "mlflow"):
            pg.create_database(db)
        seconds["postgres"] = round(time.monotonic() - t, 1)
        t = time.monotonic()
        demo.start_stack()                       # moto, broker, topics, the MLflow server, the archiver
        seconds["stack"] = round(time.monotonic() - t, 1)
        t = time.monotonic()
        v0 = demo.ensure_v0()
        demo.start_serving()
        demo.ensure_suite()
        demo.start_clock_and_users()
        seconds["v0_serving_users"] = round(time.monotonic() - t, 1)
        t = time.monotonic()
        demo.start_orchestrator()
        seconds["orchestrator"] = round(time.monotonic() - t, 1)
        result.update(demo.one_cycle(kill=not args.no_kill, timeout_s=args.timeout - (time.monotonic() - t0)))
        result["v0"] = v0
        result["promotion_race_winners"], result["promotion_race"] = demo.race()
    finally:
        log("[services] stopping everything")
        demo.stop_all(quiet=True)
        from infra.stack.process import ManagedProcess

        ManagedProcess("objectstore", demo.state).stop()
        pg.stop()
        if not args.keep:
            pg.destroy()
            shutil.rmtree(demo.state, ignore_errors=True)
    result["setup_seconds"] = seconds
    result["seconds"] = round(time.monotonic() - t0, 1)
    ok = (result.get("cycle_status") == "done" and result.get("started_by") == "sensor"
          and str(result.get("candidate_artifacts_uri", "")).startswith("s3://")
          and result.get("promotion_race_winners") == 1 and result.get("exactly_once") is True
          and (args.no_kill or result.get("resumed_after_kill") is True))
    return result, ok


class _Loop:
    """Mixin over `Demo` (made in `ServicesLoop`): the service parts of the run."""

    STATE_NAME = "bench-services"

    def start_stack(self) -> None:
        """The object store (moto, on kafka.port + 1) with the data plane's bucket, the MLflow server, the stack
        (broker, topics), then the archiver."""
        from infra.stack.broker import ObjectStore
        from infra.stack.mlflow_server import MlflowServer
        from infra.stack.stack import Stack

        self.store = ObjectStore(self.cfg.kafka, self.state)
        self.store.start()
        if BUCKET not in {b["Name"] for b in _s3().list_buckets().get("Buckets", [])}:
            _s3().create_bucket(Bucket=BUCKET)
        self.log(f"[services] object store (moto) at {self.store.url}, bucket {BUCKET}")
        self.log(f"[services] MLflow server at {MlflowServer(self.cfg).start()} (Postgres, artifacts proxied to S3)")
        Stack(self.cfg).up(log=lambda m: self.log(f"[stack] {m}"))
        self.cli.run("archive", "--detach", step="archive", expect_json=False)

    def start_orchestrator(self) -> None:
        self.cli.run("orchestrator", "--detach", step="orchestrator", expect_json=False)
        self.log("[services] Dagster webserver and daemon started over Postgres; the cadence sensor decides")

    def dagster_runs(self) -> list:
        """The cycle job's runs in the service's Dagster storage (Postgres), oldest first."""
        import dagster as dg

        from infra.orchestrator.definitions import CYCLE_JOB
        from infra.orchestrator.instance import service_instance

        with service_instance(self.cfg) as instance:
            runs = instance.get_runs(filters=dg.RunsFilter(job_name=CYCLE_JOB))
        return list(reversed(runs))

    def record(self):
        from infra.orchestrator.ledger import Ledger

        return Ledger.for_config(self.cfg).load(CYCLE)

    def one_cycle(self, kill: bool, timeout_s: float) -> dict:
        from registry.client import Registry

        out: dict = {}
        deadline = time.monotonic() + timeout_s
        self.log("[services] waiting for the cadence sensor to start the first cycle (mature rows)")
        first = _wait("the sensor starting a cycle", lambda: self.dagster_runs(), deadline - time.monotonic(),
                      self.log, alive=self.check_background)[0]
        out["started_by"] = "sensor" if first.tags.get("dagster/sensor_name") == "cadence" else \
            first.tags.get("dagster/sensor_name", "not a sensor")
        out["first_run"] = first.run_id[:8]
        killed = False
        if kill:      # the Dagster step process running the train step, as the ledger names it while it runs
            from infra.stack.process import pid_running

            def training():
                rec = self.record()
                cur = rec.current if rec is not None else None
                return [cur["pid"]] if cur and cur.get("step") == KILLED_STEP and pid_running(cur["pid"]) else []

            pids = _wait(f"the {KILLED_STEP} step's process", training, deadline - time.monotonic(), self.log,
                         every=0.5, alive=self.check_background)
            time.sleep(5.0)       # let it get going: killed mid-training, not at its start
            for pid in training():
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed = True
                except ProcessLookupError:
                    pass
            self.log(f"[services] killed the {KILLED_STEP} step's process(es) {pids} (SIGKILL)")
        rec = _wait(f"cycle {CYCLE} finishing", lambda: (r := self.record()) is not None and
                    r.status in ("done", "blocked") and r, deadline - time.monotonic(), self.log,
                    alive=self.check_background)
        runs = self.dagster_runs()
        out["cycle_status"] = rec.status
        out["cycle_error"] = rec.error or None
        out["dagster_runs"] = [{"run": r.run_id[:8], "status": r.status.value,
                                "by": r.tags.get("dagster/sensor_name", "")} for r in runs]
        out["resumed_after_kill"] = bool(killed and len(runs) >= 2 and rec.status == "done")
        out["seconds_per_step"] = {s: v.get("seconds") for s, v in rec.steps.items()}
        registry = Registry.from_config(self.cfg)
        candidate = rec.result("train").get("candidate")
        out["candidate"] = candidate
        out["candidate_artifacts_uri"] = self.artifacts_in_s3(registry, candidate)
        out["gate_decision"] = rec.result("evaluate").get("decision")
        out["champion"] = registry.version_of("champion")
        out.update(self.exactly_once(registry, rec))
        from infra.orchestrator.steps import serving_status

        health = serving_status(self.cfg) or {}
        out["serving_arms"] = {a: str(v.get("version")) for a, v in health.get("arms", {}).items()}
        return out

    def artifacts_in_s3(self, registry, version) -> str | None:
        """The S3 URL of the candidate's files behind the MLflow server, when its checkpoint is there."""
        if version is None:
            return None
        mv = registry.client.get_model_version(registry.model, str(version))
        uri = registry.client.get_run(mv.run_id).info.artifact_uri          # mlflow-artifacts:/<exp>/<run>/artifacts
        dest = self.cfg.mlflow.server.artifacts_destination.rstrip("/")
        url = f"{dest}/{uri.split(':', 1)[1].lstrip('/')}/checkpoint"
        keys = s3_keys(url)
        return url if any(k.endswith("/config.json") or k.endswith("/adapter_config.json") for k in keys) else None

    def exactly_once(self, registry, rec) -> dict:
        from schemas.reward_table import read_reward_table

        rows = read_reward_table(self.cfg.reward_table(), CYCLE)
        versions = [str(mv.version) for mv in registry.client.search_model_versions(f"name = '{registry.model}'")
                    if (mv.tags or {}).get("cycle") == CYCLE]
        unique = rows["request_id"].n_unique() == rows.height
        return {"reward_rows": rows.height, "exactly_once": bool(unique and rows.height == rec.result("distill")
                                                                 .get("rows") and len(versions) == 1),
                "candidates_of_cycle": versions}

    def race(self) -> tuple[int, dict]:
        """Two `rtrl promote` processes at once, each for its own candidate gated against the same champion, on a
        registered model of their own in the same MLflow server and lock: (how many moved champion, details)."""
        from infra.argv import rtrl_argv
        from registry.client import Registry

        model = "rtrl-race"
        overrides = [*self.overrides, f'mlflow.registered_model="{model}"']
        from infra.config import load_config

        registry = Registry.from_config(load_config(self.config_path, overrides))
        main = Registry.from_config(self.cfg)     # v0's files, however it was registered (cache or base checkpoint)
        folder = main.local_path(main.version_of("control"))
        champion = registry.register(folder, {"bench": "race"})
        registry.set_alias("champion", champion)
        racers = [registry.register(folder, {"bench": "race"}) for _ in range(2)]
        for v in racers:
            registry.set_version_tags(v, {"gate.decision": "promote", "gate.champion_version": champion,
                                          "gate.run_id": "bench-race"})
        argvs = [rtrl_argv("promote", v, config=self.config_path, overrides=overrides) for v in racers]
        start_at = time.time() + 3.0         # both started, then both released at the same moment
        gate = f"import time,os,sys; time.sleep(max(0.0,{start_at}-time.time())); os.execv(sys.argv[1], sys.argv[1:])"
        procs = [subprocess.Popen([argv[0], "-c", gate, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True) for argv in argvs]
        results = [(p.wait(timeout=180), p.stdout.read(), p.stderr.read()) for p in procs]
        winners = [v for v, (code, _, _) in zip(racers, results) if code == 0]
        now = registry.version_of("champion")
        tags = {v: {k: t for k, t in registry.info(v).tags.items() if k.startswith("promotion.")} for v in racers}
        return len(winners), {"racers": racers, "exit_codes": [c for c, _, _ in results], "champion": now,
                              "winner_is_champion": winners == [now], "audit": tags,
                              "refused": [e.strip().splitlines()[-1] for c, _, e in results if c != 0 and e.strip()]}


def _services_loop():
    from infra.orchestrator.demo import Demo

    class ServicesLoop(_Loop, Demo):
        pass

    return ServicesLoop


def ServicesLoop(cfg, config_path, overrides, log):  # noqa: N802 -- a class made on first use (Demo imports a lot)
    return _services_loop()(cfg, config_path, overrides, log)
