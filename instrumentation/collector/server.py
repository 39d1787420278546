"""Run the collector: one uvicorn process (uvloop and httptools when installed) in front of a Kafka producer.

TLS: with `tls_cert_file` and `tls_key_file` set, uvicorn terminates TLS itself (HTTPS only on that port).
Header limits hold in the HTTP parser too (`limited_http_protocol`): uvicorn's httptools protocol keeps every
header it is sent until the request is complete, so the count and size are checked as headers arrive (over
either, the connection gets 431 and is closed); with h11 its own size bound is set to `max_header_bytes`.
"""

from __future__ import annotations

import logging
from pathlib import Path

from instrumentation.collector.config import CollectorConfig
from instrumentation.collector.health import KafkaProbe
from instrumentation.proxies import proxy_settings
from schemas.api_keys import KeyStore
from schemas.kafka_clients import KafkaTarget

log = logging.getLogger("rtrl.collector")


def build_app(cfg: CollectorConfig, bootstrap_servers: KafkaTarget, keys_path: Path):
    """The production app: KafkaTransport (acks=all) to `bootstrap_servers` (a bootstrap string or the `[kafka]`
    settings, security included), keys from `keys_path`."""
    from instrumentation.collector.app import create_app
    from instrumentation.transport import KafkaTransport

    keys = KeyStore(keys_path)
    if not len(keys):
        log.warning("no API keys in %s: every request will get 401; make one with `rtrl collector --keys-new CLIENT "
                    "--org ORG`", keys_path)
    if stale := keys.without_org():
        log.warning("keys of %s in %s have no org (made before keys carried one): their requests get 403 until "
                    "re-issued with `rtrl collector --keys-new CLIENT --org ORG --role ROLE`", ", ".join(stale),
                    keys_path)
    # Every send ends with a flush, so linger only shapes how records of one send are packed: a long linger lets a
    # whole batch go out as one produce request instead of many small ones (measured: fewer wake-ups, less CPU).
    transport = KafkaTransport(bootstrap_servers, timeout_s=cfg.produce_timeout_s, client_id="rtrl-collector",
                               linger_ms=100)
    probe = KafkaProbe(bootstrap_servers, timeout_s=min(2.0, cfg.produce_timeout_s), cache_s=cfg.health_cache_s)
    return create_app(cfg, keys=keys, transport=transport, kafka_ok=probe)


def limited_http_protocol(max_header_bytes: int, max_headers: int, header_timeout_s: float = 10.0):
    """uvicorn's httptools protocol with the request target + headers bounded to `max_header_bytes` and the header
    count to `max_headers` while they are parsed (431 and close past either), and in time: a connection whose
    request line and headers are not complete `header_timeout_s` after it opened or its request began gets 408 and
    is closed. "auto" (h11) without httptools."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:
        return "auto"

    class LimitedHttpToolsProtocol(HttpToolsProtocol):
        _head_bytes = 0      # request target + complete headers of the current request
        _raw_head = 0        # bytes received while its headers are incomplete (a header still arriving)
        _in_head = False
        _refused = False
        _head_timer = None

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._arm_head_timer()

        def connection_lost(self, exc) -> None:
            self._cancel_head_timer()
            super().connection_lost(exc)

        def _arm_head_timer(self) -> None:
            self._cancel_head_timer()
            self._head_timer = self.loop.call_later(header_timeout_s, self._head_timed_out)

        def _cancel_head_timer(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_timed_out(self) -> None:
            self._head_timer = None
            if self._refused or self.transport.is_closing():
                return
            self._refused = True
            body = (b'{"error": "header_timeout", "message": "request headers not received within '
                    + f"{header_timeout_s:g} s".encode() + b'"}')
            self.transport.write(b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
                                 b"connection: close\r\ncontent-length: " + str(len(body)).encode()
                                 + b"\r\n\r\n" + body)
            self.transport.close()

        def on_message_begin(self) -> None:
            self._head_bytes, self._raw_head, self._in_head = 0, 0, True
            if self._head_timer is None:            # a later request on a kept-alive connection
                self._arm_head_timer()
            super().on_message_begin()

        def on_headers_complete(self) -> None:
            self._in_head = False
            self._cancel_head_timer()
            super().on_headers_complete()

        def _grow(self, n: int) -> None:
            self._head_bytes += n
            if self._head_bytes > max_header_bytes or len(self.headers) > max_headers:
                self._send_431()
                raise ValueError("request headers over the limit")  # stops the parser; the connection is closing

        def on_url(self, url: bytes) -> None:
            self._grow(len(url))
            super().on_url(url)

        def on_header(self, name: bytes, value: bytes) -> None:
            super().on_header(name, value)
            self._grow(len(name) + len(value) + 4)

        def _send_431(self) -> None:
            if not self._refused:
                self._refused = True
                body = (b'{"error": "headers_too_large", "message": "request headers over the limit of '
                        + f"{max_headers} headers or {max_header_bytes} bytes".encode() + b'"}')
                self.transport.write(b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: "
                                     b"application/json\r\nconnection: close\r\ncontent-length: "
                                     + str(len(body)).encode() + b"\r\n\r\n" + body)
                self.transport.close()

        def data_received(self, data: bytes) -> None:
            if self._refused:
                return
            super().data_received(data)
            if self._in_head and not self._refused:
                # the parser buffers a header until it is complete: bound what it may be holding
                self._raw_head += len(data)
                if self._raw_head > max_header_bytes:
                    self._send_431()

        def send_400_response(self, msg: str) -> None:
            if not self._refused:  # the parser error was our own refusal: 431 was sent already
                super().send_400_response(msg)

    return LimitedHttpToolsProtocol


def make_server(cfg: CollectorConfig, bootstrap_servers: KafkaTarget, keys_path: Path, *, log_level: str = "info"):
    """A `uvicorn.Server` (not started). `server.run()` blocks; SIGINT/SIGTERM stop it cleanly (in-flight
    requests finish, then the producer is flushed and closed)."""
    return server_for(build_app(cfg, bootstrap_servers, keys_path), cfg, log_level=log_level)


def server_for(app, cfg: CollectorConfig, *, log_level: str = "info"):
    """A `uvicorn.Server` for `app` with the collector's listener settings: address, TLS, header limits."""
    import uvicorn

    tls = {"ssl_certfile": cfg.tls_cert_file, "ssl_keyfile": cfg.tls_key_file} if cfg.tls else {}
    config = uvicorn.Config(app, host=cfg.host, port=cfg.port, loop="auto",
                            http=limited_http_protocol(cfg.max_header_bytes, cfg.max_headers, cfg.header_timeout_s),
                            lifespan="on", **proxy_settings(cfg.trusted_proxies),
                            access_log=cfg.access_log, log_level=log_level, server_header=False,
                            h11_max_incomplete_event_size=cfg.max_header_bytes,
                            timeout_graceful_shutdown=max(5, int(cfg.produce_timeout_s) + 2), **tls)
    return uvicorn.Server(config)


def url_of(cfg: CollectorConfig) -> str:
    host = cfg.host
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    elif ":" in host:
        host = f"[{host}]"
    return f"{'https' if cfg.tls else 'http'}://{host}:{cfg.port}"
