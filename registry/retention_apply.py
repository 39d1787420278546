"""Apply registry retention (`registry.retention.plan`) to an MLflow registry and this host's checkpoint cache.

    report = apply_retention(registry, lock, keep_promoted=5, min_age_s=36000, cache_max_bytes=10 << 30,
                             held=["7", "3@acme"], in_flight=lambda cycles: {"c9"} & cycles)

Under the promotion lock of every lineage (the lock `registry.promotion.promote` and `rollback` take, so no alias
moves meanwhile) it reads each lineage's versions and aliases again, asks `in_flight` which of the candidates'
cycles are still running, plans, and tags each version to delete `retention.deleting` (a version tagged so is never
promoted, restored by a rollback, nor loaded: `Registry.local_path` refuses it). Then, with the lock released, it
deletes those versions' checkpoint files (the `checkpoint/` artifacts of the version's run, through MLflow's
artifact repository: a local folder, S3 or the tracking server's proxied store) and tags them
`retention.artifacts_deleted`. A version planned `trim` (only a later version's delta chain holds it) is tagged
`retention.master_deleting`, loses its `checkpoint/` artifacts alone and is tagged `retention.master_deleted`. The
model version, its tags and metrics, its run and every gate run stay, for audit.
A deletion that fails keeps its `retention.deleting` tag and is tried again next time. Last, this host's cache is
bounded (`registry.cache.prune`): cached copies of deleted versions go, then the oldest that nothing loads now.

Returns a JSON-able report: the counts by action, the labels deleted, failed, restored and lost, each verdict, and
the cache's summary.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Collection, Iterable, Iterator
from datetime import datetime, timezone
from pathlib import Path

from registry.client import ARTIFACT_DIR, DELETED_TAG, DELETING_TAG, MASTER_DELETED_TAG, MASTER_DELETING_TAG, \
    is_database_url
from registry.retention import DELETE, GONE, REASON_TAG, TRIM, Lineage, VersionRecord, loaded_now, plan, summarize


def lineage_of(registry, org: str | None = None) -> Lineage:
    """A lineage's versions (with tags and creation times) and aliases, read from the registry."""
    from mlflow.exceptions import MlflowException

    versions, token = [], None
    while True:
        page = registry.client.search_model_versions(f"name = '{registry.model}'", page_token=token)
        versions += [VersionRecord(str(mv.version), (mv.creation_timestamp or 0) / 1000.0, dict(mv.tags or {}))
                     for mv in page]
        token = getattr(page, "token", None)
        if not token:
            break
    try:
        aliases = dict(registry.client.get_registered_model(registry.model).aliases or {})
    except MlflowException:      # no such registered model yet
        aliases = {}
    return Lineage(registry.model, versions, {a: str(v) for a, v in aliases.items()}, org)


def lineages_of(registry, orgs: Iterable[str] | None = None) -> list[Lineage]:
    """The shared lineage and each org's (`orgs`, default every org in the store)."""
    shared = registry.shared()
    orgs = shared.orgs() if orgs is None else orgs
    return [lineage_of(shared)] + [lineage_of(shared.for_org(o), o) for o in orgs]


@contextlib.contextmanager
def all_locks(registry, fallback, orgs: Iterable[str], timeout_s: float = 60.0) -> Iterator[Callable[[], None]]:
    """Hold the promotion lock of the shared lineage and of each org's at once (each lock location once: the
    flock or lease they share; a Postgres advisory lock per registered model). Yields a check that runs every
    lock's own (registry.promotion.registry_lock)."""
    from registry.promotion import lock_for, registry_lock

    shared = registry.shared()
    held: dict[tuple[str, str | None], None] = {}
    checks: list[Callable[[], None]] = []
    with contextlib.ExitStack() as stack:
        for reg in [shared, *(shared.for_org(o) for o in orgs)]:
            loc = lock_for(reg, fallback)
            name = f"promotion-{reg.model}"
            key = (str(loc), name if is_database_url(loc) else None)
            if key in held:
                continue
            held[key] = None
            checks.append(stack.enter_context(registry_lock(loc, timeout_s=timeout_s, name=name)))
        yield lambda: [check() for check in checks]


def _lineage_registry(registry, org: str | None):
    shared = registry.shared()
    return shared if org is None else shared.for_org(org)


def delete_artifacts(registry, version: str, master_only: bool = False) -> None:
    """Delete the files of a version: its run's `checkpoint/` artifacts (the master; unless deleted already)
    and, unless `master_only`, when it ships them, its `served/` ones (registry/shipping.py); the run and version
    stay."""
    from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

    from registry.shipping import KIND_TAG, SERVED_DIR

    info = registry.info(version)
    run = registry.client.get_run(info.run_id)
    repo = get_artifact_repository(run.info.artifact_uri, tracking_uri=registry.tracking_uri)
    if MASTER_DELETED_TAG not in info.tags:
        repo.delete_artifacts(ARTIFACT_DIR)
    if KIND_TAG in info.tags and not master_only:
        repo.delete_artifacts(SERVED_DIR)


def _now_iso(now: datetime) -> str:
    return now.isoformat(timespec="seconds")


