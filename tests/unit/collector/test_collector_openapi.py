"""GET /openapi.json describes what the collector really does: valid OpenAPI 3.1, every route, every status it
answers with (and its body schema), and the event schemas taken from the pydantic models."""

from __future__ import annotations

import json

import anyio
import jsonschema
import pytest

from instrumentation.collector.openapi import REF
from schemas import EVENT_TYPES
from infra.bench.asgi import post_scope
from tests.unit.collector.conftest import fixture_event, valid_events


def _doc(h) -> dict:
    r = h.client.get("/openapi.json")
    assert r.status_code == 200
    return r.json()


def _conforms(doc: dict, schema: dict, instance) -> None:
    """Validate `instance` against `schema`, resolving #/components/... refs inside the OpenAPI document."""
    jsonschema.Draft202012Validator({**doc, **schema}).validate(instance)


def _check_response(doc: dict, path: str, method: str, resp) -> None:
    documented = doc["paths"][path][method]["responses"]
    status = str(resp.status_code)
    assert status in documented, f"{method.upper()} {path} answered {status}, not documented"
    spec = documented[status]
    _conforms(doc, spec["content"]["application/json"]["schema"], resp.json())
    for header, h in spec.get("headers", {}).items():
        if h.get("required"):
            assert header in resp.headers


def test_document_is_valid_openapi_3_1(harness):
    validator = pytest.importorskip("openapi_spec_validator")
    doc = _doc(harness)
    assert doc["openapi"].startswith("3.1")
    validator.validate(doc)


def test_every_route_is_documented(harness):
    doc = _doc(harness)
    routes = {(r.path, m.lower()) for r in harness.client.app.routes for m in r.methods if m != "HEAD"}
    documented = {(p, m) for p, ops in doc["paths"].items() for m in ops}
    assert routes == documented


def test_event_schemas_are_the_pydantic_models(harness):
    components = _doc(harness)["components"]["schemas"]
    for cls in EVENT_TYPES.values():
        own = cls.model_json_schema(ref_template=REF)
        own.pop("$defs", None)
        assert components[cls.__name__] == own
    assert {m["$ref"] for m in components["Event"]["oneOf"]} == {REF.format(model=c.__name__)
                                                                  for c in EVENT_TYPES.values()}


def test_configured_limits_are_in_the_document(make_harness):
    h = make_harness(max_events_per_batch=123, max_body_bytes=5000, rate_limit_burst=1000)
    doc = _doc(h)
    assert doc["components"]["schemas"]["IngestRequest"]["properties"]["events"]["maxItems"] == 123
    assert "5000 bytes" in doc["paths"]["/v1/events"]["post"]["description"]


def test_valid_and_invalid_events_in_a_request_conform_to_the_request_schema(harness):
    doc = _doc(harness)
    body = {"events": [*valid_events(7), fixture_event("trajectory", 1), {"not": "an event"}]}
    _conforms(doc, {"$ref": "#/components/schemas/IngestRequest"}, body)
    for e in valid_events(7):
        _conforms(doc, {"$ref": "#/components/schemas/Event"}, e)


def _scenarios():
    def ok(h):
        return h.post({"events": [*valid_events(2), {"bad": 1}]})

    def bad_json(h):
        return h.post(b"{nope")

    def unauthorized(h):
        return h.post({"events": []}, auth="none")

    def replayed(h):
        body = json.dumps({"events": []}).encode()
        headers = h.signed(body, nonce="same-nonce-123")
        h.post(body, headers, auth="none")
        return h.post(body, headers, auth="none")

    def too_big(h):
        return h.post(b" " * (h.cfg.max_body_bytes + 1) + b'{"events": []}')

    def too_many(h):
        return h.post({"events": [{}] * (h.cfg.max_events_per_batch + 1)})

    def wrong_type(h):
        return h.post({"events": []}, {"Content-Type": "text/plain"})

    def rate_limited(h):
        h.post({"events": valid_events(h.cfg.rate_limit_burst)})
        return h.post({"events": valid_events(1)})

    def kafka_down(h):
        h.transport.fail = True
        return h.post({"events": valid_events(1)})

    return {"200": ok, "400": bad_json, "401": unauthorized, "409": replayed, "413-body": too_big,
            "413-batch": too_many, "415": wrong_type, "429": rate_limited, "503": kafka_down}


@pytest.mark.parametrize("name", list(_scenarios()))
def test_each_ingest_answer_is_documented_with_its_body_schema(make_harness, name):
    h = make_harness(max_body_bytes=2048, max_events_per_batch=5, rate_limit_burst=5)
    resp = _scenarios()[name](h)
    assert str(resp.status_code) == name.split("-")[0]
    _check_response(_doc(h), "/v1/events", "post", resp)


def test_body_timeout_answer_is_documented(make_harness):
    h = make_harness(body_read_timeout_s=0.05)
    sent = []

    async def receive():
        if not sent:
            sent.append(1)
            return {"type": "http.request", "body": b'{"events": [', "more_body": True}
        await anyio.sleep(30)  # a client that stalls mid-body
        return {"type": "http.disconnect"}

    messages = []

    async def send(m):
        messages.append(m)

    scope = post_scope("/v1/events", [(b"content-type", b"application/json"),
                                      *[(k.lower().encode(), v.encode()) for k, v in h.bearer().items()]])
    anyio.run(h.client.app, scope, receive, send)
    status = messages[0]["status"]
    body = json.loads(b"".join(m.get("body", b"") for m in messages[1:]))
    doc = _doc(h)
    assert status == 408 and body["error"] == "body_timeout"
    _conforms(doc, doc["paths"]["/v1/events"]["post"]["responses"]["408"]["content"]["application/json"]["schema"],
              body)


@pytest.mark.parametrize("kafka_ok", [True, False])
def test_health_answers_are_documented(harness, kafka_ok):
    harness.kafka["ok"] = kafka_ok
    _check_response(_doc(harness), "/healthz", "get", harness.client.get("/healthz"))
