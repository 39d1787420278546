"""`rtrl simulate`: drive the serving endpoint with the simulated user population, like real clients.

N users (threads) call the OpenAI-compatible endpoint on the simulated clock and report what they do through the
telemetry SDK (straight to Kafka, or through the ingest collector). A progress line runs on stderr; a JSON summary
is printed at the end (requests, by outcome, by arm, edits, follow-ups, events emitted, failures, SDK counts).

Credentials for serving (`serving_policy`, which the chaos users share): the API key in $RTRL_SERVING_KEY when set;
else, when serving requires a key (serving.key_required: not bound to loopback, or require_key) and its keys file
lies under the state dir, a gateway key for client `rtrl-simulator` (org `*`: the simulated users belong to several
orgs; role client), kept in <state_dir>/simulator.key (0600) and made again only when the keys file no longer holds
it; else the placeholder, which serving reads as no key. When serving speaks TLS, its configured certificate is
trusted. Both apply to serving's own URL only: an --endpoint elsewhere gets $RTRL_SERVING_KEY or the placeholder and
the system's CAs.
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
SERVING_KEY_ENV = "RTRL_SERVING_KEY"
SIMULATOR_CLIENT = "rtrl-simulator"
SIMULATOR_KEY_FILE = "simulator.key"


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
    if not kafka_reachable(cfg.kafka, timeout_s=3.0, client_id="rtrl-simulate-probe"):
        raise ValueError(f"Kafka at {bootstrap} is not reachable (start the stack with `rtrl up`)")
    return KafkaTransport(cfg.kafka, timeout_s=cfg.sdk.send_timeout_s, client_id="rtrl-simulator"), \
        f"kafka {bootstrap}"


def serving_url(cfg) -> str:
    """serving's own OpenAI base URL (https:// when it speaks TLS)."""
    from serving.server import url_of

    return f"{url_of(cfg.serving)}/v1"


def _is_own(cfg, endpoint: str) -> bool:
    return not endpoint or endpoint.rstrip("/") == serving_url(cfg)


