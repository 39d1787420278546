"""`rtrl serve [--detach]`: the OpenAI-compatible gateway with its A/B arms (vLLM engines, hot swaps).

    rtrl serve             serve in the foreground (Ctrl-C stops it: in-flight requests finish, engines shut down)
    rtrl serve --detach    serve in the background; `rtrl down` stops it

Before anything heavy starts, the arms' registry aliases must be set (`rtrl bootstrap` registers the default
policy and points them at it) and the port must be free.

At start, `rtrl serve` makes the admin key of local tools (<state_dir>/admin.key, mode 0600) when it is absent,
RTRL_ADMIN_KEY is unset and the keys file lies under the state dir: the gate's POST /admin/stage sends it
(serving.auth). With serving.tls_cert_file/tls_key_file set it serves HTTPS, and `--detach` probes /health
trusting exactly that certificate.
"""

from __future__ import annotations

import sys
import time

from infra.argv import rtrl_argv
from infra.commands import add_command

NAME = "serving"


def _url(cfg) -> str:
    from serving.server import url_of

    return url_of(cfg.serving)


def _health(cfg) -> dict | None:
    """The /health body when it answers 200 (every arm's engine loaded), else None; over HTTPS when configured."""
    from serving.server import health

    answer = health(cfg.serving)
    return answer[1] if answer is not None and answer[0] == 200 else None


def check_ready_to_serve(cfg) -> dict[str, str]:
    """Every arm's alias resolves to a version and the port is free; StackError says what to do otherwise."""
    from infra.stack.process import StackError, port_is_free
    from registry.client import Registry

    if not port_is_free(cfg.serving.host, cfg.serving.port):
        raise StackError(f"port {cfg.serving.port} on {cfg.serving.host} is taken; choose another with "
                         "--set serving.port=PORT (or `rtrl down` if it is an earlier `rtrl serve --detach`)")
    registry = Registry.from_config(cfg)
    versions, missing = {}, []
    for arm in cfg.serving.arms:
        version = registry.version_of(arm.alias)
        if version is None:
            missing.append(f"{arm.alias!r} (arm {arm.name})")
        else:
            versions[arm.name] = version
    if missing:
        raise StackError(f"registry alias {', '.join(missing)} of model {cfg.mlflow.registered_model!r} is not set "
                         f"in {cfg.mlflow_tracking_uri()}: run `rtrl bootstrap` to make and register the default "
                         "policy (or point the alias at a version)")
    return versions


def _warn_if_no_kafka(cfg) -> None:
    if not cfg.serving.telemetry:
        return
    from instrumentation.transport import kafka_reachable

    if not kafka_reachable(cfg.kafka, timeout_s=2.0):
        print(f"serving: warning: Kafka at {cfg.kafka.bootstrap()} is not reachable (`rtrl up`?): trajectory "
              f"events are spooled on disk until it answers", file=sys.stderr, flush=True)


def _arms_line(url: str, versions: dict[str, str]) -> str:
    arms = ", ".join(f"{arm} → v{v}" for arm, v in versions.items())
    return f"serving: {url}  (POST {url}/v1/chat/completions, GET {url}/v1/models, GET {url}/health); arms: {arms}"


def _detach(args, cfg) -> int:
    start_detached(cfg, args.config, args.overrides)
    return 0


def start_detached(cfg, config: str | None, overrides: list[str], say=lambda m: print(m, flush=True)) -> None:
    """`rtrl serve` in the background with this config file and these overrides, once its /health answers (every
    arm's engine loaded); nothing when it runs already. `rtrl serve --detach` and `rtrl demo` (in its own process,
    not through a new interpreter) start serving this way. StackError when it cannot start."""
    from infra.stack.process import LEADER_STOPS_GROUP, ManagedProcess

    proc = ManagedProcess(NAME, cfg.state_path)
    url = _url(cfg)
    if (rec := proc.info()) is not None:
        say(f"serving: already running (pid {rec['pid']}); log: {proc.logfile}")
        return
    versions = check_ready_to_serve(cfg)
    _warn_if_no_kafka(cfg)
    argv = rtrl_argv("serve", config=config, overrides=overrides)
    # SIGTERM to the gateway only: it lets the requests in flight finish, then shuts every engine down at once. To
    # the whole group, the engines' processes would die under those requests (~20 s of vLLM's dead-engine waits)
    proc.start(argv, extra={"url": url, LEADER_STOPS_GROUP: True})
    say(f"serving: loading {len(set(versions.values()))} engine(s); waiting up to "
        f"{cfg.serving.startup_timeout_s:.0f}s for {url}/health")
    proc.wait_healthy(lambda: _health(cfg) is not None, cfg.serving.startup_timeout_s, f"GET {url}/health")
    say(_arms_line(url, versions))
    say(f"serving: running in the background (pid {proc.info()['pid']}); log: {proc.logfile}; stop with `rtrl down`")


def _serve(cfg) -> int:
    import logging

    from infra.stack.process import hold_port
    from serving.server import ensure_local_admin_key, make_server

    versions = check_ready_to_serve(cfg)
    # the port is held from here: the engines load for a minute before the gateway listens, and a port picked
    # as free must not go to another process meanwhile
    sock = hold_port(cfg.serving.host, cfg.serving.port)
    _warn_if_no_kafka(cfg)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    ensure_local_admin_key(cfg)
    # kafka-python logs every failed reconnect as an error; the SDK already says when it starts spooling and when
    # the broker is back.
    logging.getLogger("kafka").setLevel(logging.CRITICAL)
    server = make_server(cfg)
    url = _url(cfg)
    print(f"serving: loading engines for {', '.join(f'{a} → v{v}' for a, v in versions.items())} "
          f"(~25 s each on CPU), then serving on {url}; Ctrl-C stops", flush=True)
    t0 = time.monotonic()
    try:
        server.run(sockets=[sock])  # lifespan: engines load, then it listens; SIGINT/SIGTERM: graceful stop
    finally:
        print(f"serving: stopped after {time.monotonic() - t0:.0f}s", flush=True)
    if not server.started:
        print(f"rtrl serve: the gateway did not start (see the log above); {url} was never served", file=sys.stderr)
        return 1
    return 0


def add_parser(subparsers) -> None:
    p = add_command(subparsers, "serve", main,
                    "serve the policy: OpenAI-compatible gateway, A/B arms on registry aliases, vLLM engines, hot swap",
                    epilog="Endpoints: POST /v1/chat/completions and GET /v1/models (an API key, required unless serving "
                           "binds to loopback), GET /health (open), POST /admin/stage|unstage (a key with role admin; "
                           "local tools use <state_dir>/admin.key, made at start). The arms' aliases must be set first "
                           "(`rtrl bootstrap`). Settings: [serving] in rtrl.toml.")
    p.add_argument("--detach", action="store_true", help="run in the background (stopped by `rtrl down`)")


def main(args, cfg) -> int:
    if args.detach:
        return _detach(args, cfg)
    return _serve(cfg)
