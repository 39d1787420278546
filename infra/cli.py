"""`rtrl` command line. Parsing is cheap; each subcommand's module (and its heavy imports) loads only when run.

Every subcommand takes the global options first: `rtrl [--config FILE] [--set key.sub=value ...] COMMAND ...`.
"""

from __future__ import annotations

import argparse
import importlib
import sys

EPILOG = """examples:
  rtrl up                      start the embedded broker (+ topics) and the MLflow store
  rtrl status                  what is running, where its logs are
  rtrl collector --keys-new web   make an API key for client 'web', then `rtrl collector` serves ingest
  rtrl archive                 archive telemetry to Parquet (Ctrl-C stops it cleanly)
  rtrl replay --start 2026-11-01T00:00Z --end 2026-11-02T00:00Z --out /tmp/rewards
                               recompute the reward table from the archived event log
  rtrl rewards --cycle c1      a cycle's reward rows from Kafka (range since the last cycle)
  rtrl quality --rewards .rtrl/rewards/table   data-quality suites (exit 3 blocks training)
  rtrl bootstrap               make and register policy v0 (aliases champion, control)
  rtrl bench ingest --json     SDK, collector and Kafka throughput, end-to-end delivery check
  rtrl bench emit --json       SDK emit cost on the caller's thread, without and with the write-ahead log
  rtrl serve --detach          the OpenAI-compatible gateway (A/B arms, hot swap) in the background
  rtrl gate 3                  evaluate version 3 against the champion (held-out suite, report, MLflow)
  rtrl promote 3               make version 3 champion if its gate passed against the current champion
  rtrl demo --cycles 3 --summary out.json   the whole loop from nothing, 3 cycles, A/B summary
  rtrl orchestrator            Dagster UI + daemon: cycles every 5 hours, replay jobs
  rtrl chaos --faults 20 --json   kill and restart the loop's parts; every served request rewarded exactly once?
  rtrl rollback                champion back to the version it replaced
  rtrl ab report --cycle c3 --format md   a cycle's A/B table (also html, json)
  rtrl dashboard               the Streamlit dashboard on http://127.0.0.1:18501
  rtrl down                    stop everything this state dir started
"""

