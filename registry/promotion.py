"""Move the registry alias `champion` to a gated candidate, by compare-and-swap, with an audit trail; roll back.

`promote(registry, version, lock)` succeeds only if
  - the version's gate tags (evals/gate/tracking.py) say `gate.decision = promote` (`force` skips this check and
    is recorded), and
  - alias `champion` still points to `gate.champion_version`, the version the candidate was evaluated against.
    A champion that moved since the eval (another candidate promoted, a rollback) makes the comparison stale:
    the candidate must be gated again against the new champion. `force` never skips this check.
Then the old champion becomes alias `previous` and the version gets `promotion.*` audit tags. `rollback` makes
`previous` the champion again and walks `previous` one promotion further back (each version's
`promotion.previous_version`), so repeated rollbacks undo promotions in order. Neither serves a version whose
checkpoint files retention deleted (registry.retention_apply): promote and rollback refuse it, and a rollback whose
next `previous` is such a version removes alias `previous` instead (the rollback chain retention keeps ends there).
Retention takes the same lock, so it never deletes what a promotion or rollback racing with it makes an alias.

**The lock.** MLflow's alias API has no compare-and-swap, so the read-check-write runs under a mutual-exclusion
lock. Which one: `registry.promotion_lock` when the registry has one (`mlflow.promotion_lock`, or by default a lease
under an object-store artifact root: `registry.client.Registry.from_config`), else the `lock` argument.

  * A local path: an exclusive `fcntl.flock` on that file (the default: next to the SQLite store, see
    `lock_path_for`). Atomic for every promoter on the machine holding the file; promoters on other machines do
    not see it.
  * A Postgres URL (`postgresql://user@host:5432/db`): a session-level advisory lock there, `PgAdvisoryLock`, for
    promoters on any host that reach the database (the MLflow server's backend store, say). Postgres releases it
    when the holder's session ends, so a crashed promoter never blocks the next one. With an MLflow server as
    tracking URI there is no default: a host's flock cannot serialise promoters on several hosts.
  * An object-store URL (`s3://bucket/key`): a lease object, `ObjectLease`, for promoters on any host. It is taken
    with a conditional create (`If-None-Match: *`) and released with a conditional delete (`If-Match: <etag>` of
    the holder's own lease), so at most one promoter holds it while every holder finishes in time (below). Each
    lease body is unique (a random owner id), so an ETag never comes back for a different holder.

**What the lease guarantees, and under which assumptions.** A holder that crashes leaves its lease behind; a waiter
takes it over (a conditional replace `If-Match` on the very lease it watched, so two waiters cannot both take it)
once it has seen the *same* lease version for `ttl_s` by its *own* monotonic clock. No wall-clock time is compared
across hosts: clock skew does not matter. What matters is clock *rate* and the holder's speed: the holder checks,
right before its alias writes, that less than `ttl_s / 2` has passed on its monotonic clock since it sent the
create, and gives up (PromotionRefused, nothing written) otherwise. Two promotions can therefore overlap only if
the holder's alias writes (two, or three for a rollback) land later than `ttl_s` after it took the lease, as the
waiter's clock measures it: the check leaves `ttl_s / 2` (15 s with the default `ttl_s` of 30 s) for the writes in
flight and any difference in clock rates (real clocks differ by parts per million). The critical section is a
handful of MLflow calls, well under a second; a write stuck in the network for longer than that margin (across a
partition) could still land after a takeover, because MLflow's alias API takes no fencing token. After a crash
the next promotion waits up to `ttl_s` for the stale lease. The object store must offer strongly consistent
conditional writes (AWS S3 since 2024, MinIO, moto).
"""

from __future__ import annotations

import fcntl
import getpass
import hashlib
import json
import os
import socket
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterator

from schemas import storage

CHAMPION, PREVIOUS = "champion", "previous"


class PromotionRefused(Exception):
    """The promotion or rollback was not done; the message says why and what to do."""


