"""Run the gateway: one uvicorn process; the vLLM engines live in it (plus the processes vLLM spawns).

    server = make_server(cfg)     # cfg: infra.config.RtrlConfig
    server.run()                  # blocks; SIGINT/SIGTERM stop it (in-flight requests finish, engines shut down)

The program calling this must guard its entry point with `if __name__ == "__main__":` (vLLM spawns processes).

Keys: `keys_path(cfg)` (serving.api_keys_file, '' = the collector's keys file: one file holds a deployment's keys);
who may do what is serving.auth's. TLS: with serving.tls_cert_file and tls_key_file set, uvicorn terminates TLS
itself (HTTPS only on that port), `url_of` says https://, and `health` trusts exactly that certificate.
Admin credentials of local tools: `admin_key(cfg)` (RTRL_ADMIN_KEY, else <state_dir>/admin.key, which
`ensure_local_admin_key` makes when `rtrl serve` starts; see serving.auth).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from schemas.api_keys import KeyStore
from serving.app import Gateway, create_app
from serving.arms import Fleet
from serving.auth import ADMIN_KEY_ENV, ADMIN_KEY_FILE, ensure_admin_key, read_admin_key

log = logging.getLogger("rtrl.serving")


def spool_dir(cfg) -> Path:
    base = Path(cfg.sdk.spool_dir).expanduser() if cfg.sdk.spool_dir else cfg.state_path / "spool"
    return base / "serving"


def build_gateway(cfg, *, registry=None, loader=None) -> Gateway:
    """The production gateway: registry aliases from `cfg`, vLLM engines, trajectories to Kafka via the SDK."""
    from registry.client import Registry

    registry = registry or Registry.from_config(cfg)
    device = "cpu"
    if loader is None:
        from serving.engine import VllmEngine, platform_device
        from serving.lora import with_adapters

        device = platform_device()

        def start(version, folder, lora: bool = False, cpu_cores: str = "", devices: str = "",
                  gpu_memory_utilization: float | None = None):
            update = {k: v for k, v in (("cpu_cores", cpu_cores), ("gpu_memory_utilization", gpu_memory_utilization))
                      if v}
            scfg = cfg.serving.model_copy(update=update) if update else cfg.serving
            return VllmEngine.load(version, folder, scfg, devices=devices, lora=lora)

        # adapter versions: serving/lora.py; with a specialized arm, the shared champion and the orgs' adapters over it
        # are served by one engine
        share = cfg.serving.enable_lora or any(a.per_org for a in cfg.serving.arms)
        loader = with_adapters(start, registry, cfg.serving.max_lora_rank, share_base=share)

    emit = on_close = stats = None
    if cfg.serving.telemetry:
        from instrumentation import KafkaTransport, TelemetryClient

        # write-ahead: a trajectory is on disk before its request is answered, so a kill of serving loses none
        sdk = cfg.sdk.model_copy(update={"write_ahead": True}) if cfg.serving.telemetry_write_ahead else cfg.sdk
        client = TelemetryClient(KafkaTransport(cfg.kafka, timeout_s=cfg.sdk.send_timeout_s,
                                                client_id="rtrl-serving"), sdk, spool_dir(cfg), name="serving")
        emit, stats = client.emit, client.stats

        def on_close() -> None:  # what Kafka has not acknowledged within 5 s stays on disk for the next start
            client.close(timeout=5.0)
    return Gateway(cfg.serving, Fleet(cfg.serving, registry, loader, device=device), cfg.mlflow.registered_model,
                   emit=emit,
                   on_close=on_close, telemetry_stats=stats)


def make_server(cfg, *, gateway: Gateway | None = None, log_level: str = "info"):
    """A `uvicorn.Server` (not started) for `cfg.serving.host:port`."""
    import uvicorn

    from instrumentation.proxies import proxy_settings

    scfg = cfg.serving
    keys = KeyStore(keys_path(cfg))
    if scfg.key_required and not len(keys):
        log.warning("serving needs an API key on %s but %s holds none: every request will get 401; make one with "
                    "`rtrl collector --keys-new CLIENT --org ORG`", scfg.host, keys.path)
    app = create_app(gateway or build_gateway(cfg), keys=keys)
    tls = {"ssl_certfile": scfg.tls_cert_file, "ssl_keyfile": scfg.tls_key_file} if scfg.tls else {}
    config = uvicorn.Config(app, host=scfg.host, port=scfg.port, loop="auto", http="auto",
                            lifespan="on", access_log=scfg.access_log, log_level=log_level,
                            server_header=False, timeout_graceful_shutdown=scfg.shutdown_grace_s,
                            **proxy_settings(scfg.trusted_proxies), **tls)
    return uvicorn.Server(config)


def url_of(scfg) -> str:
    host = scfg.host
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    elif ":" in host:
        host = f"[{host}]"
    return f"{'https' if scfg.tls else 'http'}://{host}:{scfg.port}"


def keys_path(cfg) -> Path:
    """serving's keys file: serving.api_keys_file, '' = the collector's (the same file: a key works at both)."""
    return cfg.path_or_default(cfg.serving.api_keys_file or cfg.collector.api_keys_file, "collector_keys.json")


def admin_key_file(cfg) -> Path:
    return cfg.state_path / ADMIN_KEY_FILE


def admin_key(cfg) -> str | None:
    """The admin key local tools send to /admin/*: RTRL_ADMIN_KEY, else <state_dir>/admin.key, else None."""
    return read_admin_key(admin_key_file(cfg))


def ensure_local_admin_key(cfg) -> bool:
    """At `rtrl serve`'s start: make <state_dir>/admin.key (and its key, client rtrl-local-admin, org *, role admin)
    unless RTRL_ADMIN_KEY is set, the file already holds an admin key, or the keys file lies outside the state dir
    (a deployment's own, whose operator makes admin keys). True when a key was made."""
    path = keys_path(cfg)
    if os.environ.get(ADMIN_KEY_ENV, "").strip() or not path.is_relative_to(cfg.state_path):
        return False
    made = ensure_admin_key(KeyStore(path), admin_key_file(cfg))
    if made:
        log.info("made the local admin key (client rtrl-local-admin) in %s; tools read it from %s", path,
                 admin_key_file(cfg))
    return made


def tls_client_context(cert_file: str):
    """For probing our own HTTPS listener: trust exactly the configured certificate (self-signed or a leaf of a
    private CA); the host name is not checked since the probe dials the bind address, not the certificate's name."""
    import ssl

    ctx = ssl.create_default_context(cafile=cert_file)
    ctx.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
    ctx.check_hostname = False
    return ctx


def health(scfg, timeout_s: float = 3.0) -> tuple[int, dict] | None:
    """(status, body) of serving's GET /health (200 ready, 503 loading), over HTTPS when configured; None when
    nothing answers or the answer is not JSON."""
    import urllib.error
    import urllib.request

    try:
        ctx = tls_client_context(scfg.tls_cert_file) if scfg.tls else None
        with urllib.request.urlopen(f"{url_of(scfg)}/health", timeout=timeout_s, context=ctx) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        try:
            return e.code, json.loads(e.read())
        except ValueError:
            return None
    except (OSError, ValueError):
        return None
