"""The OpenAI-compatible gateway: route the user to an arm, render the chat, sample, parse, answer, log.

    POST /v1/chat/completions   an OpenAI chat body, streamed (serving.streaming) or not; see serving.protocol
    GET  /v1/models             the served model and the version each arm serves
    GET  /health                200 {"status": "ok", arms, engines, staged, swaps} once every arm's engine is loaded
    POST /admin/stage           {"version": "7", "cpu_cores": "1"}: load a version for evaluation (no arm gets it)
    POST /admin/unstage         {"version": "7"}: stop; its engine retires unless an alias holds it
Who may call what is serving.auth's (the caller's key, never the body); /admin/* needs the admin role.

A request whose `model` is "<registered model>/v<N>" is pinned to staged version N: no router, arm "eval", and no
trajectory is logged (evaluation traffic never becomes training traffic). Any other `model` value is ignored.

Per request: the caller (key, user header) and the body → `parse_request` → `Router.assign(user)` → arm →
`Fleet.lease(arm)` (the engine of the version the arm's alias points to, held until the answer is built or the
stream ends, so a hot swap never cuts it off) → the checkpoint's chat template over the messages and the request's
tools → `engine.sample` (or `engine.stream`) → the checkpoint's tool-call format (`serving.tool_format`,
schemas/tool_formats.py) parses each sample against the request's tools
→ the OpenAI response and one `Trajectory` event per sample (server side: token ids, behaviour logprobs,
tool-call records, latency) through the telemetry SDK.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from contextlib import asynccontextmanager
from typing import Any, Callable

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from schemas.api_keys import KeyStore
from schemas.events import Trajectory
from serving.arms import Fleet
from serving.auth import AuthMiddleware, principal_of
from serving.config import CPU_CORES_PATTERN, ServingConfig
from serving.metrics import ServingMetrics
from serving.protocol import (Caller, ChatRequest, Generation, RequestError, SampleSpec, Served, TimeBounds,
                              build_response, build_trajectories, final_content, fit_max_tokens, parse_request,
                              tool_format_of)
from serving.streaming import (DONE, ChunkHead, ContentStream, Sample, content_chunk, last_chunk, role_chunk, sse,
                               usage_chunk)
from serving.router import Router

log = logging.getLogger("rtrl.serving")

MAX_BODY_BYTES = 16 * 1024 * 1024
VERSION_LABEL = re.compile(r"^\d+(@[A-Za-z0-9][A-Za-z0-9_.-]{0,63})?$")   # N, or N@<org> (registry.client)
MAX_MESSAGES = 1024
"""Input bounds, checked before any tokenization: a body is read only up to MAX_BODY_BYTES whatever
Content-Length says; a conversation has at most MAX_MESSAGES messages and at most PROMPT_CHARS_PER_TOKEN x
max_model_len characters of content (a longer one cannot fit the context window with any tokenizer whose tokens
average fewer characters; `max_tokens` is already bounded by max_model_len in `serving.protocol`)."""
PROMPT_CHARS_PER_TOKEN = 64
EVAL_ARM = "eval"   # the arm of requests pinned to a staged version (never logged as a trajectory)


class BodyTooLarge(Exception):
    pass


async def read_bounded(request: Request, limit: int) -> bytes:
    """The request body, refusing (BodyTooLarge) as soon as it passes `limit` bytes -- chunked or lying
    Content-Length included; the rest is never read."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge
    buf = bytearray()
    async for chunk in request.stream():
        buf += chunk
        if len(buf) > limit:
            raise BodyTooLarge
    return bytes(buf)


def check_bounds(body: Any, max_model_len: int) -> None:
    """RequestError (400) for a conversation too large to ever fit the model, before it is rendered or tokenized."""
    messages = body.get("messages") if isinstance(body, dict) else None
    if not isinstance(messages, list):
        return  # parse_request says what is wrong
    if len(messages) > MAX_MESSAGES:
        raise RequestError(f"messages: at most {MAX_MESSAGES} messages (got {len(messages)})", "messages")
    chars = 0
    for m in messages:
        content = m.get("content") if isinstance(m, dict) else None
        parts = content if isinstance(content, list) else [content]
        chars += sum(len(p) if isinstance(p, str) else len(str(p.get("text", ""))) if isinstance(p, dict) else 0
                     for p in parts)
    limit = PROMPT_CHARS_PER_TOKEN * max_model_len
    if chars > limit:
        raise RequestError(f"messages: {chars} characters of content cannot fit this model's context of "
                           f"{max_model_len} tokens (limit {limit} characters)", "messages")


