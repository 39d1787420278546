"""Who is calling serving: the gateway's side of the trust boundary (docs/security.md).

`AuthMiddleware` runs before every route and stores the caller as a `Principal` in the ASGI scope
(`principal_of(request.scope)`); what a request asserts about itself (its body's `user`, `metadata.org_id`) never
decides who it is.

    GET /health         open: probes need no key, and it holds no user data
    /admin/*            always a key with role `admin` (no key: 401, another role: 403), whether or not chat
                        needs a key
    everything else     (/v1/chat/completions, /v1/models) a key when `require_key` (no key: 401); otherwise a
                        request without one is anonymous (the body's `user` names the A/B user)

Keys are `Authorization: Bearer rtrl_...` from the keys file the collector uses too (`schemas.api_keys`: one file
holds a deployment's keys, so a client's key works at both). A key gives the principal its client id (the A/B
user when the body names none), its org (`*`: a gateway key, which may act for any org) and its role. An unknown
key is 401; a version-1 key (made before keys carried an org) is 403 with the command that re-issues it. The
keys file is re-read when it changes (checked at most once a second), so new and rotated keys work without a
restart.

The official `openai` client always sends some API key. Where chat needs no key, a bearer token that is not an
rtrl key (no `rtrl_` prefix: "unused", "sk-...") is such a placeholder and the request is anonymous; a token with
the prefix must be a valid key. Refusals have OpenAI's error shape (`{"error": {"message", "type", "param",
"code"}}`, type `authentication_error` or `permission_error`), so the client raises AuthenticationError or
PermissionDeniedError; a message never says which part of a credential was wrong.

Admin credentials for local tools (the gate's POST /admin/stage and /admin/unstage, `evals.endpoints`):
`RTRL_ADMIN_KEY` when set, else the file `<state_dir>/admin.key` (mode 0600). `rtrl serve` makes that file when it
starts if it holds no admin key of the keys file and the keys file lies under the state dir: a key for client
`rtrl-local-admin`, org `*`, role `admin` goes into the keys file and the key itself into admin.key (written
atomically). A keys file elsewhere is a deployment's own; its operator makes the admin key (`rtrl collector
--keys-new NAME --org '*' --role admin`) and hands it to tools in RTRL_ADMIN_KEY.
"""

from __future__ import annotations

import logging
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from starlette.responses import JSONResponse

from schemas.api_keys import KEY_PREFIX, ClientKey, KeyStore, KeyStoreError

log = logging.getLogger("rtrl.serving")

PRINCIPAL_KEY = "rtrl.principal"          # the ASGI scope key AuthMiddleware stores the Principal under
OPEN_PATHS = frozenset({"/health", "/metrics"})  # probes and Prometheus scrapes: counts, no user data
ADMIN_PREFIX = "/admin"
ADMIN_ROLE = "admin"
ADMIN_KEY_ENV = "RTRL_ADMIN_KEY"
ADMIN_KEY_FILE = "admin.key"
LOCAL_ADMIN_CLIENT = "rtrl-local-admin"

MISSING = "missing API key: send 'Authorization: Bearer <api key>'"
INVALID = "invalid API key"


@dataclass(frozen=True)
class Principal:
    """The caller as the server authenticated it."""

    client_id: str | None   # None: no key was sent (only possible when keys are not required)
    org: str | None         # the key's org ("*" = a gateway key); None when anonymous
    role: str               # "client" | "serving" | "admin" | "anonymous"


ANONYMOUS = Principal(client_id=None, org=None, role="anonymous")


def principal_of(scope) -> Principal:
    """What AuthMiddleware stored for this request; an anonymous Principal when none."""
    found = scope.get(PRINCIPAL_KEY)
    return found if isinstance(found, Principal) else ANONYMOUS


class Refused(Exception):
    """A request the middleware answers itself: 401 (who are you?) or 403 (not allowed)."""

    def __init__(self, status: int, message: str, code: str):
        super().__init__(message)
        self.status, self.message, self.code = status, message, code

    def response(self) -> JSONResponse:
        kind = "authentication_error" if self.status == 401 else "permission_error"
        headers = {"WWW-Authenticate": 'Bearer realm="rtrl"'} if self.status == 401 else None
        return JSONResponse({"error": {"message": self.message, "type": kind, "param": None, "code": self.code}},
                            status_code=self.status, headers=headers)


