"""The collector's OpenAPI 3.1 description, served at `GET /openapi.json`.

Written by hand for the HTTP contract; the event schemas come from the pydantic models (`schemas.events`), so
they cannot drift from what `parse_event` accepts. Limits are filled in from the running configuration.
"""

from __future__ import annotations

from typing import Any

from pydantic.json_schema import models_json_schema

from instrumentation.collector.auth import NONCE_RE
from instrumentation.collector.config import CollectorConfig
from schemas.api_keys import CLIENT_ID_RE
from schemas import EVENT_TYPES

REF = "#/components/schemas/{model}"


def _ref(name: str) -> dict[str, str]:
    return {"$ref": REF.format(model=name)}


def _event_schemas() -> dict[str, Any]:
    _, defs = models_json_schema([(cls, "validation") for cls in EVENT_TYPES.values()], ref_template=REF)
    schemas = dict(defs.get("$defs", {}))
    names = {event_type: cls.__name__ for event_type, cls in EVENT_TYPES.items()}
    schemas["Event"] = {
        "description": "One event of any type (docs/events.md); `event_type` selects the schema. Older "
                       "`schema_version`s are accepted and upgraded. `received_time` is overwritten by the collector.",
        "oneOf": [_ref(n) for n in names.values()],
        "discriminator": {"propertyName": "event_type",
                          "mapping": {t: REF.format(model=n) for t, n in sorted(names.items())}},
    }
    return schemas


def _error_response(description: str, retry_after: bool = False) -> dict[str, Any]:
    resp: dict[str, Any] = {"description": description,
                            "content": {"application/json": {"schema": _ref("Error")}}}
    if retry_after:
        resp["headers"] = {"Retry-After": {"description": "Seconds to wait before retrying.", "required": True,
                                           "schema": {"type": "integer", "minimum": 1}}}
    return resp