@dataclass
class PromotionResult:
    action: str                   # "promote" | "rollback"
    champion: str                 # the version `champion` points to now
    previous: str | None          # the version `previous` points to now (None: unset)
    replaced: str | None          # the version `champion` pointed to before
    forced: bool = False
    eval_run: str = ""
    decision: str = ""
    interval: str = ""
    time: str = ""
    by: str = ""


def lock_path_for(tracking_uri: str, state_path: Path) -> Path | None:
    """`<db>.promotion.lock` next to a SQLite store, else `<state_dir>/registry.promotion.lock`; None for an MLflow
    server (promoters on several hosts: a host's file lock cannot serialise them, `mlflow.promotion_lock` must)."""
    if tracking_uri.startswith("sqlite:///"):
        return Path(tracking_uri[len("sqlite:///"):] + ".promotion.lock")
    from registry.client import is_server_uri

    if is_server_uri(tracking_uri):
        return None
    return Path(state_path) / "registry.promotion.lock"


def lock_for(registry, fallback: str | Path | None) -> Path | str:
    """The lock a promotion of `registry` takes: its `promotion_lock` when it has one (configured, or a lease
    under an object-store artifact root), else `fallback` (the caller's local lock file, `lock_path_for`)."""
    from registry.client import is_database_url

    own = getattr(registry, "promotion_lock", None)
    loc = own if own is not None else fallback
    if loc is None:
        raise PromotionRefused(f"the registry {registry.tracking_uri} is a server that promoters on several hosts "
                               "share, and no promotion lock is configured: set mlflow.promotion_lock to a Postgres "
                               "URL (an advisory lock) or an s3:// URL (a lease object) that every promoter reaches")
    return loc if is_database_url(loc) else storage.normalize(loc)


@contextmanager
def registry_lock(path: str | Path, timeout_s: float = 60.0, name: str = "promotion") -> Iterator[Callable[[], None]]:
    """Hold the promotion lock at `path` for the block: an flock on a local file (created), an `ObjectLease` for an
    object-store URL, or a `PgAdvisoryLock` named `name` in a Postgres database. Yields a check to call right before
    the writes (a no-op for the flock; for a lease it raises PromotionRefused once the lease may have run out; for
    the advisory lock, once its session is gone). PromotionRefused after `timeout_s` of waiting."""
    from registry.client import is_database_url

    if is_database_url(path):
        with PgAdvisoryLock(str(path), name, timeout_s=timeout_s) as lock:
            yield lock.check
        return
    loc = storage.normalize(path)
    if storage.is_remote(loc):
        with ObjectLease(loc, timeout_s=timeout_s) as lease:
            yield lease.check
        return
    path = Path(loc)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise PromotionRefused(f"another promotion holds {path} for more than {timeout_s:.0f} s") from None
                time.sleep(0.02)
        try:
            yield lambda: None
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


