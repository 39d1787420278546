"""What the orchestrator removes as cycles go by, so that its state does not grow with them:

    after_cycle(cfg, ledger, rec, log)     after a cycle ended (done or blocked), in the executor that ran its last step
      - the reward job's carry that no cycle reads any more (pipelines.rewards.carry): done cycles' before this one
      - the step logs (<state_dir>/orchestrator/logs/<cycle id>) of finished cycles older than the last
        `orchestrator.keep_cycles` (`old_cycles`); failed and stuck cycles keep theirs
      - the logs over `orchestrator.log_max_bytes`, rotated (`rotate_logs`)
    rotate_logs(cfg)                        also at every cadence tick (infra.orchestrator.definitions)
    (the Dagster runs of the same old cycles: definitions.prune_runs, when the cadence starts a new cycle)

Each part reads a bounded set: the carry folders and step-log folders there are (a few, since they are pruned) and
their cycles' records, never the whole ledger. A part that fails is logged and skipped: the cycle has ended already.
"""

from __future__ import annotations

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


def after_cycle(cfg, ledger: Ledger, rec: CycleRecord, log: Callable[[str], None]) -> dict[str, list[str]]:
    """Clean up after cycle `rec` ended (see the module docstring): {part: what was removed or rotated}."""
    parts = {"carry_removed": lambda: prune_carry(cfg, rec),
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
