"""What `rtrl demo --specialize` adds to the summary (docs/orchestrator.md):

    ab_by_org         per org, specialized − shared (the `specialized` arm against `treatment`) on edit
                      persistence: {diff, ci_low, ci_high, seq_low, seq_high (always valid), srm_flagged, srm_p,
                      specialized, shared, users, versions: the org's adapter versions that served its specialized
                      arm; [] = none (both arms served the shared champion: the change is noise around 0)}
    orgs_won, orgs_specialized   orgs with a change above 0; orgs that an adapter of their own served
    ab_by_org_pooled  {diff, ci_low, ci_high, seq_low, seq_high, orgs}: the inverse-variance pooled change
                      (pipelines/metrics/by_org.py)
    ab_by_org_pooled_specialized, orgs_won_specialized   the same over the orgs in orgs_specialized alone: in
                      the others both arms served the shared champion, and their change is the split's noise

and, with background tasks on (`simulator.background_rate` > 0: `--specialize`, or any demo that sets it),
`long_loop_summary`:

    long_loop         {control, treatment, diff, ci_low, ci_high, since, ...}: the background-task acceptance rate
                      per arm (pipelines/metrics/long_loop.py)

The per-org comparison takes the rows requested since the first request an org's specialized version served (before
it, both arms serve the shared champion); the long loop takes the tasks started in the A/B table's window (since the
first request treatment served with a checkpoint of its own; every task when there was none).
"""

from __future__ import annotations

from pathlib import Path

SPECIALIZED, SHARED = "specialized", "treatment"


def specialization_summary(cfg, records) -> dict:
    import polars as pl

    from infra.orchestrator.summary import with_rows
    from pipelines.metrics import scan_cycle
    from pipelines.metrics.by_org import by_org, wins
    from pipelines.metrics.rates import INPUT_COLUMNS, unit_stats

    table = Path(cfg.state_path) / "rewards" / "table"
    measured, _ = with_rows(table, [r for r in records if r.result("measure").get("measured")])
    out: dict = {"specialized_cycles": [r.cycle_id for r in records
                                        if any(o.get("promoted") for o in
                                               (r.result("specialize").get("orgs") or {}).values())]}
    if measured:
        rows = pl.concat([scan_cycle(table, r.cycle_id) for r in measured], how="vertical_relaxed")
        adapter = pl.col("policy_version").str.contains("@", literal=True)   # `<version>@<org>`: an adapter
        since = (rows.filter(adapter)
                 .select(pl.col("request_time").min()).collect().item())
        if since is not None:
            window = rows.filter(pl.col("request_time") >= since)
            served = dict(window.filter((pl.col("arm") == SPECIALIZED) & adapter)
                          .group_by("org_id").agg(pl.col("policy_version").unique().sort()).collect().iter_rows())
            units = unit_stats(window.select(INPUT_COLUMNS)).collect()
            shares = {a.name: a.share for a in cfg.serving.arms if a.name in (SHARED, SPECIALIZED)}
            options = {"base": SHARED, "arm": SPECIALIZED, "alpha": cfg.ab.alpha, "tau": cfg.ab.sequential_tau,
                       "shares": shares if len(shares) == 2 else None, "srm_threshold": cfg.ab.srm_p_threshold}
            result = by_org(units, "edit_persistence_rate", **options)
            # the orgs an adapter served: in the others both arms served the shared champion, and their change is
            # the user split's noise (a few pp at a few dozen users per arm), not specialization
            specialized = by_org(units.filter(pl.col("org_id").is_in(sorted(served))), "edit_persistence_rate",
                                 **options)
            out["ab_by_org"] = {org: {"diff": c["diff"], "ci_low": c["ci_low"], "ci_high": c["ci_high"],
                                      "seq_low": c.get("seq_low"), "seq_high": c.get("seq_high"),
                                      "srm_flagged": (c.get("srm") or {}).get("flagged"),
                                      "srm_p": (c.get("srm") or {}).get("p_value"),
                                      "specialized": c["arm"], "shared": c["base"], "users": c["users"],
                                      "versions": served.get(org, [])}
                                for org, c in result["orgs"].items()}
            out["ab_by_org_pooled"] = result["pooled"]
            out["ab_by_org_since"] = since.isoformat()
            out["orgs_won"] = wins(result)
            out["orgs_specialized"] = sorted(served)
            out["ab_by_org_pooled_specialized"] = specialized["pooled"]
            out["orgs_won_specialized"] = wins(specialized)
        else:
            out["ab_by_org_reason"] = "no request was served by an org's specialized version"
    return out