def _missing(admin: bool) -> Refused:
    what = "this endpoint needs an API key with role 'admin'; " if admin else ""
    return Refused(401, what + MISSING, "missing_api_key")


def _invalid() -> Refused:
    return Refused(401, INVALID, "invalid_api_key")


class AuthMiddleware:
    """Pure ASGI: authenticates every HTTP request (see the module docstring) and stores its Principal under
    `scope[PRINCIPAL_KEY]`. `keys` None: no key is valid (admin endpoints always refuse, chat too when
    `require_key`)."""

    def __init__(self, app, keys: KeyStore | None = None, require_key: bool = True):
        self.app, self.keys, self.require_key = app, keys, require_key

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":         # lifespan (no websocket routes exist)
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        if path in OPEN_PATHS:
            scope[PRINCIPAL_KEY] = ANONYMOUS
        else:
            try:
                scope[PRINCIPAL_KEY] = self.authenticate(scope.get("headers") or [],
                                                         admin=path.startswith(ADMIN_PREFIX))
            except Refused as r:
                await r.response()(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def authenticate(self, headers, *, admin: bool) -> Principal:
        """The Principal of a request with these raw ASGI headers, to a route that needs an admin key (`admin`)
        or not. Raises Refused."""
        token = _bearer(headers)
        placeholder = token is not None and not token.startswith(KEY_PREFIX) and not (admin or self.require_key)
        if token is None or placeholder:
            if admin or self.require_key:
                raise _missing(admin)
            return ANONYMOUS
        key = self._key_for(token)
        if key is None:
            raise _invalid()
        if key.org is None:
            raise Refused(403, f"the API key of client {key.client_id!r} was made before keys carried an org and "
                          f"role: re-issue it with `rtrl collector --keys-new {key.client_id} --org ORG --role "
                          "client` and give the client the new key", "key_without_org")
        if admin and key.role != ADMIN_ROLE:
            raise Refused(403, "this endpoint needs an API key with role 'admin'", "admin_role_required")
        return Principal(client_id=key.client_id, org=key.org, role=key.role)

    def _key_for(self, token: str) -> ClientKey | None:
        if self.keys is None:
            return None
        try:
            self.keys.refresh()     # at most one stat of the file a second; a changed file is re-read
        except KeyStoreError as e:  # keep the keys already loaded
            log.error("keys file changed but cannot be loaded (keeping the previous keys): %s", e)
        client = self.keys.client_for_key(token)
        return None if client is None else self.keys.get(client)


def _bearer(headers) -> str | None:
    """The bearer token of raw ASGI headers; None when no Authorization header was sent. Raises Refused (401)
    for more than one, another scheme or an empty token."""
    values = [v for k, v in headers if k.lower() == b"authorization"]
    if not values:
        return None
    if len(values) > 1:
        raise _invalid()
    scheme, _, token = values[0].decode("latin-1").strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise _invalid()
    return token


# -- admin credentials of local tools ----------------------------------------------------------------------------
def read_admin_key(key_file: Path) -> str | None:
    """The admin key local tools send: RTRL_ADMIN_KEY when set, else the contents of `key_file`, else None."""
    env = os.environ.get(ADMIN_KEY_ENV, "").strip()
    if env:
        return env
    try:
        return Path(key_file).read_text().strip() or None
    except FileNotFoundError:
        return None


def ensure_admin_key(keys: KeyStore, key_file: Path) -> bool:
    """Make the local admin key unless `key_file` already holds an admin key of `keys`: a key for client
    LOCAL_ADMIN_CLIENT (org "*", role admin) in the keys file, the key itself in `key_file` (0600, replaced
    atomically). True when a key was made."""
    key_file = Path(key_file)
    try:
        held = key_file.read_text().strip()
    except FileNotFoundError:
        held = ""
    if held:
        client = keys.client_for_key(held)
        found = keys.get(client) if client else None
        if found is not None and found.role == ADMIN_ROLE and found.org is not None:
            return False
    raw = keys.create(LOCAL_ADMIN_CLIENT, org="*", role=ADMIN_ROLE)
    key_file.parent.mkdir(parents=True, exist_ok=True)
    tmp = key_file.with_name(f".{key_file.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(raw + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, key_file)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return True