def holds_secret(texts) -> bool:
    """Whether any text holds a secret by the SDK's redaction rules (`instrumentation.redact`)."""
    from instrumentation.redaction import redact

    return any(redact(t)[1] for t in texts if t)


class Gateway:
    """What the HTTP layer calls. `emit(trajectory)` hands events to telemetry (never blocks, never raises here)."""

    def __init__(self, cfg: ServingConfig, fleet: Fleet, model_name: str,
                 emit: Callable[[Trajectory], Any] | None = None, on_close: Callable[[], Any] | None = None,
                 telemetry_stats: Callable[[], dict] | None = None):
        self.cfg, self.fleet, self.model_name = cfg, fleet, model_name
        self.router = Router(cfg.experiment, cfg.arms)
        self.emit, self._on_close, self.telemetry_stats = emit, on_close, telemetry_stats
        self.counts = {"served": 0, "failed": 0, "rejected": 0, "telemetry_errors": 0, "secret_requests_not_logged": 0,
                       "streams_cut_short": 0, "event_time_clamped": 0}
        self.metrics = ServingMetrics(self, enabled=cfg.metrics)     # GET /metrics (serving/metrics.py)

    async def start(self, poll: bool = True) -> None:
        await self.fleet.start()
        if poll:
            self.fleet.start_polling()

    async def close(self) -> None:
        await self.fleet.close()
        if self._on_close is not None:
            self._on_close()

    def pinned_version(self, body: Any) -> str | None:
        """The staged version a request's `model` names ("<registered model>/v<N>"), else None."""
        model = body.get("model") if isinstance(body, dict) else None
        prefix = f"{self.model_name}/v"
        if isinstance(model, str) and model.startswith(prefix) and model[len(prefix):]:
            return model[len(prefix):]
        return None

    def _lease(self, pinned: str | None, arm: str, org: str | None = None):
        if pinned is None:
            return self.fleet.lease(arm, org)
        try:
            return self.fleet.lease_version(pinned)
        except LookupError as e:
            raise RequestError(f"model: {e} (POST /admin/stage first)", "model", 404, "model_not_found") from None

    def _prepare(self, body: Any, caller: Caller):
        """(request, pinned version, arm): validation and routing, before anything is leased or sampled."""
        check_bounds(body, self.cfg.max_model_len)
        req = parse_request(body, default_max_tokens=self.cfg.max_tokens, max_model_len=self.cfg.max_model_len,
                            caller=caller, time_bounds=TimeBounds(self.cfg.max_event_skew_future_s,
                                                                  self.cfg.max_event_skew_past_s))
        if req.event_time_clamped:
            self.counts["event_time_clamped"] += 1
        pinned = self.pinned_version(body)
        return req, pinned, EVAL_ARM if pinned is not None else self.router.assign(req.user_id)

    def _render(self, engine, req: ChatRequest) -> tuple[list[int], SampleSpec]:
        """The prompt's token ids (the checkpoint's chat template, given the request's tools, the calls sent back
        written in its tool-call format) and what to sample."""
        template = getattr(getattr(engine, "tokenizer", None), "chat_template", None)
        req.use_tool_format(tool_format_of(self.cfg.tool_format, template if isinstance(template, str) else None))
        try:
            prompt_ids = engine.prompt_ids(req.messages, tools=req.template_tools)
        except Exception as e:  # noqa: BLE001 -- a template that rejects the conversation is the client's 400
            raise RequestError(f"messages: the model's chat template rejected them: {e}", "messages") from None
        max_tokens = fit_max_tokens(len(prompt_ids), req.max_tokens, engine.max_model_len)
        return prompt_ids, req.spec(max_tokens, self.cfg.temperature)

    def _served(self, req: ChatRequest, arm: str, slot, prompt_ids: list[int], spec: SampleSpec,
                generations: list[Generation], t0: float) -> Served:
        return Served(request=req, arm=arm, policy_version=slot.version, model=f"{self.model_name}/v{slot.version}",
                      prompt_token_ids=prompt_ids, generations=generations,
                      parsed=[req.parse(g.text) for g in generations], sampling=spec.sampling,
                      latency_ms=(time.perf_counter() - t0) * 1000)

    def _log(self, served: Served, pinned: str | None) -> None:
        """The request's trajectory events (one per sample), unless it is evaluation traffic."""
        req = served.request
        if self.emit is None or pinned is not None:
            return
        # Token ids cannot be redacted: a request whose prompt or completion holds a secret is logged like a
        # privacy-mode one (no token ids, no logprobs), so the secret never reaches Kafka or a training batch.
        if not req.privacy_mode and holds_secret([m["content"] for m in req.messages] +
                                                 [g.text for g in served.generations]):
            req.privacy_mode = True
            self.counts["secret_requests_not_logged"] += 1
        try:
            for trajectory in build_trajectories(served):
                self.emit(trajectory)
        except Exception as e:  # noqa: BLE001 -- telemetry must never fail a served request
            self.counts["telemetry_errors"] += 1
            log.warning("trajectory of request %s not emitted: %s: %s", req.request_id, type(e).__name__, e)

    async def chat(self, body: Any, caller: Caller = Caller(), received: float | None = None) -> dict:
        """A non-streamed completion: the OpenAI response body. `received`: when the request came
        (time.perf_counter(); default now), for its latency metric."""
        received = time.perf_counter() if received is None else received
        req, pinned, arm = self._prepare(body, caller)
        t0 = time.perf_counter()
        with self._lease(pinned, arm, req.org_id) as slot:
            await slot.wait_ready()   # an in-place swap reloading this version's engine: wait for its weights
            prompt_ids, spec = self._render(slot.engine, req)
            generations = await slot.engine.sample(prompt_ids, spec, request_id=req.request_id)
        served = self._served(req, arm, slot, prompt_ids, spec, generations, t0)
        self.metrics.answered(served, time.perf_counter() - received)
        self._log(served, pinned)
        return build_response(served)

    async def open_stream(self, body: Any, caller: Caller = Caller(), received: float | None = None) -> "Stream":
        """A streamed completion, validated, routed, leased and rendered (so a bad request is still a plain 4xx);
        iterate `Stream.chunks()` to sample and send, and `close()` it whatever happens. `received`: when the
        request came (time.perf_counter(); default now), for its latency metrics."""
        received = time.perf_counter() if received is None else received
        req, pinned, arm = self._prepare(body, caller)
        lease = self._lease(pinned, arm, req.org_id)
        slot = lease.__enter__()
        try:
            await slot.wait_ready()
            prompt_ids, spec = self._render(slot.engine, req)
        except BaseException:
            lease.__exit__(None, None, None)
            raise
        return Stream(self, req, pinned, arm, lease, slot, prompt_ids, spec, received)


