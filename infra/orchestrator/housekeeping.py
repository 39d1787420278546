"""What the orchestrator removes as cycles go by, so that its state does not grow with them:

    after_cycle(cfg, ledger, rec, log)     after a cycle ended (done or blocked), in the executor that ran its last step
      - the reward job's carry that no cycle reads any more (pipelines.rewards.carry): done cycles' before this one
      - the reward table's windows older than `rewards.retention_s` before the earliest cut a cycle still to train
        reads back from, and the reward job's dead letters of the same cycles (pipelines.rewards.table_retention;
        `reward_windows` gives each window's cut from the ledger, else from the reward job's manifest)
      - the A/B store's per-user sums and latency histograms of cycles before the newest `ab.keep_cycle_frames`,
        folded into its running totals (pipelines.metrics.store, `prune_frames`); every result.json stays
      - the gate's and the data-quality reports older than the newest `gate.keep_reports` / `quality.keep_reports`,
        thinned to their report.json (the gate runs' copies in MLflow too); the per-checkpoint caches the gates
        reuse, bounded to `gate.keep_cached_versions` checkpoints each (infra.retention.stores)
      - the step logs (<state_dir>/orchestrator/logs/<cycle id>) of finished cycles older than the last
        `orchestrator.keep_cycles` (`old_cycles`); failed and stuck cycles keep theirs
      - the logs over `orchestrator.log_max_bytes`, rotated (`rotate_logs`)
    rotate_logs(cfg)                        also at every cadence tick (infra.orchestrator.definitions)
    (the Dagster runs of the same old cycles: definitions.prune_runs, when the cadence starts a new cycle)

Each part reads a bounded set: the carry folders and step-log folders there are (a few, since they are pruned), the
reward windows within retention and their cycles' records, never the whole ledger; the report folders are listed
(one small folder per gate or cycle). A part that fails is logged and skipped: the cycle has ended already, and the
part runs again after the next one. Nothing a cycle in flight reads is removed: its reward window and the windows
its training reaches back to, its quality report, and (by recency) its gate's champion's and anchor's kept
measurements.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Callable

from infra.orchestrator.ledger import BLOCKED, DONE, CycleRecord, Ledger

FINISHED = (DONE, BLOCKED)


def step_logs_root(cfg) -> Path:
    return cfg.state_path / "orchestrator" / "logs"


def old_cycles(records: dict[str, CycleRecord | None], latest_seq: int, keep_cycles: int) -> list[str]:
    """Of `records` (a name -> the record of the cycle of that id, None: not a cycle, e.g. the demo's own logs),
    those whose traces (step logs, Dagster runs) go when the latest cycle has sequence number `latest_seq`: finished
    cycles at least `keep_cycles` cycles older."""
    return sorted(name for name, rec in records.items()
                  if rec is not None and rec.status in FINISHED and rec.seq <= latest_seq - keep_cycles)


def prune_step_logs(cfg, ledger: Ledger, latest: CycleRecord) -> list[str]:
    """Remove the step logs of the cycles `old_cycles` names; their cycle ids."""
    import shutil

    root = step_logs_root(cfg)
    if not root.is_dir():
        return []
    folders = {p.name: record_of(ledger, p.name) for p in root.iterdir() if p.is_dir()}
    gone = old_cycles(folders, latest.seq, cfg.orchestrator.keep_cycles)
    for name in gone:
        shutil.rmtree(root / name, ignore_errors=True)
    return gone


def record_of(ledger: Ledger, name: str) -> CycleRecord | None:
    """The ledger's record of cycle `name`; None when there is none or the name is no cycle id."""
    try:
        return ledger.load(name)
    except ValueError:        # not a cycle id
        return None


def rotate_logs(cfg) -> list[str]:
    """Rotate the logs over `orchestrator.log_max_bytes` (infra.stack.logs): the stack's processes'
    (<state_dir>/logs/*.log), the step logs (<state_dir>/orchestrator/logs/**/*.log) and the cadence's decisions
    (<state_dir>/orchestrator/cadence.jsonl). The paths rotated, relative to the state dir."""
    from infra.stack.logs import rotate, rotate_all

    o, state = cfg.orchestrator, cfg.state_path
    out = [f"logs/{p}" for p in rotate_all(state / "logs", o.log_max_bytes, o.log_keep)]
    out += [f"orchestrator/logs/{p}" for p in rotate_all(step_logs_root(cfg), o.log_max_bytes, o.log_keep)]
    if rotate(state / "orchestrator" / "cadence.jsonl", o.log_max_bytes, o.log_keep):
        out.append("orchestrator/cadence.jsonl")
    return out


def prune_carry(cfg, rec: CycleRecord) -> list[str]:
    """The reward job's carries nothing reads once `rec`'s reward cycle is done (traffic from Kafka only: the
    files source keeps no carry)."""
    if cfg.orchestrator.source != "kafka":
        return []
    from pipelines.rewards.carry import prune_carries
    from pipelines.rewards.cycle_store import CycleStore

    return prune_carries(CycleStore(cfg.rewards_root()), rec.cycle_id)


def _instant(text: str | None):
    from datetime import datetime

    return datetime.fromisoformat(text) if text else None


def reward_windows(cfg, ledger: Ledger, labels) -> list:
    """A `WindowInfo` (pipelines.rewards.table_retention) for each window label of the reward table that has a cut
    on record, and for the ledger's latest cycle (which may have no window yet): the ledger's record of the cycle
    (its collect step's cut), else the reward job's manifest (a cycle run by `rtrl rewards --cycle`), else a
    streaming run's hour. A window with none is left out: kept."""
    from pipelines.rewards.cycle_store import CycleStore
    from pipelines.rewards.table_retention import WindowInfo, hour_window

    store = CycleStore(cfg.rewards_root())
    latest = ledger.latest()
    out = []
    for label in sorted(set(labels) | ({latest.cycle_id} if latest is not None else set())):
        rec = record_of(ledger, label)
        if rec is not None:
            c = rec.result("collect")
            out.append(WindowInfo(label, _instant(c.get("as_of")), _instant(c.get("after")), rec.status in FINISHED))
        elif (m := store.load(label)) is not None:
            out.append(WindowInfo(label, _instant(m.as_of), _instant(m.after), m.status == "done"))
        elif (w := hour_window(label)) is not None:
            out.append(w)
    return out


def prune_reward_table(cfg, ledger: Ledger) -> list[str]:
    """Remove the reward table's windows `rewards.retention_s` expires (pipelines.rewards.table_retention), and the
    reward job's dead letters of the same cycles (<rewards>/dead_letter/<cycle id>.parquet, by the same rule); their
    labels."""
    from pipelines.rewards.table_retention import delete_windows, expired_windows, table_windows
    from schemas import storage

    if cfg.rewards.retention_s <= 0:
        return []
    table = cfg.reward_table()
    partitions = table_windows(table)
    letters = {f.rel.removesuffix(".parquet"): f.loc for f in storage.list_files(
        storage.join(cfg.rewards_root(), "dead_letter"), "*.parquet", recursive=False)}
    if not partitions and not letters:
        return []
    gone = expired_windows(reward_windows(cfg, ledger, set(partitions) | set(letters)), cfg.rewards.retention_s)
    delete_windows(table, partitions, gone)
    for label in gone:
        if label in letters:
            storage.delete(letters[label])
    return gone


def prune_ab_frames(cfg) -> list[str]:
    """Fold the A/B frames of cycles before the newest `ab.keep_cycle_frames` into the running totals; their ids."""
    from pipelines.metrics.store import MetricsStore

    return MetricsStore.for_state_dir(cfg.state_path).prune_frames(cfg.ab.keep_cycle_frames)


def in_flight(ledger: Ledger) -> Callable[[set[str]], set[str]]:
    """Of these names, the ids of cycles neither done nor blocked (running, or failed and to be resumed)."""
    def flying(names: set[str]) -> set[str]:
        return {n for n in names if (r := record_of(ledger, n)) is not None and r.status not in FINISHED}
    return flying


def thin_reports(cfg, ledger: Ledger) -> list[str]:
    """The gate's and the data-quality reports older than the newest `gate.keep_reports` / `quality.keep_reports`,
    thinned to their report.json (infra.retention.stores); the folders thinned, relative to the state dir."""
    from infra.retention.stores import aliased_versions, thin_gate_reports, thin_gate_runs, thin_quality_reports
    from registry.client import Registry

    state = cfg.state_path
    aliased = functools.cache(lambda: aliased_versions(cfg))    # read once, and only when something is to thin
    out = [f"gate/{n}" for n in thin_gate_reports(state, cfg.gate.keep_reports, aliased)]
    out += [f"mlflow gate run {r}" for r in thin_gate_runs(Registry.from_config(cfg), cfg.gate.experiment,
                                                            cfg.gate.keep_reports, aliased)]
    return out + [f"quality/{n}" for n in thin_quality_reports(state, cfg.quality.keep_reports, in_flight(ledger))]


def evict_gate_caches(cfg) -> list[str]:
    from infra.retention.stores import evict_gate_caches as evict

    return evict(cfg, cfg.gate.keep_cached_versions)


def after_cycle(cfg, ledger: Ledger, rec: CycleRecord, log: Callable[[str], None]) -> dict[str, list[str]]:
    """Clean up after cycle `rec` ended (see the module docstring): {part: what was removed or rotated}."""
    parts = {"carry_removed": lambda: prune_carry(cfg, rec),
             "reward_windows_removed": lambda: prune_reward_table(cfg, ledger),
             "ab_frames_folded": lambda: prune_ab_frames(cfg),
             "reports_thinned": lambda: thin_reports(cfg, ledger),
             "gate_cache_evicted": lambda: evict_gate_caches(cfg),
             "step_logs_removed": lambda: prune_step_logs(cfg, ledger, rec),
             "logs_rotated": lambda: rotate_logs(cfg)}
    out: dict[str, list[str]] = {}
    for part, run in parts.items():
        try:
            out[part] = run()
        except Exception as e:  # noqa: BLE001 -- the cycle has ended: a clean-up that failed is retried next cycle
            log(f"housekeeping: {part.replace('_', ' ')} failed: {type(e).__name__}: {e}")
            continue
        if out[part]:
            log(f"housekeeping: {part.replace('_', ' ')}: {', '.join(out[part])}")
    return out
