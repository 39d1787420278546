"""`rtrl bench WHAT --json`: benchmarks print one JSON object on stdout (progress goes to stderr)."""

from __future__ import annotations

import contextlib
import json
import os
import sys

from infra.commands import add_command

METRICS_COST_BAR = 0.95   # the target: with metrics on, throughput within 5 % of metrics off


def add_parser(subparsers) -> None:
    bench = add_command(subparsers, "bench", main, "benchmarks that print JSON")
    whats = bench.add_subparsers(dest="bench_command", metavar="WHAT", required=True)

    def add(name: str, help: str):
        p = whats.add_parser(name, help=help)
        p.add_argument("--json", action="store_true", help="print one JSON object (the default output too)")
        return p

    bi = add("ingest", "SDK enqueue latency, collector and Kafka throughput, archive check")
    bi.add_argument("--events", type=int, default=50_000, help="events to send per stage (default 50000)")
    bi.add_argument("--metrics-cost", action="store_true", help="instead: the collector stage with collector.metrics "
                    "off and on in alternating rounds (--rounds), --events each; exit 1 when on is below 0.95x off")
    bi.add_argument("--rounds", type=int, default=3, help="with --metrics-cost: rounds of off-then-on (default 3)")
    bem = add("emit", "SDK emit latency and throughput on the caller's thread (transport that discards), without "
              "and with the write-ahead log (sdk.write_ahead)")
    from instrumentation.bench_emit import add_arguments as add_emit_arguments  # argparse only
    add_emit_arguments(bem)
    bfz = add("fuzz", "hostile input (schemathesis, hypothesis, atheris) against the collector and the parsers: "
              "cases, crashes (must be 0), rejections by reason")
    bfz.add_argument("--scale", type=float, default=1.0, help="multiply every target's case count (default 1: "
                     "about 60,000 cases)")
    bfz.add_argument("--seed", type=int, default=0, help="generation seed (default 0)")
    br = add("rewards", "reward job: replay, DaskRunner (S3 in and out) and Kafka offset-range throughput vs a "
             "polars reference, peak RSS; rows must match")
    br.add_argument("--requests", type=int, default=100_000, help="synthetic requests (~5 events each)")
    br.add_argument("--no-kafka", action="store_true", help="skip the offset-range stage")
    br.add_argument("--dask-workers", type=int, default=2, metavar="N", help="worker processes of the DaskRunner "
                    "stage's dask.distributed LocalCluster (default 2; 0 skips the stage)")
    btr = add("trainer", "trainer tokens/s vs TRL's GRPOTrainer; log-prob memory at vocab 32k (installs TRL for the "
              "benchmark when missing)")
    btr.add_argument("--rows", type=int, default=256, help="reward rows to train on (default 256)")
    btr.add_argument("--micro-batch", type=int, default=8, help="sequences per forward/backward (default 8)")
    btr.add_argument("--rows-per-step", type=int, default=64, help="rows per optimizer step (default 64)")
    bdc = add("decode", "in-process decoding of a model of [policy]'s shape: trainer.decode vs transformers, per "
              "token and per batch; tokens must match")
    bdc.add_argument("--prompt-tokens", type=int, default=800, help="prompt length (default 800)")
    bdc.add_argument("--new-tokens", type=int, default=100, help="tokens generated (default 100)")
    bdc.add_argument("--batch", type=int, default=50, help="left-padded prompts of the batch measurement (default 50)")
    bdc.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    bg = add("gate", "the default gate suite end to end (champion vs itself): seconds per task, infrastructure "
             "failure rate, bubblewrap overhead vs a plain subprocess")
    bg.add_argument("--tasks", type=int, help="tasks (default gate.tasks.suite_tasks)")
    bg.add_argument("--samples", type=int, help="samples per task and arm (default gate.tasks.samples_per_task)")
    bsv = add("serving", "vLLM vs transformers generate throughput, gateway latency, hot swap under load, and a "
              "swap by delta in place under load with the served log-probs checked (private stack and tiny model)")
    bsv.add_argument("--batch", type=int, default=32, help="sequences generated at once (default 32)")
    bsv.add_argument("--prompt-tokens", type=int, default=64, help="prompt length (default 64)")
    bsv.add_argument("--new-tokens", type=int, default=128, help="tokens generated per sequence (default 128)")
    bsv.add_argument("--clients", type=int, default=8, help="concurrent gateway clients during the swap (default 8)")
    bsv.add_argument("--stream-share", type=float, default=0.5, help="share of the clients that stream (stream: "
                     "true through the official openai client, each stream read to its end; default 0.5)")
    bsv.add_argument("--shape", choices=("default", "1b"), default="default", help="model shape of the throughput "
                     "stage: the default policy's (default) or a ~1B-parameter Llama")
    bsv.add_argument("--metrics-cost", action="store_true", help="instead: the gateway's steady requests/s with "
                     "serving.metrics off and on (its counters and vLLM's statistics), alternating --rounds rounds "
                     "of --steady-s; exit 1 when on is below 0.95x off")
    bsv.add_argument("--rounds", type=int, default=3, help="with --metrics-cost: rounds of off-then-on (default 3)")
    bsv.add_argument("--steady-s", type=float, default=15.0, help="with --metrics-cost: seconds measured per round "
                     "(after 3 s of warm-up; default 15)")
    bsv.add_argument("--throughput-only", action="store_true", help="only vLLM vs HF generate (no broker or MLflow "
                     "needed: e.g. on a GPU machine; there both run in bfloat16, vLLM with CUDA graphs)")
    bab = add("ab", "one cycle's A/B metrics over 10 million reward rows (Parquet in, the stored result out)")
    bab.add_argument("--rows", type=int, default=10_000_000, help="reward rows (default 10,000,000)")
    bab.add_argument("--users", type=int, default=100_000, help="distinct users (default 100,000)")
    bsp = add("specialize", "specialization by organization on the simulated population, in one process: one "
              "cycle, an adapter per org over the shared champion gated on its org's users, then specialized - "
              "shared on edit persistence per org and pooled (95%% intervals, paired by user), in the world of "
              "`rtrl demo --specialize`")
    bsp.add_argument("--seed", type=int, default=0, help="the seed of the traffic, trainer and users (default 0)")
    bsp.add_argument("--out", metavar="DIR", help="keep the registry, checkpoints and the result as specialize.json "
                     "here (default: a temporary folder, removed)")
    blv = add("live", "the live loop's learning curve: N cycles of production's Dagster cycle job on the embedded "
              "stack (Kafka, the Beam job, vLLM serving with two arms, simulated users), with production's learning "
              "settings; then every promoted champion against v0 on the learning curve's fixed users")
    blv.add_argument("--cycles", type=int, default=6, help="cycles (default 6)")
    blv.add_argument("--seed", type=int, default=0, help="the scoring users' seed, as `rtrl bench learning`'s seed "
                     "(default 0)")
    bsk = add("soak", "the loop for many cycles on the embedded stack with retention on (the demo's loop, "
              "infra/configs/bench-soak.toml): per cycle each step's seconds, each long-lived process's memory, "
              "the state's bytes and files by part, the versions holding artifacts; then rollback through the "
              "last K champions and an archiver restart; exit 1 unless time, memory and disk stay flat")
    bsk.add_argument("--cycles", type=int, default=24, help="cycles (default 24: five simulated days at "
                     "production's cadence)")
    bsk.add_argument("--plot", metavar="FILE", help="draw steps' seconds, state bytes and memory per cycle (PNG or "
                     "SVG, by the name)")
    bl = add("learning", "the learning curve: the loop for N cycles in this process, over K seeds; every promoted "
             "champion against v0 on fixed simulated users (persistence, dissatisfied follow-ups, broken calls, "
             "edit and clarification rates with 95%% intervals), the slope of persistence per cycle, the last "
             "champion against the first")
    bl.add_argument("--cycles", type=int, default=6, help="cycles per seed (default 6)")
    bl.add_argument("--seeds", type=int, default=3, help="seeds 0..K-1 (default 3)")
    bl.add_argument("--first-seed", type=int, default=0, help="start at this seed (default 0)")
    bl.add_argument("--out", metavar="DIR", help="keep every lineage's registry, checkpoints and cycles.jsonl here, "
                    "and the result as learning.json (default: a temporary folder, removed)")
    bl.add_argument("--plot", metavar="FILE", help="draw the curve (PNG or SVG, by the name)")
    bl.add_argument("--headroom", action="store_true", help="also score scripted policies (the oracle, v0-like, "
                    "v0-like without broken calls) on the first seed's scoring users: how far v0 is from what the "
                    "users reward")
    bar = add("archive", "archiver throughput: Kafka to durable, manifested Parquet (events/s), from an empty "
              "archive; a private broker unless --bootstrap")
    bar.add_argument("--events", type=int, default=100_000, help="events to produce first, every event type "
                     "(default 100000)")
    bar.add_argument("--batch", type=int, default=50_000, help="archive.batch_max_events (default 50000)")
    bar.add_argument("--bootstrap", default="", metavar="HOST:PORT", help="an existing broker with the topics "
                     "(default: a private one)")
    brk = add("ranks", "one cycle step on N CPU ranks (gloo) at a ZeRO stage and on 1 rank with the same global "
              "batch: candidates registered (must be 1), largest weight difference, reloaded logits")
    from infra.bench.ranks import add_arguments as add_ranks_arguments  # argparse only
    add_ranks_arguments(brk)
    bgp = add("gpu", "the GPU check: trainer tokens/s and peak memory (bf16, checkpointing, LoRA), the fused log-prob "
              "kernel vs torch, generation vs recomputation log-probs, checkpoint save/load; without a GPU a dry run "
              "at toy size on the CPU")
    from infra.bench.gpu import add_arguments as add_gpu_arguments  # argparse only
    add_gpu_arguments(bgp)
    bwt = add("weights", "what a cycle ships: served weights as a verified delta against the parent's, at Qwen2.5-"
              "0.5B's shape (random weights) or the default policy's, trained at the 0.5B profile's learning rate: "
              "bytes in float32 and bf16, encode/decode seconds, bitwise equality, the delta chain's rebuild, and "
              "a vLLM swap in place against a full load")
    bwt.add_argument("--shape", choices=("0.5b", "toy"), default="0.5b", help="Qwen2.5-0.5B's shape (494M "
                     "parameters) or the default policy's (default 0.5b)")
    bwt.add_argument("--versions", type=int, default=None, help="versions in the lineage, the first an anchor "
                     "(default: 2 at 0.5b, 11 at toy: ten deltas)")
    bwt.add_argument("--steps", type=int, default=4, help="optimizer steps per version (default 4)")
    bwt.add_argument("--rows-per-step", type=int, default=2, help="rows per optimizer step (default 2)")
    bwt.add_argument("--seed", type=int, default=0, help="weights and rows seed (default 0)")
    bwt.add_argument("--no-swap", action="store_true", help="leave out the vLLM swap")
    bsr = add("services", "the cycle as a service, once: Postgres, moto S3, the MLflow server, the Dagster daemon; "
              "the sensor starts a cycle, the trainer is killed and resumed, a promotion race; torn down at the end")
    from infra.bench.services import add_arguments as add_services_arguments  # argparse only
    add_services_arguments(bsr)


