"""Who is sending: a bearer API key, or an HMAC-signed request.

Bearer:   `Authorization: Bearer rtrl_...`

Signed:   `X-Rtrl-Client: <client id>`, `X-Rtrl-Timestamp: <unix seconds>`, `X-Rtrl-Nonce: <8-128 chars of
          [A-Za-z0-9._~+/=-]>`, `X-Rtrl-Signature: hex(HMAC-SHA256(signing_key, timestamp + "\\n" + nonce + "\\n"
          + body))`, where signing_key = SHA-256(api key) and body is the exact request body bytes.

A signed request proves possession of the key without sending it, binds the body (a proxy cannot alter it), and
cannot be replayed: its timestamp must be within `signature_max_skew_s` of the server clock, and a (client, nonce)
pair seen in that window is refused with 409. Every attempt (including a retry) must be signed with a new nonce.

Trade-off of signing_key = SHA-256(key): the server keeps only the hash at rest, yet can verify signatures. The
price is that the stored hash is itself sufficient to *sign* requests: whoever reads the keys file can impersonate
a client over the signed scheme (not over bearer, which needs the key itself). The keys file is therefore a secret
(mode 0600), and rotating a key (`rtrl collector --keys-new CLIENT`) is the remedy if it leaks. The alternative --
keeping the raw key (or an encryption of it) on the server -- would make the file equally sensitive for both schemes.

Failures say only "missing credentials" or "invalid credentials" (401), never which part was wrong.
"""

from __future__ import annotations

import hashlib
import hmac
import heapq
import re
import threading
import time
from collections.abc import Mapping

from schemas.api_keys import CLIENT_ID_RE, KeyStore

CLIENT_HEADER = "x-rtrl-client"
TIMESTAMP_HEADER = "x-rtrl-timestamp"
NONCE_HEADER = "x-rtrl-nonce"
SIGNATURE_HEADER = "x-rtrl-signature"
SIGNED_HEADERS = (CLIENT_HEADER, TIMESTAMP_HEADER, NONCE_HEADER, SIGNATURE_HEADER)

NONCE_RE = re.compile(r"^[A-Za-z0-9._~+/=-]{8,128}$")
TIMESTAMP_RE = re.compile(r"^[0-9]{1,12}$")
SIGNATURE_RE = re.compile(r"^[0-9a-fA-F]{64}$")
_DUMMY_KEY = hashlib.sha256(b"rtrl: no such client").digest()

MISSING = "missing credentials: send 'Authorization: Bearer <api key>' or the X-Rtrl-Client, X-Rtrl-Timestamp, " \
          "X-Rtrl-Nonce and X-Rtrl-Signature headers"
INVALID = "invalid credentials"


class AuthError(Exception):
    """An authentication failure with the HTTP answer it deserves."""

    def __init__(self, status: int, code: str, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.retry_after = retry_after


def _missing() -> AuthError:
    return AuthError(401, "unauthorized", MISSING)


def _invalid() -> AuthError:
    return AuthError(401, "unauthorized", INVALID)


def signature(signing_key: bytes, timestamp: str, nonce: str, body: bytes) -> str:
    """hex(HMAC-SHA256(signing_key, timestamp + "\\n" + nonce + "\\n" + body)) -- used by both ends."""
    mac = hmac.new(signing_key, f"{timestamp}\n{nonce}\n".encode(), hashlib.sha256)
    mac.update(body)
    return mac.hexdigest()


class NonceCache:
    """(client, nonce) pairs of accepted signed requests, each kept until its timestamp leaves the skew window.

    Bounded by the window (expired pairs are dropped) and by `max_entries`: when full, `add` refuses rather than
    forgetting a live pair early (forgetting would allow a replay).
    """

    def __init__(self, window_s: float, max_entries: int):
        self.window_s = window_s
        self.max_entries = max_entries
        self._expiry: dict[tuple[str, str], float] = {}
        self._heap: list[tuple[float, tuple[str, str]]] = []
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._expiry)

    def _purge(self, now: float) -> None:
        while self._heap and self._heap[0][0] < now:
            expiry, key = heapq.heappop(self._heap)
            if self._expiry.get(key) == expiry:
                del self._expiry[key]

    def add(self, client: str, nonce: str, timestamp: float, now: float) -> None:
        """Remember the pair. Raises AuthError 409 for a replay, 429 when the cache is full."""
        key = (client, nonce)
        expiry = timestamp + self.window_s
        with self._lock:
            self._purge(now)
            if key in self._expiry:
                raise AuthError(409, "replayed_request",
                                "replayed request: this (client, nonce) was already used within the signature "
                                "window; sign every attempt with a new nonce")
            if len(self._expiry) >= self.max_entries:
                wait = max(1.0, self._heap[0][0] - now) if self._heap else 1.0
                raise AuthError(429, "too_many_signed_requests",
                                "too many signed requests within the signature window; retry later", wait)
            self._expiry[key] = expiry
            heapq.heappush(self._heap, (expiry, key))


class Authenticator:
    """Two steps: `check_headers` before the body is read (cheap rejections), `verify_body` after (signature)."""

    def __init__(self, keys: KeyStore, max_skew_s: float, nonces: NonceCache, *, clock=time.time):
        self.keys = keys
        self.max_skew_s = max_skew_s
        self.nonces = nonces
        self._clock = clock

    def check_headers(self, headers: Mapping[str, str]) -> tuple[str, str | None]:
        """Returns (client_id, None) for a valid bearer key, or (client_id, "signed") for a plausibly signed
        request whose signature `verify_body` must still check. Raises AuthError 401."""
        authz = headers.get("authorization")
        signed = [h for h in SIGNED_HEADERS if h in headers]
        if authz is None and not signed:
            raise _missing()
        if authz is not None:
            if signed:
                raise _invalid()  # one scheme per request
            scheme, _, token = authz.strip().partition(" ")
            token = token.strip()
            if scheme.lower() != "bearer" or not token:
                raise _invalid()
            client = self.keys.client_for_key(token)
            if client is None:
                raise _invalid()
            return client, None
        if len(signed) != len(SIGNED_HEADERS):
            raise _missing()
        client, ts, nonce, sig = (headers[h].strip() for h in SIGNED_HEADERS)
        if not (CLIENT_ID_RE.match(client) and TIMESTAMP_RE.match(ts) and NONCE_RE.match(nonce)
                and SIGNATURE_RE.match(sig)):
            raise _invalid()
        if abs(self._clock() - int(ts)) > self.max_skew_s:
            raise _invalid()
        return client, "signed"

    def verify_body(self, headers: Mapping[str, str], body: bytes) -> str:
        """Check the signature over the body, then record the nonce. Returns the client id.
        Raises AuthError 401 (bad signature / unknown client), 409 (replay), 429 (nonce cache full)."""
        client, ts, nonce, sig = (headers[h].strip() for h in SIGNED_HEADERS)
        key = self.keys.signing_key_for(client)
        expected = signature(key if key is not None else _DUMMY_KEY, ts, nonce, body)
        if not hmac.compare_digest(expected, sig.lower()) or key is None:
            raise _invalid()
        now = self._clock()
        if abs(now - int(ts)) > self.max_skew_s:  # the body may have taken a while to arrive
            raise _invalid()
        self.nonces.add(client, nonce, int(ts), now)
        return client
