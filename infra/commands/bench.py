"""`rtrl bench WHAT --json`: benchmarks print one JSON object on stdout (progress goes to stderr)."""

from __future__ import annotations

import json
import os
import sys


def main(args, cfg) -> int:
    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    # vLLM logs to stdout by default (its engine processes inherit this): stdout is the JSON object's alone
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")

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
                  **run_rewards(args.requests, kafka=not args.no_kafka, log=log)}
        print(json.dumps(result))
        ok = result["reference_rows_match"] and result["replay_rows_match_reference"] and result.get("offset_range_rows_match_reference", True)
        return 0 if ok else 1
    if args.bench_command == "serving":
        from infra.bench.serving import run as run_serving

        result = {"benchmark": "serving", "cpus": os.cpu_count(),
                  **run_serving(args.batch, args.prompt_tokens, args.new_tokens, args.clients, log=log,
                              gateway=not args.throughput_only, shape=args.shape)}
        print(json.dumps(result))
        ok = args.throughput_only or (result["failed_requests_during_swap"] == 0 and result["old_engine_shut_down"])
        return 0 if ok else 1
    if args.bench_command == "trainer":
        from infra.bench.trainer import run as run_trainer

        result = {"benchmark": "trainer", "cpus": os.cpu_count(),
                  **run_trainer(args.rows, args.micro_batch, args.rows_per_step, log=log)}
        print(json.dumps(result))
        return 0
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
        return 0 if result["infra_failure_rate"] < cfg.gate.max_infra_failure_rate else 1
    if args.bench_command == "ab":
        from infra.bench.ab import run as run_ab

        result = {"benchmark": "ab", "cpus": os.cpu_count(), **run_ab(args.rows, args.users, log=log)}
        print(json.dumps(result))
        return 0
    raise SystemExit(f"unknown benchmark {args.bench_command!r}")
