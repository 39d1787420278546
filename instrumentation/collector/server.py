"""Run the collector: one uvicorn process (uvloop and httptools when installed) in front of a Kafka producer."""

from __future__ import annotations

import logging
from pathlib import Path

from instrumentation.collector.config import CollectorConfig
from instrumentation.collector.health import KafkaProbe
from instrumentation.collector.keys import KeyStore

log = logging.getLogger("rtrl.collector")


def build_app(cfg: CollectorConfig, bootstrap_servers: str, keys_path: Path):
    """The production app: KafkaTransport (acks=all) to `bootstrap_servers`, keys from `keys_path`."""
    from instrumentation.collector.app import create_app
    from instrumentation.transport import KafkaTransport

    keys = KeyStore(keys_path)
    if not len(keys):
        log.warning("no API keys in %s: every request will get 401; make one with `rtrl collector --keys-new CLIENT`",
                    keys_path)
    # Every send ends with a flush, so linger only shapes how records of one send are packed: a long linger lets a
    # whole batch go out as one produce request instead of many small ones (measured: fewer wake-ups, less CPU).
    transport = KafkaTransport(bootstrap_servers, timeout_s=cfg.produce_timeout_s, client_id="rtrl-collector",
                               linger_ms=100)
    probe = KafkaProbe(bootstrap_servers, timeout_s=min(2.0, cfg.produce_timeout_s), cache_s=cfg.health_cache_s)
    return create_app(cfg, keys=keys, transport=transport, kafka_ok=probe)


def make_server(cfg: CollectorConfig, bootstrap_servers: str, keys_path: Path, *, log_level: str = "info"):
    """A `uvicorn.Server` (not started). `server.run()` blocks; SIGINT/SIGTERM stop it cleanly (in-flight
    requests finish, then the producer is flushed and closed)."""
    import uvicorn

    app = build_app(cfg, bootstrap_servers, keys_path)
    config = uvicorn.Config(app, host=cfg.host, port=cfg.port, loop="auto", http="auto", lifespan="on",
                            access_log=cfg.access_log, log_level=log_level, server_header=False,
                            timeout_graceful_shutdown=max(5, int(cfg.produce_timeout_s) + 2))
    return uvicorn.Server(config)


def url_of(cfg: CollectorConfig) -> str:
    host = cfg.host
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    elif ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{cfg.port}"
