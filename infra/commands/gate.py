"""`rtrl gate`, `rtrl eval run`, `rtrl eval suite`: the evaluation gate and the harness from the command line.

Exit codes of `rtrl gate`: 0 the candidate may be promoted; 3 the champion stays (the reasons are in the JSON
line and the report); 2 bad arguments (unknown version, no champion, a bad suite folder); 1 the run broke.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from infra.commands import add_command

EXIT_PROMOTE, EXIT_ERROR, EXIT_USAGE, EXIT_KEEP = 0, 1, 2, 3


def _quiet_vllm() -> None:
    """vLLM's per-engine INFO chatter would bury the gate's progress lines (set before vLLM is imported)."""
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")   # stdout is the JSON summary's alone


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def add_parser(subparsers) -> None:
    gt = add_command(subparsers, "gate", gate, "evaluate CANDIDATE against the champion and the anchor on every "
                     "suite of gate.suites (held-out tasks, held-out simulated users): paired non-inferiority and "
                     "guardrails",
                     epilog="The suites run in the order of gate.suites; one that keeps the champion ends the gate. "
                            "Tasks suite: the versions are served privately (vLLM, no telemetry), or with "
                            "--via-serving staged on the running `rtrl serve` (no telemetry either), and run the same "
                            "tasks with the same seeds, K samples each; tasks failing the flaky check are "
                            "quarantined; writes report.{json,md,html} and episodes.jsonl and logs an MLflow run. "
                            "Users suite: each version serves the same held-out simulated users in this process. "
                            "The decision is tagged on the candidate (gate.*, read by `rtrl promote`). Prints one "
                            "JSON line. Exit 0: may be promoted; 3: the champion stays; 2: bad arguments; 1: the run "
                            "broke. Defaults: [gate], [gate.tasks], [gate.users] in rtrl.toml.")
    gt.add_argument("candidate", metavar="CANDIDATE", help="registered model version to evaluate, e.g. 3; an org's "
                    "specialized version as VERSION@ORG, gated on the held-out suite and on ORG's own suite against "
                    "what ORG is served now (champion@ORG, else champion)")
    gt.add_argument("--champion", metavar="VERSION", help="version to compare with (default: alias champion)")
    gt.add_argument("--suite", metavar="DIR", help="task folders (default: gate.tasks.suite_dir, else the generated "
                    "held-out suite of gate.tasks.suite_tasks tasks)")
    gt.add_argument("--tasks", type=int, metavar="N", help="only the first N tasks of the suite")
    gt.add_argument("--samples", type=int, metavar="K",
                    help="samples per task and arm (default gate.tasks.samples_per_task)")
    gt.add_argument("--workers", type=int, metavar="W", help="episodes in flight per arm (default gate.tasks.workers)")
    gt.add_argument("--out", metavar="DIR", help="report folder (default STATE/gate/vC-vs-vP-TIME)")
    gt.add_argument("--no-mlflow", action="store_true", help="do not log the run or tag the candidate")
    gt.add_argument("--via-serving", action="store_true", help="stage both versions on the running `rtrl serve` "
                    "and run the arms at once there (gate.tasks.via_serving); a promoted candidate stays staged, so "
                    "serving switches to it without loading it again")
    gt.add_argument("--promote", action="store_true", help="on a pass, promote the candidate right away "
                    "(compare-and-swap against the champion it was compared with)")

    ev = add_command(subparsers, "eval", eval_run, "the eval harness alone: make a task suite, or run one")
    actions = ev.add_subparsers(dest="eval_command", metavar="ACTION", required=True)
    evs = actions.add_parser("suite", help="generate a held-out task suite (task folders) into DIR")
    evs.set_defaults(handler=eval_suite)
    evs.add_argument("--out", required=True, metavar="DIR")
    evs.add_argument("--tasks", type=int, default=60, metavar="N", help="how many tasks (default 60)")
    evs.add_argument("--seed", type=int, default=7, help="suite seed (default 7)")
    evs.add_argument("--ambiguous-rate", type=float, default=0.25, help="share of ambiguous requests (default 0.25)")
    evr = actions.add_parser("run", help="run a suite on one endpoint and write its episodes (JSON lines)")
    evr.set_defaults(handler=eval_run)
    target = evr.add_mutually_exclusive_group(required=True)
    target.add_argument("--endpoint", metavar="URL", help="any OpenAI-compatible base URL, e.g. http://host:8000/v1")
    target.add_argument("--version", metavar="VERSION", help="a registered version, served privately for the run")
    evr.add_argument("--model", help="model name to send to --endpoint (default: the first one it lists)")
    evr.add_argument("--arm", default="candidate", help="label of the episodes (default candidate)")
    evr.add_argument("--suite", metavar="DIR", help="task folders (default as for rtrl gate)")
    evr.add_argument("--tasks", type=int, metavar="N", help="only the first N tasks")
    evr.add_argument("--samples", type=int, metavar="K", help="samples per task (default gate.tasks.samples_per_task)")
    evr.add_argument("--workers", type=int, metavar="W", help="episodes in flight (default gate.tasks.workers)")
    evr.add_argument("--out", required=True, metavar="FILE", help="episodes as JSON lines")


def gate_version(cfg, candidate: str, champion: str | None = None, *, log=_log, **options) -> dict:
    """Gate `candidate` (an org's `VERSION@ORG` too) against `champion` (default: what the candidate's lineage is
    served now) on every suite of gate.suites (infra.gate_suites) and tag the decision on it: the gate's summary,
    with `decision`. `options` go to the tasks suite (suite, max_tasks, samples, workers, out_dir, track).
    LookupError for an unknown version or no champion, ValueError (TaskError) for a bad suite; EndpointError when a
    run broke. The cycle's evaluate and specialize steps call this."""
    from infra.gate_suites import run_suites

    _quiet_vllm()
    if "@" in candidate and (options.get("suite") or options.get("out_dir")):
        raise ValueError("an org's version runs the held-out suite and its org's own: no suite or out_dir")
    return run_suites(cfg, candidate, champion, log=log, **options).summary()