class PgAdvisoryLock:
    """A Postgres session-level advisory lock, for promoters on any host that reach one database (the MLflow
    server's backend store, say). Taken with `pg_try_advisory_lock` (polled until `timeout_s`), on a connection of
    its own held for the block, and released with `pg_advisory_unlock`. A holder that crashes or is cut off loses
    its session, and Postgres releases the lock with it: no time-to-live to wait out, no clock involved. `check`,
    right before the registry writes, confirms the session (and so the lock) is still there. The key is a 63-bit
    hash of `name`, so each registered model has its own lock. The password comes from libpq (PGPASSWORD,
    ~/.pgpass), never from the URL in the config.

        with PgAdvisoryLock("postgresql://rtrl@db:5432/mlflow", "promotion-rtrl-policy") as lock:
            lock.check()
            ...
    """

    def __init__(self, url: str, name: str, timeout_s: float = 60.0, poll_s: float = 0.05):
        self.url, self.name, self.timeout_s, self.poll_s = url, name, timeout_s, poll_s
        self.key = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big") >> 1
        self._conn = None

    def acquire(self) -> "PgAdvisoryLock":
        import psycopg2

        try:
            conn = psycopg2.connect(self.url, connect_timeout=10, application_name=f"rtrl {self.name}")
        except psycopg2.OperationalError as e:
            raise PromotionRefused(f"cannot reach the promotion lock's database {_no_password(self.url)}: "
                                   f"{str(e).strip()}") from None
        conn.autocommit = True
        deadline = time.monotonic() + self.timeout_s
        with conn.cursor() as cur:
            while True:
                cur.execute("SELECT pg_try_advisory_lock(%s)", (self.key,))
                if cur.fetchone()[0]:
                    self._conn = conn
                    return self
                if time.monotonic() > deadline:
                    conn.close()
                    raise PromotionRefused(f"another promotion holds the advisory lock {self.name!r} in "
                                           f"{_no_password(self.url)} for more than {self.timeout_s:.0f} s")
                time.sleep(self.poll_s)

    def check(self) -> None:
        import psycopg2

        if self._conn is None:
            raise PromotionRefused(f"the advisory lock {self.name!r} is not held")
        try:
            with self._conn.cursor() as cur:
                cur.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() "
                            "AND granted AND ((classid::bigint << 32) | objid::bigint) = %s", (self.key,))
                held = cur.fetchone()[0] > 0
        except psycopg2.Error as e:
            raise PromotionRefused(f"the promotion lock's session ended ({str(e).strip()}): nothing written; "
                                   "run it again") from None
        if not held:
            raise PromotionRefused(f"the advisory lock {self.name!r} is no longer held: nothing written")

    def release(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT pg_advisory_unlock(%s)", (self.key,))
        except Exception:  # noqa: BLE001 -- closing the session releases it anyway
            pass
        finally:
            conn.close()

    def __enter__(self) -> "PgAdvisoryLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def _no_password(url: str) -> str:
    from urllib.parse import urlsplit

    u = urlsplit(url)
    return f"{u.scheme}://{u.username + '@' if u.username else ''}{u.hostname}:{u.port or 5432}{u.path}"


class ObjectLease:
    """A lease held as one object in a shared store (any `schemas.storage` location; S3 for promoters on several
    hosts). The module docstring says what it guarantees. `clock` and `sleep` are for tests.

        with ObjectLease("s3://bucket/locks/promotion.lease") as lease:
            lease.check()          # before the writes: PromotionRefused once ttl_s / 2 has passed
            ...
    """

    def __init__(self, loc, ttl_s: float = 30.0, timeout_s: float = 60.0, poll_s: float = 0.1,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep):
        if ttl_s <= 0 or timeout_s < 0:
            raise ValueError("ttl_s must be > 0 and timeout_s >= 0")
        self.loc, self.ttl_s, self.timeout_s, self.poll_s = storage.normalize(loc), ttl_s, timeout_s, poll_s
        self.clock, self.sleep = clock, sleep
        self.version: str | None = None     # the held lease's version (S3 ETag), None when not held
        self.taken_over: dict | None = None  # the stale lease this one replaced, if any
        self._since = 0.0

    def _body(self) -> bytes:
        return json.dumps({"owner": uuid.uuid4().hex, "by": _actor(), "pid": os.getpid(), "ttl_s": self.ttl_s,
                           "acquired_at": _now(None)}, sort_keys=True).encode()

    def acquire(self) -> "ObjectLease":
        deadline = self.clock() + self.timeout_s
        watched: tuple[str, float] | None = None   # (version seen, when first seen on this host's clock)
        while True:
            since = self.clock()
            if (version := storage.create_if_absent(self.loc, self._body())) is not None:
                self.version, self._since = version, since
                return self
            current = storage.read_versioned(self.loc)
            if current is None:          # released between the create and the read: try again now
                continue
            body, version = current
            now = self.clock()
            if watched is None or watched[0] != version:
                watched = (version, now)
            elif now - watched[1] >= self.ttl_s:   # the same lease for a whole ttl: its holder is gone
                since = self.clock()
                if (mine := storage.replace_if_version(self.loc, self._body(), version)) is not None:
                    self.version, self._since, self.taken_over = mine, since, _parse(body)
                    return self
                watched = None           # another waiter took it over first
                continue
            if now >= deadline:
                holder = _parse(body)
                raise PromotionRefused(f"another promotion holds the lease {self.loc} (by {holder.get('by', '?')}, "
                                       f"since {holder.get('acquired_at', '?')}) for more than "
                                       f"{self.timeout_s:.0f} s; a lease is taken over {self.ttl_s:.0f} s after its "
                                       "holder stopped")
            self.sleep(self.poll_s)

    def check(self) -> None:
        """Raise PromotionRefused unless the lease is held with at least half its ttl left (measured from before
        the request that took it)."""
        if self.version is None:
            raise PromotionRefused(f"the lease {self.loc} is not held")
        if self.clock() - self._since >= self.ttl_s / 2:
            raise PromotionRefused(f"the promotion lease {self.loc} ran for more than {self.ttl_s / 2:.0f} s (half "
                                   "its ttl) before a registry write: stopped so that a promoter taking it over "
                                   "cannot overlap; check the registry and run it again")

    def release(self) -> bool:
        """Delete the lease if it is still this one; whether it was (False: another promoter took it over)."""
        version, self.version = self.version, None
        return version is not None and storage.delete_if_version(self.loc, version)

    def __enter__(self) -> "ObjectLease":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def _parse(body: bytes) -> dict:
    try:
        out = json.loads(body)
    except ValueError:
        return {}
    return out if isinstance(out, dict) else {}


def _actor() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return f"{user}@{socket.gethostname()}"


def _now(now: datetime | None) -> str:
    return (now or datetime.now(timezone.utc)).isoformat(timespec="seconds")


def _tags(registry, version: str) -> dict[str, str]:
    from mlflow.exceptions import MlflowException

    try:
        return registry.info(version).tags
    except MlflowException:
        raise PromotionRefused(f"version {version} of model {registry.model!r} does not exist") from None


def _refuse_deleted(version: str, tags: dict[str, str]) -> None:
    from registry.client import artifacts_deleted, master_deleted

    if (when := artifacts_deleted(tags)) is not None:
        raise PromotionRefused(f"version {version}'s checkpoint files were deleted by retention at {when}: it cannot "
                               "be served (it was beyond the rollback chain retention keeps)")
    if (when := master_deleted(tags)) is not None:
        raise PromotionRefused(f"version {version}'s float32 master was deleted by retention at {when} (a later "
                               "version's delta chain held only its served weights): the next cycle could not "
                               "train from it")


def _deleted(registry, label: str) -> bool:
    """Whether retention deleted the files of `label`, a `promotion.previous_version` of `registry`'s lineage
    (its own version, `<v>@<org>` in an org's lineage, or there a plain one: the shared model's)."""
    from mlflow.exceptions import MlflowException

    from registry.client import master_deleted, parse_label

    version, org = parse_label(label)
    reg = registry if org is not None or getattr(registry, "org", None) is None else registry.shared()
    try:
        return master_deleted(reg.info(version).tags) is not None
    except MlflowException:      # not a version of that model: nothing retention did
        return False


def _champion(registry) -> tuple[str | None, str | None]:
    """(what the gate compared against, the champion alias's own version) of `registry`'s lineage. For an org's
    lineage (Registry.for_org) the first is its champion's label `<v>@<org>`, or, while the org has none, the shared
    champion its users are served: the alias the candidate takes over must still be what its gate measured."""
    own = registry.version_of(CHAMPION)
    org = getattr(registry, "org", None)
    if org is None:
        return own, own
    from registry.client import version_label

    return (version_label(own, org) if own is not None else registry.shared().version_of(CHAMPION)), own


def promote(registry, version: str, lock: str | Path, force: bool = False, expect_champion: str | None = None,
            now: datetime | None = None) -> PromotionResult:
    """Make `version` the champion if its gate passed against the current champion (see the module docstring).
    `expect_champion` names the champion to swap from when the version has no `gate.champion_version` (only
    useful with `force`); it must agree with the tag when both exist."""
    version = str(version)
    with registry_lock(lock_for(registry, lock), name=f"promotion-{registry.model}") as check:
        tags = _tags(registry, version)
        _refuse_deleted(version, tags)
        decision, gated_against = tags.get("gate.decision"), tags.get("gate.champion_version")
        if not force and decision != "promote":
            why = ("has no gate result (run the gate first)" if decision is None else
                   f"was not passed by its gate: {decision} ({tags.get('gate.reasons') or 'no reason recorded'}), "
                   f"run {tags.get('gate.run_id', '?')}")
            raise PromotionRefused(f"version {version} {why}; --force promotes anyway (audited)")
        if expect_champion is not None and gated_against is not None and str(expect_champion) != gated_against:
            raise PromotionRefused(f"version {version} was gated against champion {gated_against}, "
                                   f"not {expect_champion}")
        expected = gated_against if gated_against is not None else expect_champion
        if expected is None:
            raise PromotionRefused(f"version {version} records no champion it was compared against: pass "
                                   "--expect-champion VERSION (the compare-and-swap needs one)")
        current, own = _champion(registry)
        if own is not None and own == version:
            raise PromotionRefused(f"version {version} is already the champion")
        if current != str(expected):
            why = (f"alias champion moved since the eval: it points to {current}, and version {version} was "
                   f"compared against {expected}; gate it again against {current}")
            registry.set_version_tags(version, {"promotion.refused_time": _now(now), "promotion.refused_by": _actor(),
                                                "promotion.refused_reason": why[:500]})
            raise PromotionRefused(why)
        check()   # the last moment to give up: the writes below go together
        if own is not None:
            registry.set_alias(PREVIOUS, own)
        registry.set_alias(CHAMPION, version)
        result = PromotionResult("promote", version, current, current, force, tags.get("gate.run_id", ""),
                                 decision or "", tags.get("gate.interval", ""), _now(now), _actor())
        registry.set_version_tags(version, {
            "promotion.time": result.time, "promotion.previous_version": current or "",
            "promotion.eval_run": result.eval_run, "promotion.decision": result.decision or "none",
            "promotion.interval": result.interval, "promotion.forced": str(force).lower(),
            "promotion.by": result.by})
    return result


def rollback(registry, lock: str | Path, now: datetime | None = None) -> PromotionResult:
    """Point `champion` back at `previous`; `previous` moves to the version that one replaced (or is removed)."""
    with registry_lock(lock_for(registry, lock), name=f"promotion-{registry.model}") as check:
        current, prev = registry.version_of(CHAMPION), registry.version_of(PREVIOUS)
        if prev is None:
            raise PromotionRefused("alias previous is not set: there is no promotion to roll back")
        if prev == current:
            raise PromotionRefused(f"alias previous already equals champion ({current})")
        prev_tags = _tags(registry, prev)
        _refuse_deleted(prev, prev_tags)
        before = prev_tags.get("promotion.previous_version") or None
        if before is not None and _deleted(registry, before):
            before = None      # retention deleted it (beyond the rollback chain it keeps): the chain ends here
        check()
        registry.set_alias(CHAMPION, prev)
        if before is not None and before != prev:
            registry.set_alias(PREVIOUS, before)
        else:
            registry.delete_alias(PREVIOUS)
        result = PromotionResult("rollback", prev, before if before != prev else None, current,
                                 time=_now(now), by=_actor())
        if current is not None:
            registry.set_version_tags(current, {"rollback.time": result.time, "rollback.restored_version": prev,
                                                "rollback.by": result.by})
        registry.set_version_tags(prev, {"restored.time": result.time, "restored.replaced_version": current or "",
                                         "restored.by": result.by})
    return result
