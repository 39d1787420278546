"""Registry retention for a configuration: what serving holds (its GET /health: the arms' versions, every engine
loaded or draining, the staged ones) and which candidates' cycles are in flight (the cycle ledger: a cycle neither
done nor blocked may still gate, promote or resume), then `registry.retention_apply` under the promotion lock.

`run_retention(cfg)` is what `rtrl retention` runs; `after_deploy(cfg)` is what the deploy step runs at the end of
each cycle: the same, summarized for the ledger, and never failing the cycle (an error is recorded instead).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime


def serving_holds(status: dict | None) -> list[str]:
    """The version labels a serving /health body holds: arms, org champions, engines (draining ones too), stages."""
    if not status:
        return []
    out = {str(a.get("version")) for a in (status.get("arms") or {}).values() if a.get("version") is not None}
    out |= {str(v) for v in (status.get("orgs") or {}).values() if v is not None}
    out |= {str(e.get("version")) for e in status.get("engines") or [] if e.get("version") is not None}
    out |= {str(v) for v in status.get("staged") or []}
    return sorted(out)


def in_flight_cycles(cfg, finishing: str | None = None) -> Callable[[set[str]], set[str]]:
    """A function: of these cycle ids, those whose ledger record is neither done nor blocked (running, or failed and
    to be resumed). A cycle the ledger does not know (a candidate trained by hand) is not in flight, nor is
    `finishing`, the cycle whose deploy step asks: its gate has decided, so a candidate it kept out holds nothing
    (it was kept until the next cycle's retention, one checkpoint more in the registry after each rejection)."""
    from infra.orchestrator.ledger import BLOCKED, DONE, Ledger

    ledger = Ledger.for_config(cfg)

    def flying(cycles: set[str]) -> set[str]:
        out = set()
        for cycle in cycles:
            if cycle == finishing:
                continue
            try:
                rec = ledger.load(cycle)
            except ValueError:          # not a ledger cycle id
                continue
            if rec is not None and rec.status not in (DONE, BLOCKED):
                out.add(cycle)
        return out

    return flying


def run_retention(cfg, *, dry_run: bool = False, cache_only: bool = False, now: datetime | None = None,
                  status: dict | None = None, log: Callable[[str], None] = lambda line: None,
                  finishing: str | None = None) -> dict:
    """Plan and apply retention (or with `cache_only`, bound this host's cache alone). `status`: serving's /health
    body when the caller has it (else asked here; nothing answering holds nothing). `finishing`: the cycle whose
    deploy step runs it (not in flight: `in_flight_cycles`)."""
    from registry.client import Registry
    from registry.promotion import lock_path_for
    from registry.retention_apply import apply_retention, prune_cache_only

    r = cfg.retention
    if status is None:
        from serving.server import health

        answer = health(cfg.serving, timeout_s=5.0)
        status = None if answer is None else answer[1]
    held = serving_holds(status)
    registry = Registry.from_config(cfg)
    if cache_only:
        return {"cache": prune_cache_only(registry, r.cache_max_bytes, held, in_flight_cycles(cfg, finishing), now,
                                           dry_run)}
    return apply_retention(registry, lock_path_for(cfg.mlflow_tracking_uri(), cfg.state_path),
                           keep_promoted=r.keep_promoted, min_age_s=r.min_age_s, cache_max_bytes=r.cache_max_bytes,
                           held=held, in_flight=in_flight_cycles(cfg, finishing), now=now, dry_run=dry_run, log=log)


def brief(report: dict) -> dict:
    """What the deploy step records in the ledger: counts and labels, not the whole plan."""
    cache = report.get("cache") or {}
    return {"deleted": report.get("deleted", []), "masters_deleted": report.get("trimmed", []),
            "failed": report.get("failed", {}),
            "kept": report.get("keep", 0), "waiting": report.get("wait", 0), "gone": report.get("gone", 0),
            "restored": report.get("restored", []), "lost": report.get("lost", []),
            "cache_evicted": [f"{e['model']}/v{e['version']}" for e in cache.get("evicted", []) if e.get("version")],
            "cache_bytes": cache.get("bytes_after"), "seconds": report.get("seconds")}


def after_deploy(cfg, log: Callable[[str], None], status: dict | None = None, cycle_id: str | None = None) \
        -> dict | None:
    """Retention at the end of cycle `cycle_id`'s deploy step (its last): its `brief`, {"error": ...} when it
    failed (the cycle goes on; the next cycle tries again), None when `retention.enabled` is off."""
    if not cfg.retention.enabled:
        return None
    try:
        out = brief(run_retention(cfg, status=status, log=log, finishing=cycle_id))
    except Exception as e:  # noqa: BLE001 -- the lock timed out, the store is down: the cycle is done regardless
        log(f"retention failed, tried again after the next deploy: {type(e).__name__}: {e}")
        return {"error": f"{type(e).__name__}: {e}"[:500]}
    if out["deleted"] or out["cache_evicted"]:
        log(f"retention: artifacts deleted for {out['deleted'] or 'none'}; cache evicted "
            f"{out['cache_evicted'] or 'none'}")
    return out