def local_simulator_key(cfg, keys_file: Path) -> tuple[str, bool]:
    """(the key of client SIMULATOR_CLIENT in `keys_file`, whether it was made now): the one kept in
    <state_dir>/simulator.key while the keys file still holds it as a gateway key, else a new one (KeyStore.create,
    org "*", role client) written there. A lock keeps two simulators from replacing each other's key."""
    import fcntl
    import secrets

    from schemas.api_keys import ANY_ORG, KeyStore

    key_file = cfg.state_path / SIMULATOR_KEY_FILE
    key_file.parent.mkdir(parents=True, exist_ok=True)
    lock = os.open(key_file.with_name(key_file.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        keys = KeyStore(keys_file)
        try:
            held = key_file.read_text().strip()
        except FileNotFoundError:
            held = ""
        found = keys.get(SIMULATOR_CLIENT) if held and keys.client_for_key(held) == SIMULATOR_CLIENT else None
        if found is not None and found.org == ANY_ORG:
            return held, False
        key = keys.create(SIMULATOR_CLIENT, org=ANY_ORG, role="client")
        tmp = key_file.with_name(f".{key_file.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(key + "\n")
        os.replace(tmp, key_file)
        return key, True
    finally:
        os.close(lock)


def serving_key(cfg, endpoint: str = "") -> tuple[str | None, str]:
    """(the API key to send to serving or None for the placeholder, where it came from); see the module
    docstring. Raises ValueError when serving requires a key and none can be had."""
    from serving.server import keys_path

    env = os.environ.get(SERVING_KEY_ENV, "").strip()
    if env:
        return env, f"${SERVING_KEY_ENV}"
    if not _is_own(cfg, endpoint) or not cfg.serving.key_required:
        return None, "none"
    path = keys_path(cfg)
    if not path.is_relative_to(cfg.state_path):
        raise ValueError(f"serving requires an API key and its keys file {path} lies outside the state dir (a "
                         f"deployment's own): set ${SERVING_KEY_ENV} to a key of it (e.g. `rtrl collector --keys-new "
                         f"{SIMULATOR_CLIENT} --org '*'`)")
    key, made = local_simulator_key(cfg, path)
    if made:   # serving re-reads a changed keys file at most once a second
        from schemas.api_keys import RELOAD_CHECK_S

        time.sleep(RELOAD_CHECK_S + 0.2)
    return key, f"client {SIMULATOR_CLIENT} of {path}"


def serving_policy(cfg, endpoint: str = "", model: str = "", timeout_s: float = 120.0):
    """(an OpenAIPolicy for `endpoint`, '' = serving's own URL, with serving's credentials; the URL; where the key
    came from). Raises ValueError as `serving_key`."""
    from codetasks.policy import OpenAIPolicy
    from serving.server import tls_client_context

    url = endpoint or serving_url(cfg)
    key, source = serving_key(cfg, url)
    verify = tls_client_context(cfg.serving.tls_cert_file) if cfg.serving.tls and _is_own(cfg, url) else None
    return OpenAIPolicy(url, model, api_key=key, timeout_s=timeout_s, verify=verify), url, source


def add_parser(subparsers) -> None:
    p = add_command(subparsers, "simulate", main,
                    "drive the serving endpoint with simulated users (telemetry through the SDK, simulated clock)",
                    epilog="example: rtrl simulate --users 16 --duration 30   (30 wall seconds at the default 600x = "
                           "5 simulated hours). Needs the stack (`rtrl up`) and serving running. Defaults: "
                           "[simulator] in rtrl.toml. Serving's API key: $RTRL_SERVING_KEY when set; else, where "
                           "serving requires a key (not on loopback) and its keys file is under the state dir, a "
                           "key for client rtrl-simulator is made (kept in <state_dir>/simulator.key); else none "
                           "(loopback). Serving's own certificate is trusted when it speaks TLS.")
    dur = p.add_mutually_exclusive_group(required=True)
    dur.add_argument("--duration", type=float, metavar="WALL_SECONDS",
                     help="how long to run, in WALL-CLOCK seconds (simulated span = this x --speed)")
    dur.add_argument("--sim-hours", type=float, metavar="HOURS",
                     help="how long to run, in SIMULATED hours (wall time = this x 3600 / --speed)")
    p.add_argument("--users", type=int, metavar="N", help="simulated users (default simulator.users)")
    p.add_argument("--speed", type=float, metavar="X",
                   help="simulated seconds per wall second (default simulator.speed, 600)")
    p.add_argument("--endpoint", metavar="URL", help="OpenAI-compatible base URL (default serving's: "
                   "http[s]://{serving.host}:{serving.port}/v1)")
    p.add_argument("--model", help="model name to send (default: the first one the endpoint lists)")
    p.add_argument("--seed", type=int, metavar="S", help="population seed (default simulator.seed)")


def main(args, cfg) -> int:
    from pydantic import ValidationError

    from infra.commands import option_errors
    from infra.progress import ProgressLine
    from instrumentation.sdk import TelemetryClient
    from instrumentation.simulator.clock import ScaledClock
    from codetasks.policy import PolicyError
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
    try:
        policy, endpoint, key_from = serving_policy(cfg, sim.endpoint, sim.model, sim.request_timeout_s)
    except ValueError as e:
        return _fail(str(e))
    try:
        model = policy.check()
    except PolicyError as e:
        hint = (f"the endpoint refused the API key (from {key_from}): set ${SERVING_KEY_ENV} to a valid key"
                if e.status in (401, 403) else "start serving first (`rtrl serve --detach`), or point --endpoint at "
                "an OpenAI-compatible /v1 base URL")
        return _fail(f"{e}\n  {hint}")
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
    auth = f", API key from {key_from}" if key_from != "none" else ""
    print(f"simulate: {sim.users} users (seed {sim.seed}) -> {endpoint} (model {model}{auth}); telemetry -> {where}; "
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
