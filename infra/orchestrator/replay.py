"""Replay for data engineers (docs/rewards.md): a time range of the archived event log through the same reward job,
into a table of its own. The production table (`<state_dir>/rewards/table`) is never a replay's output: an `out`
inside it is refused, and the default is `<state_dir>/replay/<start>--<end>`.

    replay_range(cfg, "2026-11-01T00:00Z", "2026-11-01T05:00Z")     # -> {"out", "rows", ...}

The replay runs in the caller's process (`rtrl replay`'s library function), its lateness judged by the live cycles'
records under rewards_dir, as `rtrl replay` judges it by default.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Callable

from infra.orchestrator.errors import StepFailed
from pipelines.archive.layout import archive_root
from schemas import storage
from schemas.instants import parse_instant


def _instant(text: str, name: str) -> datetime:
    try:
        return parse_instant(text)
    except ValueError as e:
        raise ValueError(f"replay {name}: {e}") from None


def production_table(cfg) -> Path | str:
    return cfg.reward_table()


def output_for(cfg, start: datetime, end: datetime, out: str | None) -> Path | str:
    prod = production_table(cfg)
    if out and storage.is_remote(out):
        url = str(storage.normalize(out))
        if storage.is_remote(prod) and (url == str(prod) or url.startswith(f"{prod}/") or
                                        str(prod).startswith(f"{url}/")):
            raise ValueError(f"replay output {url} would overwrite the production reward table {prod}: choose a "
                             "separate prefix")
        return url
    if out:
        p = Path(out).expanduser().resolve()
        if isinstance(prod, Path) and (p == prod or prod in p.parents or p in prod.parents):
            raise ValueError(f"replay output {p} would overwrite the production reward table {prod}: choose a "
                             "separate folder")
        return p
    stamp = f"{start.strftime('%Y%m%dT%H%M%SZ')}--{end.strftime('%Y%m%dT%H%M%SZ')}"
    return cfg.state_path / "replay" / stamp


def replay_range(cfg, start: str, end: str, out: str | None = None, log: Callable[[str], None] = print) -> dict:
    s, e = _instant(start, "start"), _instant(end, "end")
    if e <= s:
        raise ValueError(f"replay end {end} is not after start {start}")
    target = output_for(cfg, s, e, out)
    archive = archive_root(cfg)
    if not storage.exists(archive):
        raise StepFailed(f"the event archive {archive} does not exist (is `rtrl archive` running?)")
    from infra.commands.replay import archive_problem, replay_summary

    if (problem := archive_problem(str(archive), s, e)) is not None:
        raise StepFailed(f"replay: {problem}")
    log(f"replay [{s.isoformat()}, {e.isoformat()}) from {archive} -> {target}")
    r = replay_summary(cfg, str(archive), s, e, str(target), str(cfg.rewards_root()))
    return {"out": str(target), "rows": r.get("rows"), "outcome_rows": r.get("outcome_rows"),
            "events_read": r.get("events_read"), "dead_letters": r.get("dead_letters"), "seconds": r.get("seconds")}