def apply_retention(registry, lock_fallback, *, keep_promoted: int, min_age_s: float, cache_max_bytes: int | None,
                    held: Iterable[str] = (), in_flight: Callable[[set[str]], Collection[str]] = lambda c: (),
                    now: datetime | None = None, dry_run: bool = False, lock_timeout_s: float = 60.0,
                    log: Callable[[str], None] = lambda line: None) -> dict:
    """Plan and apply retention (the module docstring says how); `held`: version labels serving holds;
    `in_flight(cycle ids)`: those of them whose cycle has not finished. `cache_max_bytes` None leaves the cache
    alone. With `dry_run` nothing is written or deleted: the report says what would be."""
    t0 = time.monotonic()
    now = now or datetime.now(timezone.utc)
    held = [str(h) for h in held]
    orgs = registry.shared().orgs()
    with all_locks(registry, lock_fallback, orgs, lock_timeout_s) as check:
        lineages = lineages_of(registry, orgs)
        cycles = _live_cycles(lineages)
        flying = set(in_flight(cycles)) & cycles
        verdicts = plan(lineages, keep_promoted=keep_promoted, min_age_s=min_age_s, now_s=now.timestamp(),
                        held=held, in_flight_cycles=flying)
        doomed = [v for v in verdicts if v.action in (DELETE, TRIM)]
        restored = [v for v in verdicts if v.restore]
        tags = {(lin.model, v.version): v.tags for lin in lineages for v in lin.versions}
        if not dry_run:
            check()   # the last moment to give up: nothing is written before it
            for v in restored:
                reg = _lineage_registry(registry, v.org)
                reg.client.delete_model_version_tag(reg.model, v.version, DELETING_TAG)
                log(f"retention: version {v.label} is held again ({', '.join(v.reasons)}): its deletion is undone")
            for v in doomed:
                check()   # a lease may run out on a long list: the versions tagged so far are deleted next time
                begun = DELETING_TAG if v.action == DELETE else MASTER_DELETING_TAG
                if begun not in tags[(v.model, v.version)]:
                    _lineage_registry(registry, v.org).set_version_tags(v.version, {
                        begun: _now_iso(now), REASON_TAG: "; ".join(v.reasons)[:500]})
    deleted, trimmed, failed = [], [], {}
    for v in [] if dry_run else doomed:
        reg = _lineage_registry(registry, v.org)
        what = "artifacts" if v.action == DELETE else "float32 master"
        try:
            delete_artifacts(reg, v.version, master_only=v.action == TRIM)
        except Exception as e:  # noqa: BLE001 -- any store error: the version stays tagged deleting, retried next time
            failed[v.label] = f"{type(e).__name__}: {e}"[:300]
            log(f"retention: deleting the {what} of version {v.label} failed, retried next time: {failed[v.label]}")
            continue
        done = DELETED_TAG if v.action == DELETE else MASTER_DELETED_TAG
        reg.set_version_tags(v.version, {done: _now_iso(datetime.now(timezone.utc))})
        (deleted if v.action == DELETE else trimmed).append(v.label)
        log(f"retention: deleted the {what} of version {v.label} ({'; '.join(v.reasons)})")
    lost = [v for v in verdicts if v.lost]
    for v in lost:
        log(f"retention: version {v.label} is held but its artifacts are gone: {v.reasons[0]}")
    report = {**summarize(verdicts), "dry_run": dry_run, "deleted": deleted, "trimmed": trimmed, "failed": failed,
              "restored": [v.label for v in restored], "plan": [v.as_dict() for v in verdicts]}
    if cache_max_bytes is not None:    # copies of versions deleted, or being deleted: local_path refuses them
        gone = {(v.model, v.version) for v in verdicts if v.action in (GONE, DELETE)}
        report["cache"] = prune_local_cache(registry, lineages, gone, cache_max_bytes, held, flying, now, dry_run)
    report["seconds"] = round(time.monotonic() - t0, 3)
    return report


def prune_local_cache(registry, lineages: list[Lineage], gone: Collection[tuple[str, str]], max_bytes: int,
                      held: Iterable[str], in_flight_cycles: Collection[str], now: datetime, dry_run: bool) -> dict:
    """Bound this host's checkpoint cache (registry.cache.prune): `gone` (registered model, version) go, then the
    oldest of what nothing loads now (`registry.retention.loaded_now`) until it fits."""
    from registry.cache import prune

    protected = loaded_now(lineages, held=held, in_flight_cycles=in_flight_cycles)
    return prune(Path(registry.cache_dir), max_bytes=max_bytes, protected=protected, gone=gone,
                 now_s=now.timestamp(), dry_run=dry_run)


def prune_cache_only(registry, max_bytes: int, held: Iterable[str] = (),
                     in_flight: Callable[[set[str]], Collection[str]] = lambda c: (),
                     now: datetime | None = None, dry_run: bool = False) -> dict:
    """Bound this host's cache without touching the registry (a host that only loads versions: serving's, the
    gate's): the registry is read, no lock taken."""
    now = now or datetime.now(timezone.utc)
    lineages = lineages_of(registry)
    cycles = _live_cycles(lineages)
    gone = {(lin.model, v.version) for lin in lineages for v in lin.versions
            if DELETED_TAG in v.tags or DELETING_TAG in v.tags}
    return prune_local_cache(registry, lineages, gone, max_bytes, [str(h) for h in held],
                             set(in_flight(cycles)) & cycles, now, dry_run)


def _live_cycles(lineages: list[Lineage]) -> set[str]:
    """The cycle ids of the candidates whose artifacts are not deleted (the only ones a cycle in flight can hold)."""
    return {v.tags["cycle"] for lin in lineages for v in lin.versions
            if v.tags.get("cycle") and DELETED_TAG not in v.tags}