def long_loop_summary(cfg, since: str | None = None) -> dict:
    """{"long_loop": the background-task acceptance rate of control and treatment}, over the tasks started at
    `since` (ISO time: the A/B table's window, `ab["since"]`) or later; every task when None."""
    from datetime import datetime

    from pipelines.metrics.long_loop import acceptance
    from schemas.reward_table import outcome_table, read_outcome_table, read_reward_table

    table = Path(cfg.state_path) / "rewards" / "table"
    outcomes = read_outcome_table(outcome_table(table))
    rows = read_reward_table(table).select("request_id", "request_time", "arm", "org_id", "workspace_id", "task_id")
    return {"long_loop": acceptance(outcomes, cfg.ab.control_arm, cfg.ab.treatment_arm, cfg.ab.alpha,
                                    since=datetime.fromisoformat(since) if since else None, rows=rows,
                                    srm_threshold=cfg.ab.srm_p_threshold)}


def render_specialization(summary: dict) -> list[str]:
    from infra.orchestrator.summary import _pct, _pp

    lines = []
    if "ab_by_org" in summary:
        lines.append(f"Specialized − shared, edit persistence by org (since {summary['ab_by_org_since']}):")
        for org, c in summary["ab_by_org"].items():
            lines.append(f"  {org:<8} diff {_pp(c['diff'])} pp  95% CI [{_pp(c['ci_low'])}, {_pp(c['ci_high'])}] pp"
                         f"  users {c['users']}" + ("" if c.get("versions") else "  (no adapter: shared on both)")
                         + ("  SAMPLE-RATIO MISMATCH" if c.get("srm_flagged") else ""))
        p = summary["ab_by_org_pooled"]
        lines.append(f"  pooled   diff {_pp(p['diff'])} pp  95% CI [{_pp(p['ci_low'])}, {_pp(p['ci_high'])}] pp"
                     f"  over {p['orgs']} orgs")
        q = summary.get("ab_by_org_pooled_specialized") or {}
        if q.get("orgs"):
            lines.append(f"  pooled over the {q['orgs']} orgs an adapter served: diff {_pp(q['diff'])} pp  95% CI "
                         f"[{_pp(q['ci_low'])}, {_pp(q['ci_high'])}] pp  ({summary['orgs_won_specialized']} ahead)")
    elif summary.get("ab_by_org_reason"):
        lines.append(f"Specialized − shared: {summary['ab_by_org_reason']}")
    if "long_loop" not in summary:
        return lines
    ll = summary["long_loop"] or {}
    lines.append(f"Background tasks accepted: control {_pct(ll.get('control'))}  treatment "
                 f"{_pct(ll.get('treatment'))}  diff {_pp(ll.get('diff'))} pp  95% CI [{_pp(ll.get('ci_low'))}, "
                 f"{_pp(ll.get('ci_high'))}] pp  (tasks {ll.get('tasks')}, never judged {ll.get('tasks_unknown')}"
                 + (f"; started since {ll['since']})" if ll.get("since") else ")"))
    share = ll.get("judged_share") or {}
    if share:
        lines.append("  judged of the tasks started: " + ", ".join(
            f"{arm} {ll['tasks'].get(arm, 0)}/{ll['tasks_started'][arm]}" for arm in share))
        if ll.get("judged_share_flagged"):
            lines.append(f"  WARNING: the arms' tasks were judged in different shares (p {ll['judged_share_p']:.2g}; "
                         "outcomes still to come): the judged tasks are not comparable samples, the change is biased")
    return lines