class Stream:
    """One streamed request (serving.streaming): the chunks as the engine samples, and on every way out (the end,
    an engine failure, a client that disconnected) the trajectories of what was sampled -- a sample that had not
    ended is marked `cut_short` -- and the engine's lease released."""

    def __init__(self, gateway: Gateway, req: ChatRequest, pinned: str | None, arm: str, lease, slot,
                 prompt_ids: list[int], spec: SampleSpec, received: float | None = None):
        self.gw, self.req, self.pinned, self.arm, self.lease, self.slot = gateway, req, pinned, arm, lease, slot
        self.prompt_ids, self.spec = prompt_ids, spec
        self.samples = [Sample(i, ContentStream(spec.stop, req.format.markers)) for i in range(spec.n)]
        self.t0 = time.perf_counter()
        self.received = self.t0 if received is None else received
        self.first_token_seen = False
        self.failed = False
        self.closed = False
        self.head = ChunkHead(req.request_id, int(time.time()), f"{gateway.model_name}/v{slot.version}",
                              slot.version, arm)

    def _generation(self, s: Sample) -> Generation:
        """The sample as a Generation: decoded once when it has finished (every later chunk and the trajectory
        reuse it), else what was sampled so far, cut short."""
        if s.generation is not None:
            return s.generation
        g = self.slot.engine.finish(s.index, s.token_ids, s.logprobs, s.top, s.finish_reason or "length", self.spec,
                                    cut_short=s.finish_reason is None)
        if s.finish_reason is not None:
            s.generation = g
        return g

    async def chunks(self):
        engine = self.slot.engine
        try:
            yield role_chunk(self.head, self.spec.n)
            async for d in engine.stream(self.prompt_ids, self.spec, request_id=self.req.request_id):
                s = self.samples[d.index]
                s.add(d)
                if s.finish_reason is None:
                    if text := s.content.update(engine.partial_text(s.token_ids)):
                        self._first_token()
                        yield content_chunk(self.head, s.index, text)
                    continue
                self._first_token()
                served = self.served()
                g, p = served.generations[s.index], served.parsed[s.index]
                yield last_chunk(self.head, served, s.index, s.content.rest(final_content(g, p)))
            if self.req.include_usage:
                yield usage_chunk(self.head, self.served())
            yield DONE
        except (asyncio.CancelledError, GeneratorExit):
            raise
        except Exception as e:  # noqa: BLE001 -- the answer has begun: the failure is the stream's last event
            self.failed = True
            log.exception("streamed request %s failed", self.req.request_id)
            yield sse(RequestError(f"generation failed: {type(e).__name__}: {e}", None, 500, "server_error").body())
        finally:
            self.close()

    def _first_token(self) -> None:
        if not self.first_token_seen:
            self.first_token_seen = True
            self.gw.metrics.first_token(self.arm, time.perf_counter() - self.received)

    def served(self) -> Served:
        return self.gw._served(self.req, self.arm, self.slot, self.prompt_ids, self.spec,
                               [self._generation(s) for s in self.samples], self.t0)

    def close(self) -> None:
        """Log the trajectories (once) and release the engine."""
        if self.closed:
            return
        self.closed = True
        seconds = time.perf_counter() - self.received
        try:
            if self.failed:
                self.gw.counts["failed"] += 1
                self.gw.metrics.finished(500, seconds, self.arm, self.slot.version, stream=True)
            else:
                cut = sum(s.finish_reason is None for s in self.samples)
                self.gw.counts["served"] += 1
                self.gw.counts["streams_cut_short"] += bool(cut)
                served = self.served()
                self.gw.metrics.answered(served, seconds, stream=True)
                self.gw._log(served, self.pinned)
        finally:
            self.lease.__exit__(None, None, None)


