"""What the dashboard shows, read from files under the state dir and from the MLflow registry (no Streamlit here,
so every reader is testable on its own). The per-cycle readers read a bounded recent window (`last`, `limit`:
the app passes `dashboard.max_cycles`, more on demand), so a render costs the same after a year of cycles as
after a week: the newest files are chosen by listing and modification time, and only they are read.

    <state>/ab/cycles/<id>/result.json             A/B results per cycle (pipelines/metrics/store.py)
    <state>/rewards/cycles/<id>.json               reward-cycle manifests: range, as_of, counters, dead letters
    <archive>/_checkpoints/ + the names under _manifests/   the archiver's committed offsets (for lag)
    <state>/quality/**/report.json                 data-quality results (pipelines/quality/report.py)
    <state>/gate/*/report.json                     gate reports (evals/gate/report.py)
    MLflow registry                                versions, their tags (parent, cycle, gate.*, promotion.*), aliases
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from pipelines.metrics.store import MetricsStore


def _json(p: Path) -> dict | None:
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # half-written or damaged: skipped, the next refresh reads it


def has_any_data(state: Path) -> bool:
    return bool(MetricsStore.for_state_dir(state).cycles()) or any((state / "rewards" / "cycles").glob("*.json"))


def demo_state_hint(state: Path) -> Path | None:
    """`rtrl demo` works in <state>/demo: point there when this state dir is empty and that one is not."""
    d = state / "demo"
    return d if d.is_dir() and has_any_data(d) else None


# --- reward cycles: pipeline health ------------------------------------------------------------------------------

COUNTERS = ("events_read", "duplicates_dropped", "rows_emitted", "requests_pending", "unknown_labels",
            "late_requests", "late_events")


def newest(paths, last: int | None) -> list[Path]:
    """The `last` most recently modified of `paths` (None: all), oldest first; only their metadata is read."""
    dated = []
    for p in paths:
        try:
            dated.append((p.stat().st_mtime_ns, str(p), p))
        except OSError:
            continue    # removed since it was listed
    dated.sort()
    return [p for _, _, p in (dated if last is None else dated[-last:] if last > 0 else [])]


def reward_cycles(state: Path, last: int | None = None) -> list[dict[str, Any]]:
    """Reward-cycle manifests, in order (seq): id, status, as_of, records in range, rows, counters, dead letters.
    `last`: only the most recently written `last` manifests are read."""
    out = []
    for p in newest((state / "rewards" / "cycles").glob("*.json"), last):
        m = _json(p)
        if not m or "cycle_id" not in m:
            continue
        counters = m.get("counters") or {}
        row = {"cycle_id": m["cycle_id"], "seq": m.get("seq", 0), "status": m.get("status", "?"),
               "as_of": m.get("as_of"), "records_in_range": (m.get("range") or {}).get("records", 0),
               "rows": sum(int(n) for _, n in (m.get("partitions") or [])),
               "stop": (m.get("range") or {}).get("stop", {}), "cluster_id": (m.get("range") or {}).get("cluster_id"),
               **{k: int(counters.get(k, 0)) for k in COUNTERS},
               "dead_letters": {k.removeprefix("dead_letter_"): int(v) for k, v in counters.items()
                                if k.startswith("dead_letter_")}}
        out.append(row)
    return sorted(out, key=lambda r: (r["seq"], r["cycle_id"]))


def health_frame(cycles: list[dict[str, Any]]) -> pl.DataFrame:
    """One row per reward cycle with the health numbers the dashboard charts."""
    rows = []
    for c in cycles:
        emitted = c["rows_emitted"]
        dl = sum(c["dead_letters"].values())
        labelled = emitted  # every emitted row carries a label; unknown ones are the join's misses
        rows.append({"cycle_id": c["cycle_id"], "seq": c["seq"], "status": c["status"], "as_of": c["as_of"],
                     "events_read": c["events_read"], "rows": emitted, "dead_letters": dl,
                     "duplicates_dropped": c["duplicates_dropped"], "requests_pending": c["requests_pending"],
                     "late_events": c["late_events"], "late_requests": c["late_requests"],
                     "unknown_labels": c["unknown_labels"],
                     "unknown_label_share": c["unknown_labels"] / labelled if labelled else None,
                     "join_completeness": 1 - c["unknown_labels"] / labelled if labelled else None,
                     "duplicate_share": c["duplicates_dropped"] / c["events_read"] if c["events_read"] else None})
    schema = {"cycle_id": pl.String, "seq": pl.Int64, "status": pl.String, "as_of": pl.String,
              "events_read": pl.Int64, "rows": pl.Int64, "dead_letters": pl.Int64, "duplicates_dropped": pl.Int64,
              "requests_pending": pl.Int64, "late_events": pl.Int64, "late_requests": pl.Int64,
              "unknown_labels": pl.Int64, "unknown_label_share": pl.Float64, "join_completeness": pl.Float64,
              "duplicate_share": pl.Float64}
    return pl.DataFrame(rows, schema=schema)


def dead_letters_frame(cycles: list[dict[str, Any]]) -> pl.DataFrame:
    """Long frame: cycle_id, seq, reason, count."""
    rows = [{"cycle_id": c["cycle_id"], "seq": c["seq"], "reason": k, "count": v}
            for c in cycles for k, v in sorted(c["dead_letters"].items())]
    return pl.DataFrame(rows, schema={"cycle_id": pl.String, "seq": pl.Int64, "reason": pl.String,
                                      "count": pl.Int64})


def consumer_lag(archive_root: Path | str, cycles: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Records the archiver has committed but no reward cycle has read yet, per partition: the archiver's next
    offset (from its checkpoint and the names of the manifests after it, same Kafka cluster) minus the latest done
    cycle's range end. None without both. `archive_root` is a local folder or an object-store URL
    (`schemas.storage`)."""
    from pipelines.archive.state import archived_positions

    done = [c for c in cycles if c["status"] == "done" and c["stop"]]
    if not done:
        return None
    last = done[-1]
    positions = archived_positions(archive_root, last.get("cluster_id") or None)
    if not positions:
        return None
    per = {k: max(0, pos - int(last["stop"].get(k, 0))) for k, pos in sorted(positions.items())}
    return {"cycle_id": last["cycle_id"], "total": sum(per.values()), "partitions": per}


