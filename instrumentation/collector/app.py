"""The collector's HTTP routes (Starlette, ASGI).

    POST /v1/events     {"events": [event, ...]} -> 200 {"accepted": n, "rejected": [{index, event_id, field, reason}]}
    GET  /v1/stats      the collector's counters (`stats.Stats`); needs a key with role admin (401 / 403)
    GET  /healthz       200 {"status": "ok", "kafka": true} | 503 {"status": "unavailable", "kafka": false}
    GET  /metrics       Prometheus text (`metrics.py`): counts only, no key needed (the unauthenticated bucket applies)
    GET  /openapi.json  the OpenAPI 3.1 description (`openapi.py`), including every error status

Every request first passes the header limits (`HeaderLimits`: count and size, 431) and, per remote address, the
unauthenticated-request bucket: an address that spent it (failed credentials, /healthz, /openapi.json) gets 429
before anything else is looked at.

Order of checks on ingest (cheapest first; nothing unauthenticated is read past the headers): credentials present
and well-formed -> (bearer) request rate and key's org -> declared size -> content type -> bounded body read ->
(signed) signature and replay, then request rate and key's org -> JSON shape -> batch cap -> event rate limit ->
per-event validation (schema, org = key's org, trajectory only from role serving, event_time within the skew of
the server's receipt time) -> server-side redaction -> produce (acks=all) -> 200. Only events that passed every
check are produced, and 200 is sent only after Kafka acknowledged all of them. When Kafka fails, the answer is 503
with Retry-After: the client retries the whole batch (records already written by the failed attempt are duplicates
that the archive and the reward job drop by event_id).

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
from instrumentation.collector.ingest import Admission, BadRequest, decode_batch, encodable, validate_events
from schemas.api_keys import ClientKey, KeyStore, KeyStoreError
from instrumentation.collector.metrics import CollectorMetrics
from instrumentation.collector.openapi import build_openapi
from instrumentation.collector.producer import GroupProducer
from instrumentation.collector.ratelimit import RateLimiter
from instrumentation.collector.stats import Stats
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


def _remote(scope_or_request) -> str:
    client = scope_or_request.get("client") if isinstance(scope_or_request, dict) else scope_or_request.client
    if not client:
        return "unknown"
    return client[0] if isinstance(client, (tuple, list)) else client.host


class HeaderLimits:
    """ASGI middleware: a request with more than `max_headers` headers, or whose request target and headers take
    more than `max_bytes`, gets 431 before any route runs. (The HTTP server's parser is limited too:
    `server.limited_http_protocol`; this check holds whichever server runs the app.)"""

    def __init__(self, app, max_bytes: int, max_count: int, stats: Stats):
        self.app, self.max_bytes, self.max_count, self.stats = app, max_bytes, max_count, stats

    def __getattr__(self, name: str):  # the wrapped app's routes, state, ...
        return getattr(self.app, name)

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            headers = scope.get("headers") or []
            size = len(scope.get("raw_path") or b"") + len(scope.get("query_string") or b"") \
                + sum(len(k) + len(v) + 4 for k, v in headers)
            problem = None
            if len(headers) > self.max_count:
                problem = f"{len(headers)} request headers; at most {self.max_count} are accepted"
            elif size > self.max_bytes:
                problem = f"request target and headers take {size} bytes; at most {self.max_bytes} are accepted"
            if problem is not None:
                self.stats.add("headers_refused")
                await error(431, "headers_too_large", problem, close=True)(scope, receive, send)
                return
        await self.app(scope, receive, send)


class Collector:
    """State shared by the routes: keys, authenticator, rate limiters, transport, Kafka probe, counters."""

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
        self.request_limiter = RateLimiter(cfg.rate_limit_requests_per_s, cfg.rate_limit_request_burst,
                                           clock=monotonic)
        self.unauth_limiter = RateLimiter(cfg.rate_limit_unauthenticated_per_s, cfg.rate_limit_unauthenticated_burst,
                                          clock=monotonic, max_keys=cfg.rate_limit_max_addresses)
        self.stats = Stats()
        self.openapi_doc = build_openapi(cfg)
        self.producer = GroupProducer(transport, max_group_records=max(5000, cfg.max_events_per_batch))
        self.metrics = CollectorMetrics(self.stats, self.producer.queued)

    # -- routes --------------------------------------------------------------------------------------------------
    async def ingest(self, request: Request) -> Response:
        t0 = time.perf_counter()
        response = await self._answer_ingest(request)
        self.stats.add(f"responses.{response.status_code}")
        if self.cfg.metrics:
            self.metrics.ingest.observe(time.perf_counter() - t0)
        return response

    async def _answer_ingest(self, request: Request) -> Response:
        if (refused := self._address_over_limit(request)) is not None:
            return refused
        try:
            return await self._ingest(request)
        except AuthError as e:
            return self._auth_error(request, e)
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
        if mode is None:
            key = self._admit(client)
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
            key = self._admit(client)
        items = decode_batch(body, self.cfg.max_events_per_batch)
        wait = self.limiter.acquire(client, len(items))
        if wait:
            self.stats.add("rate_limited.events")
            return error(429, "rate_limited", f"client {client!r} is over {self.cfg.rate_limit_events_per_s:g} "
                         f"events/s (burst {self.cfg.rate_limit_burst}); retry after the indicated seconds",
                         retry_after=wait)
        adm = Admission(key.org, key.role, datetime.fromtimestamp(self.clock(), timezone.utc),
                        self.cfg.max_event_skew_future_s, self.cfg.max_event_skew_past_s, self.cfg.redact)
        batch = await run_in_threadpool(validate_events, items, adm) if items else validate_events([], adm)
        for code, n in batch.counts.items():
            self.stats.add(f"rejected.{code}", n)
        if batch.records:
            try:
                await self.producer.produce(batch.records)
            except TransportError as e:
                self.stats.add("produce_errors")
                self.limiter.refund(client, len(items))
                if (invalidate := getattr(self.kafka_ok, "invalidate", None)) is not None:
                    invalidate()  # /healthz asks the broker again instead of answering from its cache
                log.warning("produce failed for %d events from %s: %s", len(batch.records), client, e)
                return error(503, "kafka_unavailable", "Kafka did not acknowledge the batch; nothing can be assumed "
                             "delivered: retry the whole batch", retry_after=KAFKA_RETRY_AFTER_S)
        self.stats.add("events_accepted", len(batch.records))
        self.stats.add("secrets_redacted", batch.secrets_redacted)
        self.stats.add("events_redacted", batch.events_redacted)
        return JSONResponse({"accepted": len(batch.records), "rejected": [r.as_dict() for r in batch.rejected]})

    async def stats_route(self, request: Request) -> Response:
        """GET /v1/stats: admin role only (bearer, or signed over the empty body)."""
        if (refused := self._address_over_limit(request)) is not None:
            return refused
        self._refresh_keys()
        try:
            client, mode = self.auth.check_headers(request.headers)
            if mode == "signed":  # signed over the (empty) body of the GET
                client = self.auth.verify_body(request.headers, await read_bounded(request.stream(), 1024))
        except AuthError as e:
            return self._auth_error(request, e)
        except BodyTooLarge:
            return error(413, "body_too_large", "GET /v1/stats takes no body", close=True)
        key = self.keys.get(client)
        if key is None or key.role != "admin":
            self.stats.add("forbidden")
            return error(403, "forbidden", "this endpoint needs an API key with role 'admin'")
        return JSONResponse({"counters": self.stats.snapshot(), "clients": len(self.keys)})

    async def healthz(self, request: Request) -> Response:
        if (refused := self._address_over_limit(request, charge=True)) is not None:
            return refused
        ok = bool(await run_in_threadpool(self.kafka_ok))
        if ok:
            return JSONResponse({"status": "ok", "kafka": True})
        return JSONResponse({"status": "unavailable", "kafka": False}, status_code=503,
                            headers={"Retry-After": str(KAFKA_RETRY_AFTER_S)})

    async def metrics_route(self, request: Request) -> Response:
        if (refused := self._address_over_limit(request, charge=True)) is not None:
            return refused
        if not self.cfg.metrics:
            return error(404, "metrics_off", "metrics are off (collector.metrics = false)")
        body, content_type = self.metrics.exposition()
        return Response(body, media_type=content_type)

    async def openapi(self, request: Request) -> Response:
        if (refused := self._address_over_limit(request, charge=True)) is not None:
            return refused
        return JSONResponse(self.openapi_doc)

    # -- helpers -------------------------------------------------------------------------------------------------
    def _address_over_limit(self, request: Request, *, charge: bool = False) -> Response | None:
        """429 when the remote address spent its unauthenticated-request bucket. `charge`: this request is itself
        unauthenticated (/healthz, /openapi.json) and takes a token."""
        addr = _remote(request)
        wait = self.unauth_limiter.acquire(addr, 1) if charge else self.unauth_limiter.wait_for(addr, 1)
        if not wait:
            return None
        self.stats.add("rate_limited.unauthenticated")
        return error(429, "rate_limited", f"too many unauthenticated requests from this address (over "
                     f"{self.cfg.rate_limit_unauthenticated_per_s:g}/s, burst "
                     f"{self.cfg.rate_limit_unauthenticated_burst}); retry after the indicated seconds",
                     retry_after=wait)

    def _auth_error(self, request: Request, e: AuthError) -> Response:
        headers = None
        if e.status == 401:
            headers = {"WWW-Authenticate": 'Bearer realm="rtrl"'}
            self.stats.add("auth_failures")
            self.unauth_limiter.acquire(_remote(request), 1)  # a failed attempt counts against its address
        elif e.status == 403:
            self.stats.add("forbidden")
        # refused before its body was read: close the connection instead of reading (and discarding) the body
        return error(e.status, e.code, e.message, retry_after=e.retry_after, headers=headers, close=True)

    def _admit(self, client: str) -> ClientKey:
        """An authenticated client's key, after its request-rate bucket and the key's org are checked. Raises
        AuthError 429 (requests/s), 403 (a version-1 key with no org), 401 (key gone since authentication)."""
        key = self.keys.get(client)
        if key is None:
            raise AuthError(401, "unauthorized", "invalid credentials")
        wait = self.request_limiter.acquire(client, 1)
        if wait:
            self.stats.add("rate_limited.requests")
            raise AuthError(429, "rate_limited", f"client {client!r} is over {self.cfg.rate_limit_requests_per_s:g} "
                            f"requests/s (burst {self.cfg.rate_limit_request_burst}); retry after the indicated "
                            "seconds", retry_after=wait)
        if key.org is None:
            raise AuthError(403, "key_without_org",
                            f"the API key of client {client!r} was made before keys carried an org and role, so it "
                            "may write no event: re-issue it with `rtrl collector --keys-new "
                            f"{client} --org ORG --role client|serving` and give the client the new key")
        self.stats.add("requests")
        return key

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
                                Route("/v1/stats", self.stats_route, methods=["GET"]),
                                Route("/healthz", self.healthz, methods=["GET"]),
                                Route("/metrics", self.metrics_route, methods=["GET"]),
                                Route("/openapi.json", self.openapi, methods=["GET"])],
                        exception_handlers={HTTPException: http_error}, lifespan=lifespan)
        app.state.collector = self
        return HeaderLimits(app, self.cfg.max_header_bytes, self.cfg.max_headers, self.stats)


def create_app(cfg: CollectorConfig, *, keys: KeyStore, transport: Transport, kafka_ok: Callable[[], bool],
               clock: Callable[[], float] = time.time, monotonic: Callable[[], float] = time.monotonic):
    """The ASGI app. `transport` receives the validated records; `kafka_ok` answers /healthz. The app's
    `collector` attribute is the `Collector` (its `stats`, limiters, keys)."""
    collector = Collector(cfg, keys=keys, transport=transport, kafka_ok=kafka_ok, clock=clock, monotonic=monotonic)
    app = collector.app()
    app.collector = collector
    return app