def caller_of(request: Request, user_header: str) -> Caller:
    """Who the server says is calling (never the body): the authenticated key (serving.auth) and, when
    `serving.user_header` is set, the user that header names (a trusted proxy's). RequestError for a malformed
    header value."""
    principal = principal_of(request.scope)
    user = principal.client_id
    hint = "an API key"
    if user_header:
        hint = f"an API key or the {user_header} header"
        value = request.headers.get(user_header)
        if value is not None:
            if not value.strip() or len(value) > 128:
                raise RequestError(f"header {user_header} must be a non-empty user id of at most 128 characters",
                                   user_header)
            user = value
    return Caller(user=user, org=principal.org, user_hint=hint)


class SSEResponse(StreamingResponse):
    """Server-sent events of a `Stream`; closes the stream however the response ends (a client that disconnects
    included), so its trajectories are logged and its engine released."""

    def __init__(self, stream: Stream):
        super().__init__(stream.chunks(), media_type="text/event-stream",
                         headers={"cache-control": "no-cache", "x-accel-buffering": "no"})
        self.stream = stream

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.body_iterator.aclose()
            self.stream.close()


def _error(status: int, message: str, type_: str, param: str | None = None) -> JSONResponse:
    return JSONResponse(RequestError(message, param, status, type_).body(), status_code=status)