# --- data quality --------------------------------------------------------------------------------------------------

def quality_runs(state: Path, limit: int = 50) -> list[dict[str, Any]]:
    """Data-quality reports, newest first: where, pass/fail, each suite's failed rules (the newest `limit`
    reports are read)."""
    out = []
    for p in newest((state / "quality").rglob("report.json"), limit):
        d = _json(p)
        if not d or "suites" not in d:
            continue
        suites = [{"suite": s.get("name"), "success": bool(s.get("success")), "rows": s.get("row_count"),
                   "failed_rules": [r.get("rule") for r in s.get("results", []) if not r.get("success")]}
                  for s in d["suites"]]
        out.append({"run": str(p.parent.relative_to(state / "quality")), "mtime": p.stat().st_mtime,
                    "success": bool(d.get("success")), "suites": suites})
    return sorted(out, key=lambda r: -r["mtime"])[:limit]


# --- gate and lineage ----------------------------------------------------------------------------------------------

def gate_reports(state: Path, limit: int | None = None) -> list[dict[str, Any]]:
    """Gate reports (report.json under <state>/gate/*/), newest first (only the newest `limit` are read)."""
    out = []
    for p in newest((state / "gate").glob("*/report.json"), limit):
        d = _json(p)
        if not d or "decision" not in d:
            continue
        prim = d.get("primary") or {}
        out.append({"run": p.parent.name, "mtime": p.stat().st_mtime, "candidate": str(d.get("candidate_version", "?")),
                    "champion": str(d.get("champion_version", "?")), "decision": d["decision"],
                    "reasons": ", ".join(d.get("reasons") or []), "difference": prim.get("difference"),
                    "lower": prim.get("lower"), "upper": prim.get("upper"),
                    "candidate_rate": prim.get("candidate_rate"), "champion_rate": prim.get("champion_rate"),
                    # retention (gate.keep_reports) leaves an older report its report.json only
                    "report": str(p.parent / "report.html") if (p.parent / "report.html").is_file() else str(p)})
    return sorted(out, key=lambda r: -r["mtime"])


@dataclass
class Lineage:
    versions: list[dict[str, Any]]           # version, parent, cycle, kind, gate decision/run, promoted, run links
    aliases: dict[str, str]                  # alias -> version
    error: str | None = None


def _no_store(tracking_uri: str) -> bool:
    """A local MLflow store that does not exist yet (nothing registered: not an error to show)."""
    return tracking_uri.startswith("sqlite:///") and not Path(tracking_uri.removeprefix("sqlite:///")).exists()