def main(args, cfg) -> int:
    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    # vLLM logs to stdout by default (its engine processes inherit this): stdout is the JSON object's alone
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")

    if args.bench_command == "ingest" and args.metrics_cost:
        from infra.bench.ingest import collector_cost

        result = {"benchmark": "ingest_metrics_cost", "cpus": os.cpu_count(),
                  **collector_cost(args.events, args.rounds, args.config, tuple(args.overrides), log=log)}
        print(json.dumps(result))
        return 0 if result["on_over_off"] >= METRICS_COST_BAR else 1
    if args.bench_command == "serving" and args.metrics_cost:
        from infra.bench.metrics_cost import serving_run

        with contextlib.redirect_stdout(sys.stderr):
            result = {"benchmark": "serving_metrics_cost", "cpus": os.cpu_count(),
                      **serving_run(args.clients, args.new_tokens, args.steady_s, args.rounds, log=log)}
        print(json.dumps(result))
        return 0 if result["on_over_off"] >= METRICS_COST_BAR else 1
    if args.bench_command == "ingest":
        from infra.bench.ingest import run

        result = run(args.events, args.config, tuple(args.overrides), log=log)
        result = {"benchmark": "ingest", "cpus": os.cpu_count(), **result}
        print(json.dumps(result))
        return 0 if result["events_archived"] == result["events_sent"] else 1
    if args.bench_command == "emit":
        from instrumentation.bench_emit import run as run_emit

        print(json.dumps({"benchmark": "emit", "cpus": os.cpu_count(), **run_emit(args)}))
        return 0
    if args.bench_command == "fuzz":
        from infra.bench.fuzz import DEFAULT_CASES, run as run_fuzz

        cases = {k: max(1, round(v * args.scale)) for k, v in DEFAULT_CASES.items()}
        result = {"benchmark": "fuzz", "cpus": os.cpu_count(), **run_fuzz(cases, args.seed, log=log)}
        print(json.dumps(result))
        return 0 if result["crashes"] == 0 else 1
    if args.bench_command == "rewards":
        from infra.bench.rewards import run as run_rewards

        result = {"benchmark": "rewards", "cpus": os.cpu_count(),
                  **run_rewards(args.requests, kafka=not args.no_kafka, log=log, dask_workers=args.dask_workers)}
        print(json.dumps(result))
        ok = result["reference_rows_match"] and result["replay_rows_match_reference"] and all(
            result.get(k, True) for k in ("offset_range_rows_match_reference", "dask_rows_match_reference"))
        return 0 if ok else 1
    if args.bench_command == "serving":
        from infra.bench.serving import run as run_serving

        with contextlib.redirect_stdout(sys.stderr):     # DeepSpeed's and the registry's chatter: stdout is the JSON's
            result = {"benchmark": "serving", "cpus": os.cpu_count(),
                      **run_serving(args.batch, args.prompt_tokens, args.new_tokens, args.clients, log=log,
                                    gateway=not args.throughput_only, shape=args.shape,
                                    stream_share=args.stream_share)}
        print(json.dumps(result))
        delta = result.get("delta_swap") or {}
        ok = args.throughput_only or (result["failed_requests_during_swap"] == 0 and result["old_engine_shut_down"]
                                      and delta.get("failed_requests_during_swap") == 0 and delta.get("in_place")
                                      and not delta.get("fallback") and delta.get("contract_holds"))
        return 0 if ok else 1
    if args.bench_command == "trainer":
        from infra.bench.trainer import run as run_trainer

        result = {"benchmark": "trainer", "cpus": os.cpu_count(),
                  **run_trainer(args.rows, args.micro_batch, args.rows_per_step, log=log)}
        print(json.dumps(result))
        return 0
    if args.bench_command == "weights":
        from infra.bench.quiet import quiet_libraries
        from infra.bench.weights import run as run_weights

        if min(args.steps, args.rows_per_step, args.versions or 2) < 1 or (args.versions or 2) < 2:
            print("rtrl bench weights: --steps and --rows-per-step must be at least 1, --versions at least 2",
                  file=sys.stderr)
            return 2
        quiet_libraries()
        versions = args.versions or (2 if args.shape == "0.5b" else 11)
        with contextlib.redirect_stdout(sys.stderr):     # DeepSpeed's op builds print: stdout is the JSON's alone
            result = {"benchmark": "weights", "cpus": os.cpu_count(),
                      **run_weights(cfg, args.shape, versions, args.steps, args.rows_per_step, args.seed,
                                    swap=not args.no_swap, log=log)}
        print(json.dumps(result))
        swap = result.get("swap") or {}
        ok = result["served_bitwise_equal"] and (not swap or swap["same_tokens"])
        return 0 if ok else 1
    if args.bench_command == "decode":
        from infra.bench.decode import run as run_decode

        result = {"benchmark": "decode", "cpus": os.cpu_count(),
                  **run_decode(cfg.policy, prompt_tokens=args.prompt_tokens, new_tokens=args.new_tokens,
                               batch=args.batch, threads=args.threads, log=log)}
        print(json.dumps(result))
        return 0 if result["same_tokens"] else 1
    if args.bench_command == "gate":
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
        from infra.bench.gate import run as run_gate_bench

        result = {"benchmark": "gate", "cpus": os.cpu_count(), **run_gate_bench(cfg, args.tasks, args.samples, log)}
        print(json.dumps(result))
        return 0 if result["infra_failure_rate"] < cfg.gate.tasks.max_infra_failure_rate else 1
    if args.bench_command == "ab":
        from infra.bench.ab import run as run_ab

        result = {"benchmark": "ab", "cpus": os.cpu_count(), **run_ab(args.rows, args.users, log=log)}
        print(json.dumps(result))
        return 0
    if args.bench_command == "learning":
        from infra.bench.learning import run as run_learning

        if args.cycles < 1 or args.seeds < 1:
            print("rtrl bench learning: --cycles and --seeds must be at least 1", file=sys.stderr)
            return 2
        seeds = list(range(args.first_seed, args.first_seed + args.seeds))
        with contextlib.redirect_stdout(sys.stderr):     # libraries' prints (DeepSpeed's op builder) stay off stdout
            result = {"benchmark": "learning", "cpus": os.cpu_count(),
                      **run_learning(cfg, args.cycles, seeds, args.out, args.plot, log=log,
                                     with_headroom=args.headroom)}
        print(json.dumps(result, default=str))
        return 0
    if args.bench_command == "specialize":
        from infra.bench.specialize import run as run_specialize

        with contextlib.redirect_stdout(sys.stderr):     # libraries' prints stay off stdout
            result = {"benchmark": "specialize", "cpus": os.cpu_count(),
                      **run_specialize(args.config, tuple(args.overrides), args.seed, args.out, log=log)}
        print(json.dumps(result, default=str))
        return 0
    if args.bench_command == "archive":
        from infra.bench.archive import run as run_archive

        result = {"benchmark": "archive", "cpus": os.cpu_count(),
                  **run_archive(args.events, args.batch, args.bootstrap, args.config, tuple(args.overrides), log=log)}
        print(json.dumps(result))
        return 0
    if args.bench_command in ("ranks", "gpu", "services", "live", "soak"):   # run(args, cfg, log) -> (result, ok)
        import importlib

        with contextlib.redirect_stdout(sys.stderr):     # DeepSpeed's and the launcher's prints stay off stdout
            result, ok = importlib.import_module(f"infra.bench.{args.bench_command}").run(args, cfg, log=log)
        print(json.dumps({"benchmark": args.bench_command, "cpus": os.cpu_count(), **result}, default=str))
        return 0 if ok else 1
    raise SystemExit(f"unknown benchmark {args.bench_command!r}")
