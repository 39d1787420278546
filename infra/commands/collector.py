"""`rtrl collector`: the HTTP ingest collector, and its API keys.

    rtrl collector --keys-new web --org acme [--role client|serving|admin]
                                     print a new key for client 'web', acting for org 'acme', once (only its hash
                                     is stored); `--org '*'` makes a gateway key that may write for any org
    rtrl collector --keys-list       the clients that have keys, with their org and role
    rtrl collector                   serve in the foreground (Ctrl-C stops it cleanly)
    rtrl collector --detach          serve in the background; `rtrl down` stops it
"""

from __future__ import annotations

import json
import sys
import time
from typing import TYPE_CHECKING

from infra.argv import rtrl_argv
from infra.commands import add_command

if TYPE_CHECKING:
    from infra.config import RtrlConfig


def _keys_path(cfg: RtrlConfig):
    return cfg.path_or_default(cfg.collector.api_keys_file, "collector_keys.json")


def _health(url: str, cert_file: str = "") -> dict | None:
    """The /healthz body (200 or 503), or None if nothing answers."""
    import urllib.error
    import urllib.request

    try:
        from serving.server import tls_client_context  # the same probe context as serving's own

        ctx = tls_client_context(cert_file) if url.startswith("https:") else None
        with urllib.request.urlopen(f"{url}/healthz", timeout=3, context=ctx) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        try:
            return json.loads(e.read())
        except ValueError:
            return None
    except (OSError, ValueError):
        return None


def _announce(url: str, kafka: bool | None) -> None:
    print(f"collector: {url}  (POST {url}/v1/events, GET {url}/healthz, GET {url}/openapi.json)")
    if kafka is False:
        print("collector: warning: Kafka is not reachable yet; ingest answers 503 until it is", file=sys.stderr)


def _detach(args, cfg: RtrlConfig, url: str) -> int:
    from infra.stack.process import ManagedProcess, StackError, port_is_free

    proc = ManagedProcess("collector", cfg.state_path)
    if proc.is_running():
        print(f"collector: already running (pid {proc.info()['pid']}); log: {proc.logfile}")
        _announce(url, None)
        return 0
    if not port_is_free(cfg.collector.host, cfg.collector.port):
        raise StackError(f"port {cfg.collector.port} on {cfg.collector.host} is taken; choose another with "
                         "--set collector.port=PORT")
    proc.start(rtrl_argv("collector", config=args.config, overrides=args.overrides), extra={"url": url})
    answer: dict = {}

    def answers() -> bool:
        body = _health(url, cfg.collector.tls_cert_file)
        if body is not None:
            answer.update(body)
        return body is not None

    proc.wait_healthy(answers, cfg.collector.startup_timeout_s, f"GET {url}/healthz")
    _announce(url, answer.get("kafka"))
    print(f"collector: running in the background (pid {proc.info()['pid']}); log: {proc.logfile}; "
          "stop with `rtrl down`")
    return 0


def _serve(cfg: RtrlConfig, url: str) -> int:
    import logging

    from infra.stack.process import StackError, port_is_free
    from instrumentation.collector.server import make_server

    if not port_is_free(cfg.collector.host, cfg.collector.port):
        raise StackError(f"port {cfg.collector.port} on {cfg.collector.host} is taken; choose another with "
                         "--set collector.port=PORT")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    server = make_server(cfg.collector, cfg.kafka, _keys_path(cfg))
    _announce(url, None)
    print(f"collector: Kafka at {cfg.kafka.bootstrap()}, keys in {_keys_path(cfg)}; Ctrl-C stops", flush=True)
    t0 = time.monotonic()
    try:
        server.run()  # returns (or re-raises Ctrl-C as KeyboardInterrupt: exit 130) after a graceful shutdown
    finally:
        print(f"collector: stopped after {time.monotonic() - t0:.0f}s", flush=True)
    return 0 if server.started else 1


def add_parser(subparsers) -> None:
    p = add_command(subparsers, "collector", main, "run the HTTP ingest collector (foreground)")
    p.add_argument("--keys-new", metavar="CLIENT", help="create an API key for CLIENT (needs --org), print it once, "
                   "and exit; replaces CLIENT's previous key")
    p.add_argument("--org", metavar="ORG", help="with --keys-new: the org (tenant) the key writes for; events with "
                   "another org_id are rejected. '*' = a gateway key for a trusted backend that writes for any org")
    p.add_argument("--role", choices=("client", "serving", "admin"), default="client",
                   help="with --keys-new: client (telemetry), serving (may also write trajectory events), admin "
                   "(the collector's admin endpoints) (default: client)")
    p.add_argument("--keys-list", action="store_true", help="list clients that have keys (org, role) and exit")
    p.add_argument("--detach", action="store_true", help="run in the background (stopped by `rtrl down`)")


def main(args, cfg: RtrlConfig) -> int:
    from schemas.api_keys import KeyStore, KeyStoreError
    from instrumentation.collector.server import url_of

    try:
        if args.keys_new:
            if not args.org:
                print("rtrl: --keys-new needs --org ORG: the org (tenant) whose events the key may write ('*' for a "
                      "gateway key that may write for any org)", file=sys.stderr)
                return 2
            store = KeyStore(_keys_path(cfg))
            existed = args.keys_new in store.clients()
            key = store.create(args.keys_new, org=args.org, role=args.role)
            print(key)
            print(f"collector: {'replaced the' if existed else 'new'} key for client {args.keys_new!r}, org "
                  f"{args.org!r}, role {args.role!r} (shown only once; its SHA-256 is stored in {store.path})",
                  file=sys.stderr)
            return 0
        if args.org or args.role != "client":
            print("rtrl: --org and --role go with --keys-new", file=sys.stderr)
            return 2
        if args.keys_list:
            store = KeyStore(_keys_path(cfg))
            for client in store.clients():
                k = store.get(client)
                org = k.org if k.org is not None else "-  (no org: re-issue with --keys-new --org)"
                print(f"{client}\t{k.role}\t{org}")
            return 0
        KeyStore(_keys_path(cfg))  # a malformed keys file fails here, with its path, not in the server
    except KeyStoreError as e:
        print(f"rtrl: {e}", file=sys.stderr)
        return 2
    url = url_of(cfg.collector)
    if args.detach:
        return _detach(args, cfg, url)
    return _serve(cfg, url)