def registry_lineage(cfg, mlflow_ui: str, org: str | None = None) -> Lineage:
    """Every version of the registered model (with `org`: that org's specialized lineage) with its lineage tags,
    gate decisions and links to its MLflow runs."""
    db = cfg.mlflow_tracking_uri()
    if _no_store(db):
        return Lineage([], {}, "no MLflow store yet")
    try:
        from mlflow.exceptions import MlflowException
        from mlflow.tracking import MlflowClient

        from registry.client import org_model

        client = MlflowClient(tracking_uri=db, registry_uri=db)
        model = cfg.mlflow.registered_model if org is None else org_model(cfg.mlflow.registered_model, org)
        try:
            aliases = {a: str(v) for a, v in (client.get_registered_model(model).aliases or {}).items()}
        except MlflowException:
            return Lineage([], {}, f"no registered model {model!r} yet (run `rtrl bootstrap` or `rtrl demo`)")
        exp_of: dict[str, str] = {}

        def link(run_id: str | None) -> str | None:
            if not run_id:
                return None
            if run_id not in exp_of:
                try:
                    exp_of[run_id] = client.get_run(run_id).info.experiment_id
                except MlflowException:
                    return None
            return f"{mlflow_ui.rstrip('/')}/#/experiments/{exp_of[run_id]}/runs/{run_id}"

        versions = []
        for mv in client.search_model_versions(f"name = '{model}'"):
            t = dict(mv.tags or {})
            v = {"version": str(mv.version), "parent": t.get("parent") or None, "cycle": t.get("cycle", ""),
                 "kind": t.get("kind") or ("candidate" if t.get("candidate") == "true" else ""),
                 "gate": t.get("gate.decision", ""), "gate_interval": t.get("gate.interval", ""),
                 "gate_reasons": t.get("gate.reasons", ""), "promoted": t.get("promotion.time", ""),
                 "aliases": ", ".join(sorted(a for a, x in aliases.items() if x == str(mv.version))),
                 "reward_mean": t.get("reward_mean", ""), "rows": t.get("rows", ""),
                 "run": link(mv.run_id), "train_run": link(t.get("train_run")),
                 "gate_run": link(t.get("gate.run_id")), "created": mv.creation_timestamp}
            if org is not None:      # an adapter: the shared version it is over, and its second suite's decision
                v |= {"over": t.get("lora_base", ""), "org_suite": t.get("gate.org_suite.decision", ""),
                      "org_suite_interval": t.get("gate.org_suite.interval", "")}
            versions.append(v)
        versions.sort(key=lambda v: int(v["version"]) if v["version"].isdigit() else 0)
        return Lineage(versions, aliases)
    except Exception as e:  # noqa: BLE001 -- a broken or locked store must not take the whole dashboard down
        return Lineage([], {}, f"MLflow registry unavailable: {type(e).__name__}: {e}")


def org_lineages(cfg, mlflow_ui: str) -> dict[str, Lineage]:
    """Each org's specialized lineage (`registry_lineage(org=...)`), for the orgs the registry has one for."""
    if _no_store(cfg.mlflow_tracking_uri()):
        return {}
    try:
        from registry.client import Registry

        orgs = Registry.from_config(cfg).orgs()
    except Exception:  # noqa: BLE001 -- as registry_lineage: the page shows the shared lineage's error
        return {}
    return {org: registry_lineage(cfg, mlflow_ui, org) for org in orgs}


def lineage_dot(lineage: Lineage) -> str:
    """Graphviz DOT of parent -> child versions, coloured by gate decision, champion/control marked."""
    lines = ["digraph lineage {", "rankdir=LR;", 'node [shape=box, style="rounded,filled", fontname="sans-serif"];']
    for v in lineage.versions:
        color = {"promote": "#c8e6c9", "keep_champion": "#ffcdd2"}.get(v["gate"], "#eeeeee")
        label = f"v{v['version']}" + (f"\\n{v['cycle']}" if v["cycle"] else "") + (
            f"\\n[{v['aliases']}]" if v["aliases"] else "")
        pen = "3" if "champion" in v["aliases"] else "1"
        lines.append(f'"v{v["version"]}" [label="{_dot(label)}", fillcolor="{color}", penwidth={pen}];')
    for v in lineage.versions:
        if v["parent"]:
            lines.append(f'"v{_dot(v["parent"])}" -> "v{v["version"]}";')
    lines.append("}")
    return "\n".join(lines)


def _dot(s: str) -> str:
    return str(s).replace('"', "'")
