"""Run the gateway: one uvicorn process; the vLLM engines live in it (plus the processes vLLM spawns).

    server = make_server(cfg)     # cfg: infra.config.RtrlConfig
    server.run()                  # blocks; SIGINT/SIGTERM stop it (in-flight requests finish, engines shut down)

The program calling this must guard its entry point with `if __name__ == "__main__":` (vLLM spawns processes).
"""

from __future__ import annotations

import logging
from pathlib import Path

from serving.app import Gateway, create_app
from serving.arms import Fleet

log = logging.getLogger("rtrl.serving")


def spool_dir(cfg) -> Path:
    base = Path(cfg.sdk.spool_dir).expanduser() if cfg.sdk.spool_dir else cfg.state_path / "spool"
    return base / "serving"


def build_gateway(cfg, *, registry=None, loader=None) -> Gateway:
    """The production gateway: registry aliases from `cfg`, vLLM engines, trajectories to Kafka via the SDK."""
    from registry.client import Registry

    registry = registry or Registry.from_config(cfg)
    if loader is None:
        from serving.engine import VllmEngine

        def loader(version, folder, cpu_cores: str = ""):
            scfg = cfg.serving.model_copy(update={"cpu_cores": cpu_cores}) if cpu_cores else cfg.serving
            return VllmEngine.load(version, folder, scfg)

    emit = on_close = stats = None
    if cfg.serving.telemetry:
        from instrumentation import KafkaTransport, TelemetryClient

        # write-ahead: a trajectory is on disk before its request is answered, so a kill of serving loses none
        sdk = cfg.sdk.model_copy(update={"write_ahead": True}) if cfg.serving.telemetry_write_ahead else cfg.sdk
        client = TelemetryClient(KafkaTransport(cfg.kafka.bootstrap(), timeout_s=cfg.sdk.send_timeout_s,
                                                client_id="rtrl-serving"), sdk, spool_dir(cfg), name="serving")
        emit, stats = client.emit, client.stats

        def on_close() -> None:  # what Kafka has not acknowledged within 5 s stays on disk for the next start
            client.close(timeout=5.0)
    return Gateway(cfg.serving, Fleet(cfg.serving, registry, loader), cfg.mlflow.registered_model, emit=emit,
                   on_close=on_close, telemetry_stats=stats)


def make_server(cfg, *, gateway: Gateway | None = None, log_level: str = "info"):
    """A `uvicorn.Server` (not started) for `cfg.serving.host:port`."""
    import uvicorn

    app = create_app(gateway or build_gateway(cfg))
    config = uvicorn.Config(app, host=cfg.serving.host, port=cfg.serving.port, loop="auto", http="auto",
                            lifespan="on", access_log=cfg.serving.access_log, log_level=log_level,
                            server_header=False, timeout_graceful_shutdown=cfg.serving.shutdown_grace_s)
    return uvicorn.Server(config)


def url_of(scfg) -> str:
    host = scfg.host
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    elif ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{scfg.port}"
