"""`CollectorTransport`: the Transport protocol over HTTP to the ingest collector, for clients that must not hold
Kafka credentials. The SDK's TelemetryClient can use it in place of `KafkaTransport`.

    transport = CollectorTransport("http://127.0.0.1:18080", api_key)                      # bearer
    transport = CollectorTransport(url, api_key, client_id="web", sign=True)              # HMAC-signed

Error contract (what the SDK's spool relies on):
  * connection errors, timeouts, 5xx, 429 and 408 raise `CollectorUnavailable` (a `TransportError`): the batch may
    not have been delivered; keep it and retry later;
  * any other 4xx raises `CollectorRejected` (also a `TransportError`) with the status and the server's reason:
    retrying the same request will not help (bad key, malformed batch);
  * 413 is handled here first: a batch the collector finds too large is split in halves and sent again;
  * 200 returns normally. Events the collector rejected individually (invalid against the schema) are not retried:
    they are logged, counted in `rejected_total` and kept in `last_rejected`.
"""

from __future__ import annotations

import json
import logging
import secrets
import threading
import time
from typing import Any, Sequence

import httpx

from instrumentation.collector.auth import signature
from schemas.api_keys import signing_key
from instrumentation.transport import Record, TransportError

log = logging.getLogger("rtrl.collector_client")

RETRYABLE_4XX = (408, 429)


class CollectorUnavailable(TransportError):
    """Not delivered for a reason that may pass: network, 5xx, 429, 408. `retry_after_s` is the server's hint."""

    def __init__(self, message: str, status: int | None = None, retry_after_s: float | None = None):
        super().__init__(message)
        self.status = status
        self.retry_after_s = retry_after_s


class CollectorRejected(TransportError):
    """The collector refused the request (4xx other than 408/429): `status`, `error` (code), `reason`."""

    def __init__(self, status: int, error: str, reason: str):
        super().__init__(f"collector rejected the batch: HTTP {status} {error}: {reason}")
        self.status = status
        self.error = error
        self.reason = reason


def _error_body(resp: httpx.Response) -> tuple[str, str]:
    try:
        body = resp.json()
        return str(body.get("error", "")), str(body.get("message", ""))
    except (ValueError, AttributeError):
        return "", resp.text[:500]


def _retry_after(resp: httpx.Response) -> float | None:
    try:
        return float(resp.headers["retry-after"])
    except (KeyError, ValueError):
        return None


class CollectorTransport:
    stamps_received_time = False
    """The collector stamps `received_time` on arrival (server clock), so the SDK's sender must not."""

    def __init__(self, url: str, api_key: str, *, client_id: str = "", sign: bool = False, timeout_s: float = 10.0,
                 transport: httpx.BaseTransport | None = None, verify: bool | str = True):
        """`url` is the collector's base URL (e.g. http://127.0.0.1:18080, or https://... when it terminates TLS).
        With `sign=True` requests carry an HMAC signature instead of the key, which needs the `client_id` the key
        was made for. `verify`: for https, True (the system's CAs), or the path of a CA bundle (a private CA, or
        the collector's own self-signed certificate)."""
        if sign and not client_id:
            raise ValueError("sign=True needs the client_id the API key was made for")
        self.url = url.rstrip("/")
        self.endpoint = self.url + "/v1/events"
        self.client_id = client_id
        self.sign = sign
        self.timeout_s = timeout_s
        self._api_key = api_key
        self._signing_key = signing_key(api_key)
        if isinstance(verify, str):
            import ssl

            verify = ssl.create_default_context(cafile=verify)
        self._http = httpx.Client(timeout=timeout_s, transport=transport, verify=verify)
        self._lock = threading.Lock()
        self.rejected_total = 0
        self.last_rejected: list[dict[str, Any]] = []

    def _headers(self, body: bytes) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        if not self.sign:
            headers["Authorization"] = f"Bearer {self._api_key}"
            return headers
        ts, nonce = str(int(time.time())), secrets.token_urlsafe(18)
        headers.update({"X-Rtrl-Client": self.client_id, "X-Rtrl-Timestamp": ts, "X-Rtrl-Nonce": nonce,
                        "X-Rtrl-Signature": signature(self._signing_key, ts, nonce, body)})
        return headers

    def send(self, records: Sequence[Record]) -> None:
        if not records:
            return
        try:
            events = [json.loads(r.value) for r in records]
        except ValueError as e:
            raise CollectorRejected(0, "invalid_record", f"a record's value is not JSON: {e}") from e
        self._post(events)

    def _post(self, events: list[Any]) -> None:
        body = json.dumps({"events": events}, separators=(",", ":")).encode()
        try:
            resp = self._http.post(self.endpoint, content=body, headers=self._headers(body))
        except httpx.HTTPError as e:
            raise CollectorUnavailable(f"collector at {self.url} unreachable: {type(e).__name__}: {e}") from e
        status = resp.status_code
        if status == 200:
            self._note_rejections(resp, events)
            return
        error, reason = _error_body(resp)
        if status == 413 and len(events) > 1:
            half = len(events) // 2
            self._post(events[:half])
            self._post(events[half:])
            return
        if status >= 500 or status in RETRYABLE_4XX:
            raise CollectorUnavailable(f"collector answered HTTP {status} {error}: {reason}", status,
                                       _retry_after(resp))
        if 400 <= status < 500:
            raise CollectorRejected(status, error, reason)
        raise CollectorUnavailable(f"collector answered unexpected HTTP {status}", status)

    def _note_rejections(self, resp: httpx.Response, events: list[Any]) -> None:
        try:
            rejected = resp.json().get("rejected", [])
        except (ValueError, AttributeError):
            raise CollectorUnavailable("collector answered 200 with a body that is not JSON", 200) from None
        if rejected:
            with self._lock:
                self.rejected_total += len(rejected)
                self.last_rejected = rejected
            first = rejected[0]
            log.warning("collector rejected %d of %d events (first: index %s event_id %s: %s: %s)", len(rejected),
                        len(events), first.get("index"), first.get("event_id"), first.get("field"),
                        first.get("reason"))

    def close(self) -> None:
        self._http.close()
