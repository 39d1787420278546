"""Per-client API keys, hashed at rest, each with the tenant (org) and role it acts for.

A contract shared by the ingest collector and the serving gateway: one keys file holds a deployment's keys
(`collector.api_keys_file`, which `serving.api_keys_file` follows by default), so a client's key works at both.

A key is `rtrl_` + 32 random bytes in URL-safe base64. The keys file (JSON, mode 0600, replaced atomically)
stores only SHA-256 of each key, never the key itself: `rtrl collector --keys-new CLIENT --org ORG --role ROLE`
prints the key once. One key per client; making a new key for an existing client replaces (rotates) the old one.

    {"version": 2, "clients": {"web": {"sha256": "<hex>", "created_at": "2026-11-01T10:00:00+00:00",
                                       "org": "acme", "role": "client"}}}

What a key may do is decided here, never by what a request asserts:
  * `org`: the only `org_id` its events may carry. `*` (only when asked for by name) is a gateway key that may
    write for any org -- for a trusted backend that forwards many tenants' traffic (e.g. serving, a simulator).
  * `role`: `client` (editor / agent telemetry, chat at serving), `serving` (may also write `trajectory` events,
    the raw training data), `admin` (the collector's and serving's admin endpoints; otherwise like `client`).

Version-1 files (keys made before keys carried an org) stay readable: their entries load with no org and role
`client`, and the collector refuses their ingest requests with 403 and a message saying how to re-issue the key
(an org cannot be guessed, and guessing wrong would write into another tenant).

The running collector and gateway re-read the file when it changes (checked at most once a second), so keys made
or rotated while they run take effect without a restart.
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import json
import os
import re
import secrets
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

KEY_PREFIX = "rtrl_"
CLIENT_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
FILE_VERSION = 2
READABLE_VERSIONS = (1, 2)
ROLES = ("client", "serving", "admin")
ANY_ORG = "*"
ORG_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@/+-]{0,127}$")
RELOAD_CHECK_S = 1.0


class KeyStoreError(ValueError):
    """The keys file is unreadable or malformed, or a client id is not acceptable."""


def new_api_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def key_hash(api_key: str) -> str:
    """What is stored at rest: SHA-256 of the key string, hex."""
    return hashlib.sha256(api_key.encode()).hexdigest()


def signing_key(api_key: str) -> bytes:
    """The HMAC key for request signing: SHA-256 of the API key (raw bytes), i.e. the stored hash. See `auth`."""
    return hashlib.sha256(api_key.encode()).digest()


def check_client_id(client_id: str) -> str:
    if not isinstance(client_id, str) or not CLIENT_ID_RE.match(client_id):
        raise KeyStoreError(f"client id {client_id!r} must be 1-64 characters of letters, digits, '.', '_' or '-', "
                            "starting with a letter or digit")
    return client_id


def check_org(org: str) -> str:
    if org == ANY_ORG:
        return org
    if not isinstance(org, str) or not ORG_RE.match(org):
        raise KeyStoreError(f"org {org!r} must be 1-128 characters of letters, digits and . _ : @ / + -, starting "
                            f"with a letter or digit (or {ANY_ORG!r} for a gateway key that may write for any org)")
    return org


def check_role(role: str) -> str:
    if role not in ROLES:
        raise KeyStoreError(f"role {role!r} must be one of {', '.join(ROLES)}")
    return role


@dataclass(frozen=True, slots=True)
class ClientKey:
    client_id: str
    sha256: bytes  # the key's SHA-256 digest (also its HMAC signing key)
    created_at: str
    org: str | None = None  # None: a version-1 key made before keys carried an org (may write nothing)
    role: str = "client"

    def may_write_org(self, org_id: str) -> bool:
        return self.org is not None and (self.org == ANY_ORG or self.org == org_id)

    def as_record(self) -> dict:
        rec = {"sha256": self.sha256.hex(), "created_at": self.created_at}
        if self.org is not None:
            rec.update(org=self.org, role=self.role)
        return rec


def _parse(text: str, path: Path) -> dict[str, ClientKey]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise KeyStoreError(f"{path}: not valid JSON: {e}") from None
    if not isinstance(data, dict) or not isinstance(data.get("clients"), dict):
        raise KeyStoreError(f"{path}: expected {{\"version\": {FILE_VERSION}, \"clients\": {{...}}}}")
    version = data.get("version", 1)
    if version not in READABLE_VERSIONS:
        raise KeyStoreError(f"{path}: keys file version {version!r} is not one this rtrl reads "
                            f"({', '.join(map(str, READABLE_VERSIONS))}); was it written by a newer rtrl?")
    out = {}
    for client_id, rec in data["clients"].items():
        digest = rec.get("sha256") if isinstance(rec, dict) else None
        if not CLIENT_ID_RE.match(client_id) or not isinstance(digest, str) or not re.fullmatch(r"[0-9a-f]{64}", digest):
            raise KeyStoreError(f"{path}: entry for client {client_id!r} needs a 64-hex-digit 'sha256'")
        org, role = rec.get("org"), rec.get("role", "client")
        try:
            if org is not None:
                check_org(org)
            check_role(role)
        except KeyStoreError as e:
            raise KeyStoreError(f"{path}: entry for client {client_id!r}: {e}") from None
        out[client_id] = ClientKey(client_id, bytes.fromhex(digest), str(rec.get("created_at", "")), org, role)
    return out


class KeyStore:
    """The keys file. Lookups are constant-time in the key (`hmac.compare_digest` against every entry)."""

    def __init__(self, path: str | Path, *, clock=time.monotonic):
        self.path = Path(path)
        self._clock = clock
        self._lock = threading.Lock()
        self._keys: dict[str, ClientKey] = {}
        self._stamp: tuple | None = None
        self._checked_at = float("-inf")
        self.reload()

    # -- reading -------------------------------------------------------------------------------------------------
    def _file_stamp(self) -> tuple | None:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def reload(self) -> None:
        """Read the file now (a missing file means no clients). Raises KeyStoreError if it is malformed."""
        stamp = self._file_stamp()
        try:
            keys = _parse(self.path.read_text(), self.path) if stamp is not None else {}
        except FileNotFoundError:
            keys, stamp = {}, None
        except OSError as e:
            raise KeyStoreError(f"{self.path}: cannot read: {e}") from None
        with self._lock:
            self._keys, self._stamp = keys, stamp

    def refresh(self) -> None:
        """Re-read the file if it changed since the last read (checked at most once per RELOAD_CHECK_S). A file
        made malformed meanwhile keeps the keys already loaded (the error is raised to the caller to log)."""
        now = self._clock()
        if now - self._checked_at < RELOAD_CHECK_S:
            return
        self._checked_at = now
        if self._file_stamp() != self._stamp:
            self.reload()

    def clients(self) -> list[str]:
        return sorted(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def get(self, client_id: str) -> ClientKey | None:
        """The entry of `client_id` (its org and role), or None."""
        return self._keys.get(client_id)

    def without_org(self) -> list[str]:
        """Clients whose key predates orgs (version-1 entries): the collector refuses their requests."""
        return sorted(c for c, k in self._keys.items() if k.org is None)

    def client_for_key(self, api_key: str) -> str | None:
        """The client owning `api_key`, or None. Compares the hash with every entry (no early exit)."""
        digest = hashlib.sha256(api_key.encode("utf-8", "surrogatepass")).digest()
        found = None
        for ck in list(self._keys.values()):
            if hmac.compare_digest(digest, ck.sha256):
                found = ck.client_id
        return found

    def signing_key_for(self, client_id: str) -> bytes | None:
        ck = self._keys.get(client_id)
        return None if ck is None else ck.sha256

    # -- writing -------------------------------------------------------------------------------------------------
    def create(self, client_id: str, *, org: str, role: str = "client") -> str:
        """Make a key for `client_id` acting for `org` with `role` (replacing the client's previous key), store its
        hash, and return the key itself. `org` has no default: a key's tenant is always chosen by its maker."""
        check_client_id(client_id)
        check_org(org)
        check_role(role)
        key = new_api_key()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock_path = self.path.with_name(self.path.name + ".lock")
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # two concurrent `--keys-new` must not lose each other's key
            self.reload()
            clients = {c: k.as_record() for c, k in self._keys.items()}
            clients[client_id] = {"sha256": key_hash(key),
                                  "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                                  "org": org, "role": role}
            self._write({"version": FILE_VERSION, "clients": dict(sorted(clients.items()))})
            self.reload()
        finally:
            os.close(fd)
        return key

    def _write(self, data: dict) -> None:
        """Atomic replace: write a 0600 temp file in the same directory, fsync, rename, fsync the directory."""
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(data, f, indent=2)
                f.write("\n")
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        dfd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
