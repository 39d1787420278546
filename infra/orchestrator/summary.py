"""The demo's summary: one object per cycle from the ledger, and the A/B result, as JSON and as a table.

    s = cycle_summary(cfg, ledger.all(), window="since_first_promotion")
    print(render_table(s))

`ab` compares treatment with control on the reward rows of the cycles whose treatment arm served another
checkpoint than control, both arms from the first request treatment served with another checkpoint on
(`since_first_promotion`; before the first promotion both arms serve v0), or of the last cycle only
(`last_cycle`); `tail` adds the range after the last cycle (the demo measures it as the next cycle's first
steps): for edit persistence and dissatisfied follow-ups (and, for comparison, the persistence of shown edits
only), each arm's rate, the difference treatment − control and its 95% interval (delta method, users as the
unit: pipelines.metrics).

With `since_first_promotion`, `ab["before_promotion"]` is the same comparison on the measured rows requested
before that first request: an A/A check, both arms serving control's checkpoint. A difference there is the
arms' own imbalance (chance, or a split that favours one arm), which the A/B result after it also carries.
"""

from __future__ import annotations

from pathlib import Path

AB_METRICS = {"edit_persistence": "edit_persistence_rate", "dissatisfied_followup": "dissatisfied_followup_rate",
              # definitions 1's edit persistence (pipelines/metrics/rates.py), shown beside the others
              "shown_edit_persistence": "shown_edit_persistence_rate"}


def rows_trained(rec) -> int | None:
    """The rows a cycle's training used (None: it did not train)."""
    counts = rec.result("train").get("counts") or {}
    return (counts.get("kept_on_policy", 0) + counts.get("kept_stale", 0)
            - counts.get("dropped_over_max_rows", 0)) if counts else None


def _cycle_row(rec) -> dict:
    r = {s: rec.result(s) for s in ("collect", "distill", "measure", "train", "evaluate", "promote", "deploy")}
    gate = r["evaluate"] or {}
    promote = r["promote"] or {}
    row = {
        "cycle_id": rec.cycle_id, "status": rec.status, "error": rec.error or None,
        "started_at": rec.started_at, "wall_seconds": round((rec.finished_wall or rec.started_wall) -
                                                             rec.started_wall, 1),
        "champion_before": (r["collect"] or {}).get("champion"),
        "reward_rows": (r["distill"] or {}).get("rows"),
        "rows_trained": rows_trained(rec),
        "reward_mean": (r["train"] or {}).get("reward_mean"),
        "candidate": (r["train"] or {}).get("candidate"),
        "shipped": (r["train"] or {}).get("shipped"),      # the candidate's served weights: kind, bytes, share
        "gate_decision": gate.get("decision"), "gate_interval": gate.get("interval"),
        "gate_reasons": gate.get("reasons"),
        "promoted_version": promote.get("champion") if promote.get("promoted") else None,
        "champion_after": promote.get("champion"),
        "ab": {k: (r["measure"] or {}).get(v) for k, v in AB_METRICS.items()},
        "step_seconds": {s: v.get("seconds") for s, v in rec.steps.items()},
        "settings": list(rec.settings),
    }
    return row


def with_rows(table, records) -> tuple[list, list[str]]:
    """(the records whose cycle's reward rows are in `table`, the ids of those whose window reward table retention
    removed, `rewards.retention_s`)."""
    from pipelines.metrics import cycle_files

    kept = [r for r in records if cycle_files(table, r.cycle_id)]
    return kept, [r.cycle_id for r in records if r not in kept]


def ab_object(cfg, records, window: str) -> dict:
    """Treatment − control on the chosen cycles' reward rows (see the module docstring)."""
    import polars as pl

    from pipelines.metrics import compute_cycle_metrics, scan_cycle

    table = Path(cfg.state_path) / "rewards" / "table"
    measured, removed = with_rows(table, [r for r in records if r.result("measure").get("measured")])
    if window == "last_cycle":
        chosen = measured[-1:]
    else:
        chosen = [r for r in measured if _arms_differ(r.result("measure").get("versions") or {})]
    if not chosen:
        return {"cycles": [], "reason": "no cycle had treatment serving another checkpoint than control"
                if window != "last_cycle" else "no cycle was measured"}
    rows = pl.concat([scan_cycle(table, r.cycle_id) for r in chosen], how="vertical_relaxed")
    as_of = chosen[-1].result("collect").get("as_of")
    since, before = None, None
    if window != "last_cycle":   # both arms from the first request treatment served with another checkpoint
        control = {str(v) for r in chosen for v in (r.result("measure").get("versions") or {}).get("control") or []}
        since = (rows.filter((pl.col("arm") == cfg.ab.treatment_arm) & ~pl.col("policy_version").is_in(sorted(control)))
                 .select(pl.col("request_time").min()).collect().item())
        if since is not None:
            earlier = [scan_cycle(table, r.cycle_id) for r in measured if r not in chosen]
            before = _before_promotion(cfg, pl.concat([*earlier, rows], how="vertical_relaxed"), measured, since,
                                       as_of)
            rows = rows.filter(pl.col("request_time") >= since)
    res = compute_cycle_metrics(rows, "ab-" + chosen[-1].cycle_id, as_of=as_of, config=cfg.ab)
    out: dict = {"cycles": [r.cycle_id for r in chosen], "window": window,
                 "since": since.isoformat() if since is not None else None, **_comparison(cfg, res)}
    if removed:
        out["cycles_removed_by_retention"] = removed
    if before is not None:
        out["before_promotion"] = before
    return out