def build_openapi(cfg: CollectorConfig) -> dict[str, Any]:
    schemas = _event_schemas()
    schemas.update({
        "IngestRequest": {
            "type": "object",
            "additionalProperties": False,
            "required": ["events"],
            "properties": {"events": {
                "type": "array",
                "maxItems": cfg.max_events_per_batch,
                "description": "The batch. Each item is validated on its own: valid events are produced to Kafka, "
                               "invalid ones (any JSON value that is not a valid `Event`) are listed in the "
                               "response's `rejected` and not produced; they do not fail the request.",
                "items": {"anyOf": [_ref("Event"), {"description": "Anything else: reported in `rejected`."}]},
            }},
        },
        "IngestResult": {
            "type": "object",
            "additionalProperties": False,
            "required": ["accepted", "rejected"],
            "properties": {
                "accepted": {"type": "integer", "minimum": 0,
                             "description": "Events validated, stamped with received_time and acknowledged by "
                                            "Kafka (acks=all)."},
                "rejected": {"type": "array", "items": _ref("Rejection")},
            },
        },
        "Rejection": {
            "type": "object",
            "additionalProperties": False,
            "required": ["index", "event_id", "field", "reason"],
            "properties": {
                "index": {"type": "integer", "minimum": 0, "description": "Position in the request's `events`."},
                "event_id": {"type": ["string", "null"], "description": "The item's event_id if it had a string one."},
                "field": {"type": "string", "description": "Dotted path of the offending field ('<event>' for the "
                                                          "whole item)."},
                "reason": {"type": "string"},
            },
        },
        "Error": {
            "type": "object",
            "additionalProperties": False,
            "required": ["error", "message"],
            "properties": {"error": {"type": "string", "description": "Machine-readable code."},
                           "message": {"type": "string", "description": "What was wrong and what to do."}},
        },
        "Stats": {
            "type": "object",
            "additionalProperties": False,
            "required": ["counters", "clients"],
            "properties": {
                "counters": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0},
                             "description": "Counters since start: requests, events_accepted, rejected.<code> "
                                            "(schema, org_mismatch, role_forbidden, event_time_future, "
                                            "event_time_past), secrets_redacted, events_redacted, auth_failures, "
                                            "forbidden, rate_limited.<events|requests|unauthenticated>, "
                                            "headers_refused. Absent means 0."},
                "clients": {"type": "integer", "minimum": 0, "description": "Keys in the keys file."},
            },
        },
        "Health": {
            "type": "object",
            "additionalProperties": False,
            "required": ["status", "kafka"],
            "properties": {"status": {"type": "string", "enum": ["ok", "unavailable"]},
                           "kafka": {"type": "boolean", "description": "Kafka answered a metadata request."}},
        },
    })
    ingest = {
        "summary": "Ingest a batch of events",
        "description": (
            "Authenticate with a bearer API key or HMAC request signing (see the security schemes). Checks, in "
            "order: credentials present and well-formed (401), Content-Length within "
            f"{cfg.max_body_bytes} bytes (413), Content-Type application/json (415), body within the cap (413; "
            f"also when Content-Length is absent or wrong) and received within {cfg.body_read_timeout_s:g} s "
            "(408), signature and replay (401, 409), per-client request rate of "
            f"{cfg.rate_limit_requests_per_s:g}/s with bursts of {cfg.rate_limit_request_burst} (429; an empty "
            "batch counts), a key made before keys carried an org (403), JSON shape (400), at most "
            f"{cfg.max_events_per_batch} events (413), per-client rate limit of {cfg.rate_limit_events_per_s:g} "
            f"events/s with bursts of {cfg.rate_limit_burst} (429), then each event is validated: its schema, "
            "org_id equal to the key's org, `trajectory` only from a key with role serving, event_time at most "
            f"{cfg.max_event_skew_future_s:g} s after and {cfg.max_event_skew_past_s:g} s before the collector's "
            "receipt time. Secrets in free-text fields are redacted again. The answer is "
            "200 only after Kafka acknowledged every valid event; 503 means nothing can be assumed delivered: "
            "retry the whole batch (event_id is the idempotency key downstream). Before any of this: at most "
            f"{cfg.max_headers} headers and {cfg.max_header_bytes} bytes of request target and headers (431), and "
            "a remote address that sent too many unauthenticated requests gets 429."),
        "operationId": "ingestEvents",
        "security": [{"bearer": []},
                     {"rtrlClient": [], "rtrlTimestamp": [], "rtrlNonce": [], "rtrlSignature": []}],
        "requestBody": {"required": True, "content": {"application/json": {"schema": _ref("IngestRequest")}}},
        "responses": {
            "200": {"description": "Batch processed: valid events delivered, invalid ones listed.",
                    "content": {"application/json": {"schema": _ref("IngestResult")}}},
            "400": _error_response("Body is not JSON, or not of the shape {\"events\": [...]}, or a bad "
                                   "Content-Length header."),
            "401": _error_response("Credentials missing or invalid (no detail on which part)."),
            "403": _error_response("The key was made before keys carried an org and role: re-issue it."),
            "408": _error_response("Request body not received in time.", retry_after=True),
            "409": _error_response("Replayed signed request: (client, nonce) already used within the window."),
            "413": _error_response("Body larger than the cap, or more events than the batch cap."),
            "415": _error_response("Content-Type is not application/json."),
            "429": _error_response("Rate limit exceeded: this client's events or requests, or this address's "
                                   "unauthenticated requests.", retry_after=True),
            "431": _error_response("Too many request headers, or too large."),
            "503": _error_response("Kafka is unreachable or did not acknowledge in time; retry the batch.",
                                   retry_after=True),
        },
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": "rtrl ingest collector", "version": "1",
                 "description": "HTTP ingest for telemetry clients that must not hold Kafka credentials. Valid "
                                "events are produced to the Kafka topic of their family (acks=all)."},
        "servers": [{"url": "/"}],
        "paths": {
            "/v1/events": {"post": ingest},
            "/v1/stats": {"get": {
                "summary": "The collector's counters (admin role)",
                "description": "Needs a key with role admin (`rtrl collector --keys-new NAME --org ORG --role "
                               "admin`); signed requests sign the empty body.",
                "operationId": "stats",
                "security": [{"bearer": []},
                             {"rtrlClient": [], "rtrlTimestamp": [], "rtrlNonce": [], "rtrlSignature": []}],
                "responses": {
                    "200": {"description": "Counters since the collector started.",
                            "content": {"application/json": {"schema": _ref("Stats")}}},
                    "401": _error_response("Credentials missing or invalid."),
                    "403": _error_response("The key's role is not admin."),
                    "409": _error_response("Replayed signed request."),
                    "413": _error_response("The request has a body."),
                    "429": _error_response("Too many unauthenticated requests from this address.", retry_after=True),
                    "431": _error_response("Too many request headers, or too large."),
                },
            }},
            "/healthz": {"get": {
                "summary": "Liveness and Kafka reachability",
                "operationId": "health",
                "security": [],
                "responses": {
                    "429": _error_response("Too many unauthenticated requests from this address.", retry_after=True),
                    "431": _error_response("Too many request headers, or too large."),
                    "200": {"description": "Serving, Kafka reachable.",
                            "content": {"application/json": {"schema": _ref("Health")}}},
                    "503": {"description": "Serving, but Kafka is unreachable (ingest answers 503).",
                            "headers": {"Retry-After": {"required": True,
                                                        "schema": {"type": "integer", "minimum": 1}}},
                            "content": {"application/json": {"schema": _ref("Health")}}},
                },
            }},
            "/metrics": {"get": {
                "summary": "Prometheus metrics: counts of requests, events and refusals (no client data)",
                "operationId": "metrics",
                "security": [],
                "responses": {"200": {"description": "Prometheus text exposition format 0.0.4.",
                                      "content": {"text/plain": {"schema": {"type": "string"}}}},
                              "429": _error_response("Too many unauthenticated requests from this address.",
                                                     retry_after=True),
                              "431": _error_response("Too many request headers, or too large.")},
            }},
            "/openapi.json": {"get": {
                "summary": "This document",
                "operationId": "openapi",
                "security": [],
                "responses": {"200": {"description": "OpenAPI 3.1 document.",
                                      "content": {"application/json": {"schema": {"type": "object"}}}},
                              "429": _error_response("Too many unauthenticated requests from this address.",
                                                     retry_after=True),
                              "431": _error_response("Too many request headers, or too large.")},
            }},
        },
        "components": {
            "schemas": schemas,
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer", "bearerFormat": "rtrl_<43 url-safe base64 chars>",
                           "description": "API key made by `rtrl collector --keys-new CLIENT --org ORG --role "
                                          "ROLE`; the key decides the org its events may carry and its role."},
                "rtrlClient": {"type": "apiKey", "in": "header", "name": "X-Rtrl-Client",
                               "description": f"Signed requests: client id ({CLIENT_ID_RE.pattern})."},
                "rtrlTimestamp": {"type": "apiKey", "in": "header", "name": "X-Rtrl-Timestamp",
                                  "description": "Signed requests: unix seconds; must be within "
                                                 f"{cfg.signature_max_skew_s} s of the server clock."},
                "rtrlNonce": {"type": "apiKey", "in": "header", "name": "X-Rtrl-Nonce",
                              "description": f"Signed requests: fresh random value per attempt ({NONCE_RE.pattern})."},
                "rtrlSignature": {"type": "apiKey", "in": "header", "name": "X-Rtrl-Signature",
                                  "description": "Signed requests: hex(HMAC-SHA256(SHA-256(api key), timestamp + "
                                                 "'\\n' + nonce + '\\n' + body))."},
            },
        },
    }
