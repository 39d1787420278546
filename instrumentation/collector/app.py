"""The collector's HTTP routes (Starlette, ASGI).

    POST /v1/events     {"events": [event, ...]} -> 200 {"accepted": n, "rejected": [{index, event_id, field, reason}]}
    GET  /healthz       200 {"status": "ok", "kafka": true} | 503 {"status": "unavailable", "kafka": false}
    GET  /openapi.json  the OpenAPI 3.1 description (`openapi.py`), including every error status

Order of checks on ingest (cheapest first; nothing unauthenticated is read past the headers): credentials present
and well-formed -> declared size -> content type -> bounded body read -> signature and replay -> JSON shape ->
batch cap -> rate limit -> per-event validation -> produce (acks=all) -> 200. Only events that passed every check
are produced, and 200 is sent only after Kafka acknowledged all of them. When Kafka fails, the answer is 503 with
Retry-After: the client retries the whole batch (records already written by the failed attempt are duplicates that
the archive and the reward job drop by event_id).

Validation runs in a worker thread and the Kafka send in the producer thread (`producer.GroupProducer`, which
sends the batches of concurrent requests together), so the event loop keeps serving while a batch is acked.
"""

from __future__ import annotations

import logging
import math
import time
from contextlib import asynccontextmanager
from datetime import datetime, timezone
from typing import Callable

import anyio
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from instrumentation.collector.auth import Authenticator, AuthError, NonceCache
from instrumentation.collector.body import BadContentLength, BodyTooLarge, declared_length, read_bounded
from instrumentation.collector.config import CollectorConfig
from instrumentation.collector.ingest import BadRequest, decode_batch, encodable, validate_events
from instrumentation.collector.keys import KeyStore, KeyStoreError
from instrumentation.collector.openapi import build_openapi
from instrumentation.collector.producer import GroupProducer
from instrumentation.collector.ratelimit import RateLimiter
from instrumentation.transport import Transport, TransportError

log = logging.getLogger("rtrl.collector")

KAFKA_RETRY_AFTER_S = 2


def error(status: int, code: str, message: str, *, retry_after: float | None = None,
          close: bool = False, headers: dict[str, str] | None = None) -> JSONResponse:
    h = dict(headers or {})
    if retry_after is not None:
        h["Retry-After"] = str(max(1, math.ceil(retry_after)))
    if close:
        h["Connection"] = "close"
    return JSONResponse({"error": code, "message": encodable(message)}, status_code=status, headers=h)


def _json_content_type(value: str | None) -> bool:
    if not value:
        return False
    media, *params = (p.strip().lower() for p in value.split(";"))
    if media != "application/json":
        return False
    for p in params:
        name, _, v = p.partition("=")
        if name.strip() == "charset" and v.strip().strip('"') not in ("utf-8", "utf8"):
            return False
    return True