SHARDS_HELP = ("workspace shards, the keys of the job's state: the parallelism a distributed runner can use "
               "(default 4; the DirectRunner runs in one process, where fewer shards cost less)")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rtrl", description="Real-time RL for coding-assistant models.",
                                epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", metavar="FILE", help="TOML config (default: infra/rtrl.toml, the embedded default)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override one config key, e.g. --set kafka.port=29092 (repeatable)")
    # the `deepspeed` launcher puts --local_rank=N before the command; the rank is read from the environment
    p.add_argument("--local_rank", type=int, help=argparse.SUPPRESS)
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def cmd(name: str, handler: str, help: str, **kw) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, help=help, description=help, **kw)
        sp.set_defaults(handler=handler)
        return sp

    up = cmd("up", "infra.commands.stack:up", "start the embedded stack (broker, topics, MLflow store)")
    up.add_argument("--mlflow-ui", action="store_true", help="also serve the MLflow UI on mlflow.ui_port")
    cmd("status", "infra.commands.stack:status", "show what the stack runs (JSON)")
    cmd("down", "infra.commands.stack:down", "stop every process this state dir started")

    cfg = cmd("config", "infra.commands.config:show", "print the effective configuration (TOML → JSON)")
    cfg.add_argument("--check", action="store_true", help="only validate; exit 1 with the reason on error")

    schemas = cmd("schemas", "infra.commands.schemas:main", "event schema tools")
    schemas_sub = schemas.add_subparsers(dest="schemas_command", metavar="ACTION", required=True)
    exp = schemas_sub.add_parser("export", help="write one JSON Schema per event type (and index.json) to DIR")
    exp.add_argument("dir")
    val = schemas_sub.add_parser("validate", help="validate JSON events (one per line) from FILE or stdin")
    val.add_argument("file", nargs="?", default="-")

    col = cmd("collector", "infra.commands.collector:main", "run the HTTP ingest collector (foreground)")
    col.add_argument("--keys-new", metavar="CLIENT", help="create an API key for CLIENT, print it once, and exit")
    col.add_argument("--keys-list", action="store_true", help="list clients that have keys and exit")
    col.add_argument("--detach", action="store_true", help="run in the background (stopped by `rtrl down`)")

    arc = cmd("archive", "infra.commands.archive:main", "archive Kafka topics to the Parquet event log")
    arc.add_argument("--detach", action="store_true", help="run in the background (stopped by `rtrl down`)")
    arc.add_argument("--until-idle", type=float, metavar="SECONDS",
                     help="stop after SECONDS with no new message (default: run until stopped)")

    srv = cmd("serve", "infra.commands.serve:main",
              "serve the policy: OpenAI-compatible gateway, A/B arms on registry aliases, vLLM engines, hot swap",
              epilog="Endpoints: POST /v1/chat/completions (needs `user`), GET /v1/models, GET /health. The arms' "
                     "aliases must be set first (`rtrl bootstrap`). Settings: [serving] in rtrl.toml.")
    srv.add_argument("--detach", action="store_true", help="run in the background (stopped by `rtrl down`)")

    qual = cmd("quality", "infra.commands.quality:main",
               "data-quality suites over the reward table (and event log); a failure blocks training",
               epilog="exit status: 0 every suite passed; 3 a suite failed (training on this data is blocked); "
                      "2 bad arguments or unreadable input")
    qual.add_argument("--rewards", metavar="PATH", help="reward table: a Parquet file or a directory of them")
    qual.add_argument("--window", metavar="ID", help="only the reward rows of this window (a cycle id)")
    qual.add_argument("--events", metavar="ARCHIVE_ROOT",
                      help="also check the archived event log; its privacy-mode trajectories must have no reward row")
    qual.add_argument("--start", metavar="TIME", help="events from this event time on (ISO 8601 with timezone)")
    qual.add_argument("--end", metavar="TIME", help="events before this event time (ISO 8601 with timezone)")
    qual.add_argument("--report", metavar="DIR",
                      help="write report.md, report.html, report.json here (default <state_dir>/quality/<timestamp>)")

    rew = cmd("rewards", "infra.commands.rewards:cycle",
              "compute a cycle's rewards from Kafka: the offset range since the last cycle + its open join state")
    rew.add_argument("--cycle", required=True, metavar="ID", help="cycle id (a rerun of a started cycle reads the "
                     "same range; a done cycle is not run twice)")
    rew.add_argument("--out", metavar="DIR", help="reward table root (default: <state_dir>/rewards/table)")
    rew.add_argument("--idle", type=float, default=2.0, metavar="S",
                     help="the range ends where every partition has been quiet for S seconds (default 2)")
    rew.add_argument("--shards", type=int, help=SHARDS_HELP)
    rew.add_argument("beam_args", nargs="*", metavar="BEAM_OPTION", help="after --: Beam pipeline options")

    strm = cmd("rewards-stream", "infra.commands.rewards:stream",
               "run the reward job continuously on an unbounded Kafka read (a portable runner: Flink, Spark, "
               "Dataflow)", epilog="example: rtrl rewards-stream --out /data/rewards -- --runner=FlinkRunner "
               "--flink_master=HOST:8081 --environment_type=LOOPBACK. Needs a JDK for Beam's Kafka expansion "
               "service (or --expansion-service HOST:PORT); the DirectRunner is refused.")
    strm.add_argument("--out", required=True, metavar="DIR", help="reward table root")
    strm.add_argument("--group-id", default="rtrl-rewards", help="Kafka consumer group (default rtrl-rewards)")
    strm.add_argument("--expansion-service", metavar="HOST:PORT", help="a running Beam expansion service for KafkaIO")
    strm.add_argument("--shards", type=int, help=SHARDS_HELP)
    strm.add_argument("beam_args", nargs="+", metavar="BEAM_OPTION", help="after --: Beam options naming the runner")

    trn = cmd("train", "infra.commands.train:main",
              "train the champion on a cycle's reward rows; register the result as a candidate version",
              epilog="On N GPUs: deepspeed --num_gpus N --module infra.cli train --cycle ID (the same code; ZeRO stage "
                     "from trainer.zero_stage). A killed run resumes from its last step checkpoint.")
    trn.add_argument("--cycle", required=True, metavar="ID", help="cycle id (names the run; one candidate each)")
    trn.add_argument("--rewards", metavar="PATH", help="reward table (default: <state_dir>/rewards/table)")
    trn.add_argument("--as-of", metavar="TIME", help="refuse rows maturing after this ISO time (the cycle's as_of)")
    trn.add_argument("--window", metavar="ID", help="only the rows of this window (the reward job's cycle id): one "
                     "cycle's data, so no row is trained on twice")

    rep = cmd("replay", "infra.commands.rewards:replay",
              "recompute rewards from the archived event log over a time range (data engineers)")
    rep.add_argument("--events", metavar="ARCHIVE", help="archive root (default: archive.output_dir)")
    rep.add_argument("--start", required=True, metavar="TIME", help="ISO time with zone, e.g. 2026-11-01T00:00Z")
    rep.add_argument("--end", required=True, metavar="TIME", help="exclusive; requests made in [start, end)")
    rep.add_argument("--out", required=True, metavar="DIR", help="reward table output (never the production one "
                     "unless you say so)")
    rep.add_argument("--shards", type=int, help=SHARDS_HELP)
    rep.add_argument("beam_args", nargs="*", metavar="BEAM_OPTION",
                     help="after --: Beam pipeline options, e.g. -- --runner=FlinkRunner --flink_master=HOST:8081")

    sim = cmd("simulate", "infra.commands.simulate:main",
              "drive the serving endpoint with simulated users (telemetry through the SDK, simulated clock)",
              epilog="example: rtrl simulate --users 16 --duration 30   (30 wall seconds at the default 600x = "
                     "5 simulated hours). Needs the stack (`rtrl up`) and serving running. Defaults: [simulator] "
                     "in rtrl.toml.")
    dur = sim.add_mutually_exclusive_group(required=True)
    dur.add_argument("--duration", type=float, metavar="WALL_SECONDS",
                     help="how long to run, in WALL-CLOCK seconds (simulated span = this x --speed)")
    dur.add_argument("--sim-hours", type=float, metavar="HOURS",
                     help="how long to run, in SIMULATED hours (wall time = this x 3600 / --speed)")
    sim.add_argument("--users", type=int, metavar="N", help="simulated users (default simulator.users)")
    sim.add_argument("--speed", type=float, metavar="X",
                     help="simulated seconds per wall second (default simulator.speed, 600)")
    sim.add_argument("--endpoint", metavar="URL", help="OpenAI-compatible base URL (default "
                     "http://{serving.host}:{serving.port}/v1)")
    sim.add_argument("--model", help="model name to send (default: the first one the endpoint lists)")
    sim.add_argument("--seed", type=int, metavar="S", help="population seed (default simulator.seed)")

    oab = cmd("offline-ab", "infra.commands.offline_ab:main",
              "compare checkpoints on the simulated population offline (same users, in-process sampling): the A/B "
              "table's metrics per checkpoint, split into first turns, retries and task kinds",
              epilog="example: rtrl offline-ab .rtrl/policy-v0 .rtrl/demo/checkpoints/rtrl-policy/v3 --users 96 "
                     "--hours 2   (~1,300 requests and ~75 s per checkpoint on 2 cores). Needs no stack: the "
                     "checkpoints sample in this process on the deterministic clock, and the reward job's "
                     "computation makes the rows. Differences from the first checkpoint come with paired 95% "
                     "intervals (the same users serve every checkpoint; each user's rows are paired). "
                     "One JSON object on stdout, progress on stderr.")
    oab.add_argument("checkpoints", nargs="+", metavar="CHECKPOINT",
                     help="a Hugging Face checkpoint folder, or a registry version number (its local copy)")
    oab.add_argument("--users", type=int, default=96, metavar="N", help="simulated users (default 96)")
    oab.add_argument("--hours", type=float, default=2.0, metavar="H", help="simulated hours (default 2)")
    oab.add_argument("--seed", type=int, metavar="S", help="population seed (default simulator.seed)")
    oab.add_argument("--sampling-seed", type=int, default=7, metavar="S",
                     help="the checkpoints' sampling seed (default 7; the same for every checkpoint)")
    oab.add_argument("--threads", type=int, default=0, metavar="N",
                     help="torch CPU threads of each checkpoint's sampling (0 = 1 when checkpoints run at once, "
                          "else torch's default)")
    oab.add_argument("--jobs", type=int, metavar="N",
                     help="checkpoints served at once, each in a process of its own (default: one per CPU core, "
                          "at most one per checkpoint; 1 = one after the other in this process)")

    boot = cmd("bootstrap", "infra.commands.bootstrap:main",
               "make policy checkpoint v0 (or register policy.base_checkpoint) with aliases champion and control",
               epilog="idempotent: when alias champion is set it does nothing (exit 0) unless --force. The default "
                      "policy is kept in policy.cache_dir (default <state_dir>/policy-v0) and reused by later "
                      "bootstraps with the same [policy] config, in any state dir. Progress on stderr, a JSON "
                      "summary on stdout; needs only the MLflow store, not `rtrl up`.")
    boot.add_argument("--force", action="store_true", help="make and register a new v0 even if champion is set "
                      "(moves champion and control to it)")
    boot.add_argument("--fresh", action="store_true", help="train the default policy even when policy.cache_dir "
                      "holds a current one (the new one replaces it there)")

    gt = cmd("gate", "infra.commands.gate:gate",
             "evaluate CANDIDATE against the champion on the held-out suite: paired non-inferiority and guardrails",
             epilog="Both versions are served privately (vLLM, no telemetry), or with --via-serving staged on the "
                    "running `rtrl serve` (no telemetry either), and run the same tasks with the same seeds, K "
                    "samples each; tasks failing the flaky check are quarantined. Writes report.{json,md,"
                    "html} and episodes.jsonl, logs an MLflow run and gate.* tags on the candidate (read by `rtrl "
                    "promote`). Prints one JSON line. Exit 0: may be promoted; 3: the champion stays; 2: bad "
                    "arguments; 1: the run broke. Defaults: [gate] in rtrl.toml.")
    gt.add_argument("candidate", metavar="CANDIDATE", help="registered model version to evaluate, e.g. 3")
    gt.add_argument("--champion", metavar="VERSION", help="version to compare with (default: alias champion)")
    gt.add_argument("--suite", metavar="DIR", help="task folders (default: gate.suite_dir, else the generated "
                    "held-out suite of gate.suite_tasks tasks)")
    gt.add_argument("--tasks", type=int, metavar="N", help="only the first N tasks of the suite")
    gt.add_argument("--samples", type=int, metavar="K", help="samples per task and arm (default gate.samples_per_task)")
    gt.add_argument("--workers", type=int, metavar="W", help="episodes in flight per arm (default gate.workers)")
    gt.add_argument("--out", metavar="DIR", help="report folder (default STATE/gate/vC-vs-vP-TIME)")
    gt.add_argument("--no-mlflow", action="store_true", help="do not log the run or tag the candidate")
    gt.add_argument("--via-serving", action="store_true", help="stage both versions on the running `rtrl serve` "
                    "and run the arms at once there (gate.via_serving); a promoted candidate stays staged, so "
                    "serving switches to it without loading it again")
    gt.add_argument("--promote", action="store_true", help="on a pass, promote the candidate right away "
                    "(compare-and-swap against the champion it was compared with)")

    ev = cmd("eval", "infra.commands.gate:eval_run", "the eval harness alone: make a task suite, or run one")
    ev_sub = ev.add_subparsers(dest="eval_command", metavar="ACTION", required=True)
    evs = ev_sub.add_parser("suite", help="generate a held-out task suite (task folders) into DIR")
    evs.set_defaults(handler="infra.commands.gate:eval_suite")
    evs.add_argument("--out", required=True, metavar="DIR")
    evs.add_argument("--tasks", type=int, default=60, metavar="N", help="how many tasks (default 60)")
    evs.add_argument("--seed", type=int, default=7, help="suite seed (default 7)")
    evs.add_argument("--ambiguous-rate", type=float, default=0.25, help="share of ambiguous requests (default 0.25)")
    evr = ev_sub.add_parser("run", help="run a suite on one endpoint and write its episodes (JSON lines)")
    evr.set_defaults(handler="infra.commands.gate:eval_run")
    target = evr.add_mutually_exclusive_group(required=True)
    target.add_argument("--endpoint", metavar="URL", help="any OpenAI-compatible base URL, e.g. http://host:8000/v1")
    target.add_argument("--version", metavar="VERSION", help="a registered version, served privately for the run")
    evr.add_argument("--model", help="model name to send to --endpoint (default: the first one it lists)")
    evr.add_argument("--arm", default="candidate", help="label of the episodes (default candidate)")
    evr.add_argument("--suite", metavar="DIR", help="task folders (default as for rtrl gate)")
    evr.add_argument("--tasks", type=int, metavar="N", help="only the first N tasks")
    evr.add_argument("--samples", type=int, metavar="K", help="samples per task (default gate.samples_per_task)")
    evr.add_argument("--workers", type=int, metavar="W", help="episodes in flight (default gate.workers)")
    evr.add_argument("--out", required=True, metavar="FILE", help="episodes as JSON lines")

    prm = cmd("promote", "infra.commands.promote:promote",
              "make VERSION the champion if its gate passed against the version alias champion still points to",
              epilog="Compare-and-swap under a lock: refused (exit 3) when the version's gate tags do not say "
                     "promote or when champion moved since the eval. The old champion becomes alias previous; "
                     "audit tags promotion.* go on the version. Prints one JSON line.")
    prm.add_argument("version", help="registered model version, e.g. 3")
    prm.add_argument("--force", action="store_true", help="skip the gate-decision check (recorded in "
                     "promotion.forced); the compare-and-swap on champion still applies")
    prm.add_argument("--expect-champion", metavar="VERSION", help="the champion to swap from when the version has "
                     "no gate result (with --force); must agree with gate.champion_version when that exists")
    cmd("rollback", "infra.commands.promote:rollback",
        "point champion back at alias previous (audited); previous moves one promotion further back",
        epilog="Refused (exit 3) when previous is not set. Prints one JSON line.")

    ab = cmd("ab", "infra.commands.ab:main", "A/B metrics per cycle: compute them from the reward table, or report them",
             epilog="Results live in <state_dir>/ab/cycles/<ID>/ (the orchestrator writes them after each cycle). "
                    "Settings: [ab] in rtrl.toml.")
    ab_sub = ab.add_subparsers(dest="ab_command", metavar="ACTION", required=True)
    abr = ab_sub.add_parser("report", help="print (or write) a stored cycle's A/B report")
    abr.add_argument("--cycle", metavar="ID", help="cycle id (default: the latest stored cycle)")
    abr.add_argument("--format", choices=("md", "html", "json"), default="md", help="output format (default md)")
    abr.add_argument("--out", metavar="FILE", help="write to FILE instead of stdout")
    abc = ab_sub.add_parser("compute", help="compute a cycle's A/B metrics from its reward rows and store them")
    abc.add_argument("--cycle", required=True, metavar="ID", help="cycle id: reads <rewards>/policy_version=*/window=ID/")
    abc.add_argument("--rewards", metavar="PATH", help="reward table root (default <state_dir>/rewards/table)")
    abc.add_argument("--as-of", metavar="TIME", help="exclude rows maturing after this ISO time (default: the reward "
                     "cycle manifest's as_of when there is one)")
    abc.add_argument("--pre-period", metavar="PATH", help="reward rows from before the arms split (a Parquet file or "
                     "folder) for CUPED")

    dash = cmd("dashboard", "infra.commands.dashboard:main",
               "serve the A/B and pipeline-health dashboard (Streamlit) on dashboard.host:dashboard.port",
               epilog="Reads only the state dir (A/B results, reward cycle manifests, data-quality and gate reports) "
                      "and the MLflow registry. Bound to 127.0.0.1 by default. Settings: [dashboard] in rtrl.toml.")
    dash.add_argument("--port", type=int, help="port (default dashboard.port)")
    dash.add_argument("--detach", action="store_true", help="run in the background (stopped by `rtrl down`)")

    dm = cmd("demo", "infra.commands.demo:main",
             "the whole loop from nothing: stack, v0, serving with control/treatment arms, simulated users, K "
             "cycles under the orchestrator on an accelerated clock; prints a table per cycle and the A/B result",
             epilog="Works in <state_dir>/demo (made fresh unless --resume). What every demo reuses is made once "
                    "and kept outside it: v0 in <state_dir>/policy-v0 (bootstrapped, a few minutes), the gate's "
                    "held-out suite in <state_dir>/eval-suites with v0's gate episodes; `--prepare` (run by "
                    "./infra/setup.sh) makes them without a demo, else the first demo does. Progress on stderr, the "
                    "table on stdout. Settings: [demo] in rtrl.toml (users, speed, cadence, gate size).")
    dm.add_argument("--cycles", type=int, metavar="K", help="cycles to run (default demo.cycles, 3)")
    dm.add_argument("--summary", metavar="PATH", help="also write the summary as JSON to PATH")
    dm.add_argument("--keep-running", action="store_true", help="leave the stack, serving, users and the UIs "
                    "(MLflow, Dagster, dashboard) running at the end; `rtrl --set state_dir=... down` stops them")
    dm.add_argument("--resume", action="store_true", help="keep the demo state dir of an earlier run")
    dm.add_argument("--prepare", action="store_true", help="only make what every demo reuses (v0, the gate's "
                    "suite, v0's gate episodes) when missing, then stop: so that the first demo takes as long as "
                    "the next ones")
    orch = cmd("orchestrator", "infra.commands.orchestrator:main",
               "the Dagster UI and daemon: the cycle's assets and lineage, the cadence sensor, replay jobs",
               epilog="Dagster instance in <state_dir>/dagster; UI on orchestrator.dagster_host:dagster_port. "
                      "The cadence sensor starts a cycle every orchestrator.interval_s (from the last start) when "
                      "the previous one finished and orchestrator.min_mature_rows mature requests exist.")
    orch.add_argument("--detach", action="store_true", help="run in the background (stopped by `rtrl down`)")

    ch = cmd("chaos", "infra.commands.chaos:main",
             "fault injection: run the loop while killing and restarting its parts at seeded moments and flooding "
             "replays; then check every served request got exactly one reward row",
             epilog="Runs in its own state dir (default <state_dir>/chaos, wiped first) on free ports: the stack with "
                    "a durable broker log (storage s3), collector, archiver, serving, simulated users, a reward cycle "
                    "every few faults, the trainer. Faults: broker, archiver, collector, serving (SIGKILL, down a "
                    "seeded while, restarted), reward_job, trainer (SIGKILL mid-run, run again), duplicates, "
                    "out_of_order, late_events (replays produced to Kafka). Prints faults_injected, requests_served, "
                    "rewards_expected, rewards_lost, rewards_duplicated, rewards_pending, max_recovery_seconds, "
                    "faults_by_type. Exit 0: nothing lost or duplicated; 3: something was; 1: the run broke. "
                    "Example: rtrl chaos --faults 20 --seed 0 --json")
    ch.add_argument("--faults", type=int, default=20, metavar="N", help="faults to inject (default 20)")
    ch.add_argument("--seed", type=int, default=0, help="seed of the fault plan and the users (default 0)")
    ch.add_argument("--json", action="store_true", help="print the result as one JSON line (default: indented)")
    ch.add_argument("--types", metavar="T1,T2", help="only these fault types (default: all of broker, archiver, "
                    "collector, serving, reward_job, trainer, duplicates, out_of_order, late_events)")
    ch.add_argument("--users", type=int, default=12, metavar="N", help="simulated users (default 12)")
    ch.add_argument("--speed", type=float, default=60.0, metavar="X",
                    help="simulated seconds per wall second (default 60)")
    ch.add_argument("--lateness", type=float, default=60.0, metavar="WALL_S",
                    help="allowed lateness in wall seconds: rewards.allowed_lateness_s = this x --speed (default 60)")
    ch.add_argument("--warmup", type=float, default=20.0, metavar="S", help="seconds of traffic before the first "
                    "fault (default 20)")
    ch.add_argument("--cycle-every", type=int, default=4, metavar="K", help="a reward cycle after every K faults "
                    "(default 4), besides the reward-job faults' own")
    ch.add_argument("--state-dir", metavar="DIR", help="where the run lives (default <state_dir>/chaos; wiped first)")
    ch.add_argument("--serving-cores", metavar="CORES", help="serving.cpu_cores of the run's vLLM engine (default: "
                    "the last core, away from another stack's serving on core 0; '' = vLLM's choice)")
    ch.add_argument("--keep-running", action="store_true", help="leave the loop running at the end (`rtrl --set "
                    "state_dir=DIR down` stops it)")

    bench = cmd("bench", "infra.commands.bench:main", "benchmarks that print JSON")
    bench_sub = bench.add_subparsers(dest="bench_command", metavar="WHAT", required=True)
    bi = bench_sub.add_parser("ingest", help="SDK enqueue latency, collector and Kafka throughput, archive check")
    bi.add_argument("--json", action="store_true", help="print one JSON object (the default output too)")
    bi.add_argument("--events", type=int, default=50_000, help="events to send per stage (default 50000)")
    bem = bench_sub.add_parser("emit", help="SDK emit latency and throughput on the caller's thread (transport that "
                               "discards), without and with the write-ahead log (sdk.write_ahead)")
    bem.add_argument("--json", action="store_true", help="print one JSON object (the default output too)")
    from instrumentation.bench_emit import add_arguments as add_emit_arguments  # argparse only
    add_emit_arguments(bem)
    bfz = bench_sub.add_parser("fuzz", help="hostile input (schemathesis, hypothesis, atheris) against the collector "
                               "and the parsers: cases, crashes (must be 0), rejections by reason")
    bfz.add_argument("--json", action="store_true", help="print one JSON object (the default output too)")
    bfz.add_argument("--scale", type=float, default=1.0, help="multiply every target's case count (default 1: "
                     "about 60,000 cases)")
    bfz.add_argument("--seed", type=int, default=0, help="generation seed (default 0)")
    br = bench_sub.add_parser("rewards", help="reward job: replay and Kafka offset-range throughput vs a polars "
                              "reference, peak RSS; rows must match")
    br.add_argument("--json", action="store_true", help="print one JSON object (the default output too)")
    br.add_argument("--requests", type=int, default=100_000, help="synthetic requests (~5 events each)")
    br.add_argument("--no-kafka", action="store_true", help="skip the offset-range stage")
    btr = bench_sub.add_parser("trainer", help="trainer tokens/s vs TRL's GRPOTrainer; log-prob memory at vocab 32k "
                               "(installs TRL for the benchmark when missing)")
    btr.add_argument("--json", action="store_true", help="print one JSON object (the default output too)")
    btr.add_argument("--rows", type=int, default=256, help="reward rows to train on (default 256)")
    btr.add_argument("--micro-batch", type=int, default=8, help="sequences per forward/backward (default 8)")
    btr.add_argument("--rows-per-step", type=int, default=64, help="rows per optimizer step (default 64)")
    bdc = bench_sub.add_parser("decode", help="in-process decoding of a model of [policy]'s shape: trainer.decode "
                               "vs transformers, per token and per batch; tokens must match")
    bdc.add_argument("--json", action="store_true", help="print one JSON object (the default output too)")
    bdc.add_argument("--prompt-tokens", type=int, default=800, help="prompt length (default 800)")
    bdc.add_argument("--new-tokens", type=int, default=100, help="tokens generated (default 100)")
    bdc.add_argument("--batch", type=int, default=50, help="left-padded prompts of the batch measurement (default 50)")
    bdc.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    bg = bench_sub.add_parser("gate", help="the default gate suite end to end (champion vs itself): seconds per "
                              "task, infrastructure failure rate, bubblewrap overhead vs a plain subprocess")
    bg.add_argument("--json", action="store_true", help="print one JSON object (the default output too)")
    bg.add_argument("--tasks", type=int, help="tasks (default gate.suite_tasks)")
    bg.add_argument("--samples", type=int, help="samples per task and arm (default gate.samples_per_task)")
    bsv = bench_sub.add_parser("serving", help="vLLM vs transformers generate throughput, gateway latency, hot swap "
                               "under load (private stack and tiny model)")
    bsv.add_argument("--json", action="store_true", help="print one JSON object (the default output too)")
    bsv.add_argument("--batch", type=int, default=32, help="sequences generated at once (default 32)")
    bsv.add_argument("--prompt-tokens", type=int, default=64, help="prompt length (default 64)")
    bsv.add_argument("--new-tokens", type=int, default=128, help="tokens generated per sequence (default 128)")
    bsv.add_argument("--clients", type=int, default=8, help="concurrent gateway clients during the swap (default 8)")
    bsv.add_argument("--shape", choices=("default", "1b"), default="default", help="model shape of the throughput "
                     "stage: the default policy's (default) or a ~1B-parameter Llama")
    bsv.add_argument("--throughput-only", action="store_true", help="only vLLM vs HF generate (no broker or MLflow "
                     "needed: e.g. on a GPU machine; there both run in bfloat16, vLLM with CUDA graphs)")
    bab = bench_sub.add_parser("ab", help="one cycle's A/B metrics over 10 million reward rows (Parquet in, the "
                               "stored result out)")
    bab.add_argument("--json", action="store_true", help="print one JSON object (the default output too)")
    bab.add_argument("--rows", type=int, default=10_000_000, help="reward rows (default 10,000,000)")
    bab.add_argument("--users", type=int, default=100_000, help="distinct users (default 100,000)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from infra.config import ConfigError, load_config

    try:
        cfg = load_config(args.config, args.overrides)
    except ConfigError as e:
        print(f"rtrl: config error: {e}", file=sys.stderr)
        return 2
    module, func = args.handler.split(":")
    handler = getattr(importlib.import_module(module), func)
    from infra.stack.process import StackError

    try:
        return int(handler(args, cfg) or 0)
    except StackError as e:
        print(f"rtrl: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