def create_app(gateway: Gateway, *, poll: bool = True, keys: KeyStore | None = None) -> Starlette:
    """The Starlette app; its lifespan loads the engines (startup) and shuts them down (shutdown). `keys`: the API
    keys (serving.auth; None = none valid, so /admin/* refuses every request and /v1/* too when a key is required)."""

    async def chat_completions(request: Request) -> Response:
        received = time.perf_counter()
        response = await _chat_completions(request, received)
        # an answer (200) was counted with its arm and version by Gateway.chat, a stream is counted by Stream.close
        if response.status_code != 200 and not isinstance(response, SSEResponse):
            gateway.metrics.finished(response.status_code, time.perf_counter() - received)
        return response

    async def _chat_completions(request: Request, received: float) -> Response:
        if not gateway.fleet.ready:
            return _error(503, "the model is still loading; retry shortly", "service_unavailable")
        try:
            raw = await read_bounded(request, MAX_BODY_BYTES)
        except BodyTooLarge:
            gateway.counts["rejected"] += 1
            return _error(413, f"request body over {MAX_BODY_BYTES} bytes", "invalid_request_error")
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as e:
            gateway.counts["rejected"] += 1
            return _error(400, f"the body is not valid JSON: {e}", "invalid_request_error")
        try:
            caller = caller_of(request, gateway.cfg.user_header)
            if isinstance(body, dict) and body.get("stream") is True:
                stream = await gateway.open_stream(body, caller, received)
                return SSEResponse(stream)
            answer = await gateway.chat(body, caller, received)
        except RequestError as e:
            gateway.counts["rejected"] += 1
            return JSONResponse(e.body(), status_code=e.status)
        except Exception as e:  # noqa: BLE001 -- an engine failure is a 500 with its reason, never a dropped socket
            gateway.counts["failed"] += 1
            log.exception("request failed")
            return _error(500, f"generation failed: {type(e).__name__}: {e}", "server_error")
        gateway.counts["served"] += 1
        return JSONResponse(answer)

    async def models(request: Request) -> JSONResponse:
        return JSONResponse({"object": "list", "data": [
            {"id": gateway.model_name, "object": "model", "created": 0, "owned_by": "rtrl",
             "arms": gateway.fleet.arm_versions()}]})

    async def metrics(request: Request) -> Response:
        if not gateway.metrics.enabled:
            return _error(404, "metrics are off (serving.metrics = false)", "not_found")
        body, content_type = gateway.metrics.exposition()
        return Response(body, media_type=content_type)

    async def health(request: Request) -> JSONResponse:
        status = gateway.fleet.status()
        body = {"status": "ok" if status["ready"] else "loading", **status, "requests": dict(gateway.counts)}
        if gateway.telemetry_stats is not None:
            body["telemetry"] = gateway.telemetry_stats()
        return JSONResponse(body, status_code=200 if status["ready"] else 503)

    async def _admin_body(request: Request) -> tuple[dict, JSONResponse | None]:
        """The admin body with its `version` as a string, or the 400 that says what is wrong."""
        try:
            body = json.loads(await read_bounded(request, 4096))
        except (BodyTooLarge, ValueError, UnicodeDecodeError):
            body = None
        version = body.get("version") if isinstance(body, dict) else None
        if isinstance(version, int) and not isinstance(version, bool):
            version = str(version)
        cores = body.get("cpu_cores", "") if isinstance(body, dict) else ""
        if not isinstance(version, str) or not VERSION_LABEL.match(version) or not isinstance(cores, str) \
                or not re.match(CPU_CORES_PATTERN, cores):
            return {}, _error(400, 'the body must be {"version": "<N>"} (a registered version number, or "<N>@<org>" '
                              'for an org\'s specialized version), optionally with "cpu_cores": "<cores>"',
                              "invalid_request_error", "version")
        return {**body, "version": version}, None

    async def stage(request: Request) -> JSONResponse:
        body, err = await _admin_body(request)
        if err is not None:
            return err
        version, cores = body["version"], body.get("cpu_cores", "")
        try:
            load_s = await gateway.fleet.stage(version, cores)
        except Exception as e:  # noqa: BLE001 -- an unknown version or a failed load is the caller's answer
            log.warning("staging version %s failed: %s: %s", version, type(e).__name__, e)
            return _error(409, f"version {version} could not be loaded: {type(e).__name__}: {e}", "stage_failed",
                          "version")
        return JSONResponse({"version": version, "load_s": load_s, "staged": gateway.fleet.staged})

    async def unstage(request: Request) -> JSONResponse:
        body, err = await _admin_body(request)
        if err is not None:
            return err
        version = body["version"]
        return JSONResponse({"version": version, "unstaged": await gateway.fleet.unstage(version),
                             "staged": gateway.fleet.staged})

    @asynccontextmanager
    async def lifespan(app):
        await gateway.start(poll=poll)
        try:
            yield
        finally:
            await gateway.close()

    return Starlette(routes=[Route("/v1/chat/completions", chat_completions, methods=["POST"]),
                             Route("/v1/models", models, methods=["GET"]),
                             Route("/health", health, methods=["GET"]),
                             Route("/metrics", metrics, methods=["GET"]),
                             Route("/admin/stage", stage, methods=["POST"]),
                             Route("/admin/unstage", unstage, methods=["POST"])], lifespan=lifespan,
                     middleware=[Middleware(AuthMiddleware, keys=keys, require_key=gateway.cfg.key_required)])