def gate(args, cfg) -> int:
    from evals.endpoints import EndpointError

    if args.via_serving:
        cfg = cfg.model_copy(update={"gate": cfg.gate.model_copy(update={
            "tasks": cfg.gate.tasks.model_copy(update={"via_serving": True})})})
    options = {"max_tasks": args.tasks, "samples": args.samples, "workers": args.workers, "track": not args.no_mlflow}
    if args.suite:
        options["suite"] = args.suite
    if args.out:
        options["out_dir"] = args.out
    try:
        summary = gate_version(cfg, args.candidate, args.champion, **options)
    except (LookupError, ValueError) as e:     # TaskError (a bad suite folder) is a ValueError
        print(f"rtrl gate: {e}", file=sys.stderr)
        return EXIT_USAGE
    except EndpointError as e:
        print(f"rtrl gate: {e}", file=sys.stderr)
        return EXIT_ERROR
    out = {"gate": summary}
    may = summary["decision"] == "promote"
    if args.promote and may:
        from registry.client import parse_label
        from registry.promotion import PromotionRefused, lock_path_for, promote

        version, org = parse_label(summary["candidate_version"])
        registry = run_registry(cfg) if org is None else run_registry(cfg).for_org(org)
        try:
            res = promote(registry, version, lock_path_for(cfg.mlflow_tracking_uri(), cfg.state_path))
            out["promote"] = {"ok": True, "champion": res.champion}
        except PromotionRefused as e:
            out["promote"] = {"ok": False, "refused": str(e)}
    print(json.dumps(out))
    return EXIT_PROMOTE if may else EXIT_KEEP


def run_registry(cfg):
    from registry.client import Registry

    return Registry.from_config(cfg)


def eval_suite(args, cfg) -> int:
    from evals.tasks.generate import generate_suite

    tasks = generate_suite(Path(args.out), args.tasks, seed=args.seed, ambiguous_rate=args.ambiguous_rate)
    print(json.dumps({"suite": str(Path(args.out).resolve()), "tasks": len(tasks)}))
    return 0


def eval_run(args, cfg) -> int:
    """One arm on one endpoint (any OpenAI-compatible URL, or a registered version served privately)."""
    _quiet_vllm()
    from evals.gate_run import Progress, suite_of
    from evals.harness import run_suite
    from evals.tasks.spec import TaskError
    from codetasks.policy import OpenAIPolicy, PolicyError

    try:
        suite_dir, tasks = suite_of(cfg, args.suite, _log)
    except TaskError as e:
        print(f"rtrl eval run: {e}", file=sys.stderr)
        return EXIT_USAGE
    tasks = tasks[: args.tasks] if args.tasks else tasks
    samples, workers = args.samples or cfg.gate.tasks.samples_per_task, args.workers or cfg.gate.tasks.workers

    def go(url: str) -> list:
        endpoint = OpenAIPolicy(url, model=args.model or "", timeout_s=300.0, max_retries=0)
        endpoint.check()
        return run_suite(tasks, endpoint, arm=args.arm, samples=samples, seed=cfg.gate.tasks.seed, workers=workers,
                         suite_dirs=[suite_dir], progress=Progress(args.arm, _log))

    try:
        if args.endpoint:
            episodes = go(args.endpoint)
        else:
            from evals.endpoints import serve_version

            with serve_version(cfg, run_registry(cfg), args.version, arm=args.arm) as url:
                episodes = go(url)
    except PolicyError as e:
        print(f"rtrl eval run: {e}", file=sys.stderr)
        return EXIT_ERROR
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", encoding="utf-8") as f:
        for e in episodes:
            f.write(json.dumps(e.to_dict(), default=str) + "\n")
    valid = [e for e in episodes if e.infra_error is None]
    print(json.dumps({"episodes": len(episodes), "infra_failures": len(episodes) - len(valid),
                      "resolved_rate": sum(e.resolved for e in valid) / len(valid) if valid else None,
                      "out": str(out.resolve())}))
    return 0