def _comparison(cfg, res) -> dict:
    """Versions, rows, users, the SRM check and, per A/B metric, both arms' rates and the difference's interval."""
    out: dict = {"versions": res.versions, "rows": res.counts.get("rows_by_arm"),
                 "users": res.counts.get("users_by_arm"),
                 "srm": {"p_value": res.srm.get("p_value"), "flagged": res.srm.get("flagged")}}
    for key, name in AB_METRICS.items():
        m = res.metric(name)
        out[key] = {"control": m.control, "treatment": m.treatment, "diff": m.absolute, "ci_low": m.abs_low,
                    "ci_high": m.abs_high, "relative": m.relative, "level": 1 - cfg.ab.alpha,
                    "n_control": m.denominator_control, "n_treatment": m.denominator_treatment}
    return out


def _before_promotion(cfg, measured_rows, measured, since, as_of) -> dict | None:
    """The A/A check: the same comparison on the measured rows (`measured_rows`, lazily, of the records
    `measured`) requested before `since` (both arms on control's checkpoint), or None when there are none."""
    import polars as pl

    from pipelines.metrics import compute_cycle_metrics

    rows = measured_rows.filter(pl.col("request_time") < since)
    if rows.select(pl.len()).collect().item() == 0:
        return None
    res = compute_cycle_metrics(rows, "aa-" + measured[-1].cycle_id, as_of=as_of, config=cfg.ab)
    return {"cycles": [r.cycle_id for r in measured], "until": since.isoformat(), **_comparison(cfg, res)}


def _arms_differ(versions: dict) -> bool:
    c, t = set(versions.get("control") or []), set(versions.get("treatment") or [])
    return bool(t - c)


def cycle_summary(cfg, records, window: str, tail=None) -> dict:
    """One row per finished cycle in `records`; the A/B over their rows and, with `tail` (the record of the next
    cycle whose first steps measured the traffic after them), over its rows too."""
    ab = ab_object(cfg, [*records, *([tail] if tail is not None else [])], window)
    if tail is not None and tail.cycle_id in ab.get("cycles", []):
        ab["tail"] = tail.cycle_id
    return {"cycles": [_cycle_row(r) for r in records], "ab": ab}


def _pct(x) -> str:
    return "—" if x is None else f"{100 * x:.1f}%"


def _pp(x) -> str:
    return "—" if x is None else f"{100 * x:+.1f}"


def _shipped(x: dict | None) -> str:
    """A candidate's shipped served weights: "delta 1.2 MB (31%)", "anchor 8.0 MB", or — (none shipped)."""
    if not x:
        return "—"
    size = f"{x['bytes'] / 1e6:.1f} MB"
    return f"delta {size} ({100 * x['share']:.0f}%)" if x["kind"] == "delta" and x.get("share") else \
        f"{x['kind']} {size}"


def render_table(summary: dict) -> str:
    lines = ["cycle  status   rows  trained  reward   gate            interval                      promoted  "
             "persist c/t       dissat c/t     shipped"]
    for c in summary["cycles"]:
        ab = c.get("ab") or {}
        ep, df = ab.get("edit_persistence") or {}, ab.get("dissatisfied_followup") or {}
        reward = "—" if c["reward_mean"] is None else f"{c['reward_mean']:+.3f}"
        lines.append(f"{c['cycle_id']:<6} {c['status']:<8} {c['reward_rows'] or 0:>5} {c['rows_trained'] or 0:>8}  "
                     f"{reward:>7}  {(c['gate_decision'] or '—'):<15} {str(c['gate_interval'] or '—')[:28]:<29} "
                     f"{c['promoted_version'] or '—':>8}  {_pct(ep.get('control'))}/{_pct(ep.get('treatment')):<8} "
                     f"{_pct(df.get('control'))}/{_pct(df.get('treatment')):<8} {_shipped(c.get('shipped'))}")
    ab = summary["ab"]
    if ab.get("cycles"):
        lines.append("")
        tail = f" (the range after the last cycle, measured as {ab['tail']}'s first steps)" if ab.get("tail") else ""
        lines.append(f"A/B, treatment − control ({ab['window']}: cycles {', '.join(ab['cycles'])}{tail}; versions "
                     f"control {ab['versions'].get('control')}, treatment {ab['versions'].get('treatment')}; "
                     f"rows {ab['rows']}):")
        lines += _metric_lines(ab)
        if (aa := ab.get("before_promotion")) is not None:
            lines.append(f"A/A check before the first promotion (both arms on control's checkpoint: control "
                         f"{aa['versions'].get('control')}, treatment {aa['versions'].get('treatment')}; rows "
                         f"{aa['rows']}):")
            lines += _metric_lines(aa)
    else:
        lines.append(f"\nA/B: {ab.get('reason')}")
    if "long_loop" in summary or "ab_by_org" in summary or "ab_by_org_reason" in summary:   # --specialize, long loops
        from infra.orchestrator.specialize_summary import render_specialization

        lines += ["", *render_specialization(summary)]
    return "\n".join(lines)


def _metric_lines(comparison: dict) -> list[str]:
    out = []
    for key in AB_METRICS:
        m = comparison[key]
        out.append(f"  {key:<22} control {_pct(m['control'])}  treatment {_pct(m['treatment'])}  "
                   f"diff {_pp(m['diff'])} pp  95% CI [{_pp(m['ci_low'])}, {_pp(m['ci_high'])}] pp")
    return out
