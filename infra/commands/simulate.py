"""`rtrl simulate`: drive the serving endpoint with the simulated user population, like real clients.

N users (threads) call the OpenAI-compatible endpoint on the simulated clock and report what they do through the
telemetry SDK (straight to Kafka, or through the ingest collector). A progress line runs on stderr; a JSON summary
is printed at the end (requests, by outcome, by arm, edits, follow-ups, events emitted, failures, SDK counts).
"""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import timedelta
from pathlib import Path

from infra.commands import add_command

API_KEY_ENV = "RTRL_COLLECTOR_API_KEY"


def _fail(message: str) -> int:
    print(f"rtrl simulate: {message}", file=sys.stderr)
    return 1


def _transport(cfg):
    sim = cfg.simulator
    if sim.telemetry == "collector":
        from instrumentation.collector_client import CollectorTransport

        key = os.environ.get(API_KEY_ENV, "")
        if not key:
            raise ValueError(f"simulator.telemetry = 'collector' needs an API key in ${API_KEY_ENV} "
                             "(make one with `rtrl collector --keys-new simulator --org '*'`: the simulated users "
                             "belong to several orgs)")
        return CollectorTransport(f"http://{cfg.collector.host}:{cfg.collector.port}", key,
                                  timeout_s=cfg.sdk.send_timeout_s), f"collector http://{cfg.collector.host}:" \
                                                                     f"{cfg.collector.port}"
    from instrumentation.transport import KafkaTransport, kafka_reachable

    bootstrap = cfg.kafka.bootstrap()
    if not kafka_reachable(bootstrap, timeout_s=3.0, client_id="rtrl-simulate-probe"):
        raise ValueError(f"Kafka at {bootstrap} is not reachable (start the stack with `rtrl up`)")
    return KafkaTransport(bootstrap, timeout_s=cfg.sdk.send_timeout_s, client_id="rtrl-simulator"), \
        f"kafka {bootstrap}"


def add_parser(subparsers) -> None:
    p = add_command(subparsers, "simulate", main,
                    "drive the serving endpoint with simulated users (telemetry through the SDK, simulated clock)",
                    epilog="example: rtrl simulate --users 16 --duration 30   (30 wall seconds at the default 600x = "
                           "5 simulated hours). Needs the stack (`rtrl up`) and serving running. Defaults: "
                           "[simulator] in rtrl.toml.")
    dur = p.add_mutually_exclusive_group(required=True)
    dur.add_argument("--duration", type=float, metavar="WALL_SECONDS",
                     help="how long to run, in WALL-CLOCK seconds (simulated span = this x --speed)")
    dur.add_argument("--sim-hours", type=float, metavar="HOURS",
                     help="how long to run, in SIMULATED hours (wall time = this x 3600 / --speed)")
    p.add_argument("--users", type=int, metavar="N", help="simulated users (default simulator.users)")
    p.add_argument("--speed", type=float, metavar="X",
                   help="simulated seconds per wall second (default simulator.speed, 600)")
    p.add_argument("--endpoint", metavar="URL", help="OpenAI-compatible base URL (default "
                   "http://{serving.host}:{serving.port}/v1)")
    p.add_argument("--model", help="model name to send (default: the first one the endpoint lists)")
    p.add_argument("--seed", type=int, metavar="S", help="population seed (default simulator.seed)")


def main(args, cfg) -> int:
    from pydantic import ValidationError

    from infra.commands import option_errors
    from infra.progress import ProgressLine
    from instrumentation.sdk import TelemetryClient
    from instrumentation.simulator.clock import ScaledClock
    from codetasks.policy import OpenAIPolicy, PolicyError
    from instrumentation.simulator.population import Population, start_instant

    update = {k: v for k, v in (("users", args.users), ("seed", args.seed), ("speed", args.speed),
                                ("endpoint", args.endpoint), ("model", args.model)) if v is not None}
    try:
        sim = type(cfg.simulator).model_validate({**cfg.simulator.model_dump(), **update})
    except ValidationError as e:
        return _fail(option_errors(e))
    cfg = cfg.model_copy(update={"simulator": sim})
    wall_s = args.duration if args.sim_hours is None else args.sim_hours * 3600 / sim.speed
    if wall_s <= 0:
        return _fail("the duration must be positive")
    if sim.snapshot_delay_s != cfg.rewards.horizon_s:
        print(f"rtrl simulate: warning: simulator.snapshot_delay_s ({sim.snapshot_delay_s:g}) differs from "
              f"rewards.horizon_s ({cfg.rewards.horizon_s:g}): persistence labels will not see the users' "
              "decisions as meant", file=sys.stderr)
    endpoint = sim.endpoint or f"http://{cfg.serving.host}:{cfg.serving.port}/v1"

    policy = OpenAIPolicy(endpoint, sim.model, timeout_s=sim.request_timeout_s)
    try:
        model = policy.check()
    except PolicyError as e:
        return _fail(f"{e}\n  start serving first (`rtrl serve --detach`), or point --endpoint at an OpenAI-compatible "
                     "/v1 base URL")
    try:
        transport, where = _transport(cfg)
    except ValueError as e:
        return _fail(str(e))
    spool = Path(cfg.sdk.spool_dir).expanduser() if cfg.sdk.spool_dir else cfg.state_path / "spool" / "simulator"
    client = TelemetryClient(transport, cfg.sdk, spool, name="simulator")

    start = start_instant(sim, wall_s)
    clock = ScaledClock(start, sim.speed)
    population = Population(sim, policy, client, clock, keep_ledger=False)
    deadline = start + timedelta(seconds=wall_s * sim.speed)
    print(f"simulate: {sim.users} users (seed {sim.seed}) -> {endpoint} (model {model}); telemetry -> {where}; "
          f"{wall_s:g} s wall at {sim.speed:g}x = {wall_s * sim.speed / 3600:.2f} simulated hours from "
          f"{start.isoformat()} (then the last reactions drain)", file=sys.stderr)
    t0 = time.monotonic()
    interrupted = False
    try:
        with ProgressLine(population.progress):
            population.run(deadline)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        client.close(timeout=max(30.0, cfg.sdk.send_timeout_s * 3))
    summary = population.summary()
    summary.update(endpoint=endpoint, model=model, speed=sim.speed, wall_s=round(time.monotonic() - t0, 2),
                   interrupted=interrupted, telemetry={"to": where, **client.stats()})
    print(json.dumps({"simulate": summary}, indent=2, default=str))
    if interrupted:
        return 130
    if summary["requests"] and summary["by_outcome"].get("error", 0) == summary["requests"]:
        return _fail(f"every request failed (last error: {summary['failures'].get('last_error', '?')})")
    return 0