class Collector:
    """State shared by the routes: keys, authenticator, rate limiter, transport, Kafka probe."""

    def __init__(self, cfg: CollectorConfig, *, keys: KeyStore, transport: Transport, kafka_ok: Callable[[], bool],
                 clock: Callable[[], float] = time.time, monotonic: Callable[[], float] = time.monotonic):
        self.cfg = cfg
        self.keys = keys
        self.transport = transport
        self.kafka_ok = kafka_ok
        self.clock = clock
        self.auth = Authenticator(keys, cfg.signature_max_skew_s,
                                  NonceCache(cfg.signature_max_skew_s, cfg.nonce_cache_max_entries), clock=clock)
        self.limiter = RateLimiter(cfg.rate_limit_events_per_s, cfg.rate_limit_burst, clock=monotonic)
        self.openapi_doc = build_openapi(cfg)
        self.producer = GroupProducer(transport, max_group_records=max(5000, cfg.max_events_per_batch))

    # -- routes --------------------------------------------------------------------------------------------------
    async def ingest(self, request: Request) -> Response:
        try:
            return await self._ingest(request)
        except AuthError as e:
            headers = {"WWW-Authenticate": 'Bearer realm="rtrl"'} if e.status == 401 else None
            return error(e.status, e.code, e.message, retry_after=e.retry_after, headers=headers)
        except BadRequest as e:
            return error(e.status, e.code, e.message)
        except BadContentLength as e:
            return error(400, "invalid_content_length", str(e), close=True)
        except BodyTooLarge as e:
            return error(413, "body_too_large", f"request body exceeds {e.limit} bytes: send smaller batches",
                         close=True)
        except ClientDisconnect:
            return error(400, "client_disconnected", "client disconnected before the body was complete", close=True)

    async def _ingest(self, request: Request) -> Response:
        self._refresh_keys()
        headers = request.headers
        client, mode = self.auth.check_headers(headers)
        declared_length(headers.get("content-length"), self.cfg.max_body_bytes)
        if not _json_content_type(headers.get("content-type")):
            return error(415, "unsupported_media_type",
                         f"Content-Type must be application/json (UTF-8), got {headers.get('content-type', '')[:100]!r}")
        try:
            with anyio.fail_after(self.cfg.body_read_timeout_s):
                body = await read_bounded(request.stream(), self.cfg.max_body_bytes)
        except TimeoutError:
            return error(408, "body_timeout", f"request body not received within {self.cfg.body_read_timeout_s:g} s",
                         retry_after=1, close=True)
        if mode == "signed":
            client = self.auth.verify_body(headers, body)
        items = decode_batch(body, self.cfg.max_events_per_batch)
        wait = self.limiter.acquire(client, len(items))
        if wait:
            return error(429, "rate_limited", f"client {client!r} is over {self.cfg.rate_limit_events_per_s:g} "
                         f"events/s (burst {self.cfg.rate_limit_burst}); retry after the indicated seconds",
                         retry_after=wait)
        received = datetime.fromtimestamp(self.clock(), timezone.utc)
        batch = await run_in_threadpool(validate_events, items, received) if items else validate_events([], received)
        if batch.records:
            try:
                await self.producer.produce(batch.records)
            except TransportError as e:
                self.limiter.refund(client, len(items))
                if (invalidate := getattr(self.kafka_ok, "invalidate", None)) is not None:
                    invalidate()  # /healthz asks the broker again instead of answering from its cache
                log.warning("produce failed for %d events from %s: %s", len(batch.records), client, e)
                return error(503, "kafka_unavailable", "Kafka did not acknowledge the batch; nothing can be assumed "
                             "delivered: retry the whole batch", retry_after=KAFKA_RETRY_AFTER_S)
        return JSONResponse({"accepted": len(batch.records), "rejected": [r.as_dict() for r in batch.rejected]})

    async def healthz(self, request: Request) -> Response:
        ok = bool(await run_in_threadpool(self.kafka_ok))
        if ok:
            return JSONResponse({"status": "ok", "kafka": True})
        return JSONResponse({"status": "unavailable", "kafka": False}, status_code=503,
                            headers={"Retry-After": str(KAFKA_RETRY_AFTER_S)})

    async def openapi(self, request: Request) -> Response:
        return JSONResponse(self.openapi_doc)

    # -- helpers -------------------------------------------------------------------------------------------------
    def _refresh_keys(self) -> None:
        try:
            self.keys.refresh()
        except KeyStoreError as e:  # keep serving with the keys already loaded
            log.error("keys file changed but cannot be loaded (keeping the previous keys): %s", e)

    def close(self) -> None:
        self.producer.close()

    def app(self) -> Starlette:
        @asynccontextmanager
        async def lifespan(_app):
            yield
            await run_in_threadpool(self.close)

        async def http_error(request: Request, exc: HTTPException) -> Response:
            return error(exc.status_code, {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error"),
                         str(exc.detail), headers=dict(exc.headers or {}))

        app = Starlette(routes=[Route("/v1/events", self.ingest, methods=["POST"]),
                                Route("/healthz", self.healthz, methods=["GET"]),
                                Route("/openapi.json", self.openapi, methods=["GET"])],
                        exception_handlers={HTTPException: http_error}, lifespan=lifespan)
        app.state.collector = self
        return app


def create_app(cfg: CollectorConfig, *, keys: KeyStore, transport: Transport, kafka_ok: Callable[[], bool],
               clock: Callable[[], float] = time.time, monotonic: Callable[[], float] = time.monotonic) -> Starlette:
    """The ASGI app. `transport` receives the validated records; `kafka_ok` answers /healthz."""
    return Collector(cfg, keys=keys, transport=transport, kafka_ok=kafka_ok, clock=clock, monotonic=monotonic).app()
