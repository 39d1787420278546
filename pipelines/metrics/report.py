"""A cycle's A/B result as Markdown, HTML or JSON (`rtrl ab report --cycle ID --format md|html|json`).

The experiment table has the shape of Cursor's published A/B table (metric, control, treatment, change,
interval), plus the always-valid interval over every cycle so far. Every string from the data (arm, version and
org names) is escaped: HTML entities in HTML, pipes and tags neutralized in Markdown.
"""

from __future__ import annotations

import html
import json
from typing import Any

from pipelines.metrics.catalog import BY_NAME, RATIO_METRICS
from pipelines.metrics.result import CycleMetrics, MetricResult


def fmt_value(x: float | None, unit: str) -> str:
    if x is None:
        return "n/a"
    if unit == "rate":
        return f"{x:.2%}"
    if unit == "ms":
        return f"{x:,.0f} ms"
    if unit == "tokens":
        return f"{x:,.1f}"
    return f"{x:+.4f}"


def fmt_change(x: float | None, scale: str) -> str:
    if x is None:
        return "n/a"
    return f"{x:+.2%}" if scale == "relative" else f"{x:+.4f}"


def fmt_interval(low: float | None, high: float | None, scale: str) -> str:
    if low is None or high is None:
        return "n/a"
    return f"[{fmt_change(low, scale)}, {fmt_change(high, scale)}]"


VERDICT_MARK = {"better": "better", "worse": "WORSE", "changed": "changed", "inconclusive": "—"}


def table_rows(result: CycleMetrics) -> list[dict[str, str]]:
    """The experiment table, formatted: one dict per metric (also what the dashboard shows)."""
    level = f"{1 - result.alpha:.0%}"
    rows = []
    for m in result.metrics:
        rows.append({
            "metric": m.label, "control": fmt_value(m.control, m.unit), "treatment": fmt_value(m.treatment, m.unit),
            "change": fmt_change(m.change, m.scale), f"{level} interval": fmt_interval(m.low, m.high, m.scale),
            "verdict": VERDICT_MARK.get(m.verdict, m.verdict),
            "all cycles": fmt_change(m.cum_change, m.scale),
            "always-valid interval": fmt_interval(m.seq_low, m.seq_high, m.scale),
            "always-valid verdict": VERDICT_MARK.get(m.seq_verdict, m.seq_verdict),
        })
    return rows


def _md(text: Any) -> str:
    s = str(text).replace("&", "&amp;").replace("<", "&lt;")
    return s.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _md_table(rows: list[dict[str, Any]]) -> list[str]:
    if not rows:
        return ["(none)"]
    cols = list(rows[0])
    out = ["| " + " | ".join(_md(c) for c in cols) + " |", "|" + "---|" * len(cols)]
    out += ["| " + " | ".join(_md(r[c]) for c in cols) + " |" for r in rows]
    return out


def _srm_line(srm: dict[str, Any], what: str) -> str:
    if not srm:
        return f"SRM ({what}): n/a"
    obs = ", ".join(f"{a} {n:,}" for a, n in srm["observed"].items())
    flag = "**MISMATCH**: do not trust these results" if srm["flagged"] else "ok"
    return f"SRM ({what}): {flag} (users {obs}; chi2 {srm['chi2']:.3f}, p = {srm['p_value']:.3g}, " \
           f"flagged below {srm['threshold']:g})"


def _facts(r: CycleMetrics) -> list[str]:
    c = r.counts
    unk = ", ".join(f"{a} {v:.1%}" if v is not None else f"{a} n/a" for a, v in c["unknown_label_share"].items())
    versions = "; ".join(f"{a}: v{', v'.join(v) if v else '-'}" for a, v in r.versions.items())
    other = c.get("rows_other_arms") or {}
    return [f"cycle `{r.cycle_id}` (#{r.seq if r.seq is not None else '?'}), as of {r.as_of or 'every row'}",
            f"arms: control `{r.control_arm}`, treatment `{r.treatment_arm}`; checkpoints {versions}",
            f"rows used {c['rows_used']:,} of {c['rows']:,}; users {', '.join(f'{a} {n:,}' for a, n in c['users_by_arm'].items())}; "
            f"orgs {c['orgs']}",
            f"immature rows excluded (mature after as_of): {c['immature_rows_excluded']:,}; "
            f"unknown persistence labels (excluded from edit persistence): {unk}"
            + (f"; rows of other arms left out: {other}" if other else ""),
            f"cumulative over cycles: {', '.join(r.cumulative_cycles)}"]


def _threshold(v: float, relative: bool, unit: str) -> str:
    return f"{v:.0%}" if relative else _absolute(v, unit, signed=False)


def _absolute(v: float | None, unit: str, signed: bool = True) -> str:
    """An absolute change: percentage points for a rate."""
    if v is None:
        return "n/a"
    if unit == "rate":
        return f"{v * 100:+.2f} pp" if signed else f"{v * 100:.2f} pp"
    return f"{v:+.4g}" if signed else f"{v:.4g}"


def monitor_rows(r: CycleMetrics) -> list[dict[str, str]]:
    out = []
    for m in r.monitors:
        info = BY_NAME[m["metric"]]
        scale = "relative" if m["relative"] else "absolute"
        limits = [f"{word} ≤ {_threshold(m[key], m['relative'], info.unit)}"
                  for word, key in (("rise", "max_increase"), ("fall", "max_decrease")) if m[key] is not None]
        change = fmt_change(m["change"], scale) if scale == "relative" else _absolute(m["change"], info.unit)
        out.append({"monitor": info.label, "control": fmt_value(m["control"], info.unit),
                    "treatment": fmt_value(m["treatment"], info.unit), "change": change,
                    "threshold": ", ".join(limits), "status": m["status"].upper()})
    return out


def version_rows(r: CycleMetrics) -> list[dict[str, str]]:
    out = []
    for v in r.by_version:
        row = {"arm": v["arm"], "checkpoint": f"v{v['policy_version']}", "users": f"{v['users']:,}",
               "rows": f"{v['n']:,}"}
        for name in ("edit_persistence_rate", "dissatisfied_followup_rate", "latency_p50", "broken_tool_call_rate",
                     "edit_rate", "clarification_rate", "tokens_per_response"):
            row[BY_NAME[name].label] = fmt_value(v.get(name), BY_NAME[name].unit)
        row["unknown labels"] = fmt_value(v.get("unknown_label_share"), "rate")
        out.append(row)
    return out


def org_rows(r: CycleMetrics, metrics: tuple[str, ...] = RATIO_METRICS) -> list[dict[str, str]]:
    out = []
    for o in r.by_org:
        if o["metric"] not in metrics:
            continue
        info = BY_NAME[o["metric"]]
        out.append({"org": o["org_id"], "metric": info.label, "control": fmt_value(o["control"], info.unit),
                    "treatment": fmt_value(o["treatment"], info.unit), "change": fmt_change(o["change"], o["scale"]),
                    "interval": fmt_interval(o["low"], o["high"], o["scale"]),
                    "users": f"{o['users_control']:,} / {o['users_treatment']:,}"})
    return out


def _cuped_rows(r: CycleMetrics) -> list[dict[str, str]]:
    return [{"metric": m.label, "change": fmt_change(m.change, m.scale),
             "CUPED change": fmt_change(m.cuped_change, m.scale),
             "CUPED interval": fmt_interval(m.cuped_low, m.cuped_high, m.scale),
             "variance removed": fmt_value(m.cuped_variance_reduction, "rate")}
            for m in r.metrics if m.cuped_change is not None]


def to_json(result: CycleMetrics) -> str:
    return json.dumps(result.to_dict(), indent=2, allow_nan=False)


def to_markdown(result: CycleMetrics) -> str:
    r = result
    lines = [f"# A/B report: cycle {_md(r.cycle_id)}", ""]
    lines += [f"- {_md(f)}" for f in _facts(r)]
    lines += [f"- {_srm_line(r.srm, 'this cycle')}", f"- {_srm_line(r.srm_cumulative, 'all cycles')}", ""]
    lines += ["## Experiment", ""] + _md_table(table_rows(r))
    lines += ["", "Change: treatment / control − 1 (mean reward: treatment − control). Interval: this cycle, delta "
              "method with users as the unit (latency: bucket bootstrap). Always-valid: every cycle so far, an "
              "mSPRT confidence sequence that stays valid when looked at after every cycle.", ""]
    lines += ["## Reward-hacking monitors", ""] + _md_table(monitor_rows(r)) + [""]
    lines += ["## Per checkpoint", ""] + _md_table(version_rows(r)) + [""]
    cuped = _cuped_rows(r)
    if cuped:
        lines += ["## CUPED (pre-experiment covariate)", ""] + _md_table(cuped) + [""]
    lines += ["## Per org", ""] + _md_table(org_rows(r)) + [""]
    return "\n".join(lines)


_CSS = """
body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:1400px}
table{border-collapse:collapse;margin-bottom:1.5em}
th,td{border:1px solid #ccc;padding:4px 10px;text-align:left;font-size:14px}
th{background:#f3f3f3} .better{background:#e6f4ea} .worse,.red{background:#fdecea} .flag{color:#b00020;font-weight:bold}
"""


def _html_table(rows: list[dict[str, Any]], css_of=None) -> str:
    if not rows:
        return "<p>(none)</p>"
    cols = list(rows[0])
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in cols)
    body = []
    for i, r in enumerate(rows):
        cls = css_of(i, r) if css_of else ""
        body.append(f"<tr class=\"{cls}\">" + "".join(f"<td>{html.escape(str(r[c]))}</td>" for c in cols) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def to_html(result: CycleMetrics) -> str:
    r = result
    facts = "".join(f"<li>{html.escape(f)}</li>" for f in _facts(r))
    srm = "".join(f"<li class=\"{'flag' if s.get('flagged') else ''}\">{html.escape(_srm_line(s, w).replace('**', ''))}"
                  f"</li>" for s, w in ((r.srm, "this cycle"), (r.srm_cumulative, "all cycles")))
    verdicts = [m.verdict for m in r.metrics]
    exp = _html_table(table_rows(r), lambda i, _: verdicts[i] if verdicts[i] in ("better", "worse") else "")
    mons = _html_table(monitor_rows(r), lambda i, row: "red" if row["status"] == "RED" else "")
    cuped = _cuped_rows(r)
    parts = [f"<!doctype html><html><head><meta charset=\"utf-8\"><title>A/B report: cycle "
             f"{html.escape(r.cycle_id)}</title><style>{_CSS}</style></head><body>",
             f"<h1>A/B report: cycle {html.escape(r.cycle_id)}</h1><ul>{facts}{srm}</ul>",
             f"<h2>Experiment</h2>{exp}",
             "<p>Change: treatment / control − 1 (mean reward: treatment − control). Interval: this cycle (delta "
             "method, users as the unit; latency: bucket bootstrap). Always-valid: every cycle so far (mSPRT "
             "confidence sequence).</p>",
             f"<h2>Reward-hacking monitors</h2>{mons}",
             f"<h2>Per checkpoint</h2>{_html_table(version_rows(r))}"]
    if cuped:
        parts.append(f"<h2>CUPED (pre-experiment covariate)</h2>{_html_table(cuped)}")
    parts.append(f"<h2>Per org</h2>{_html_table(org_rows(r))}</body></html>")
    return "".join(parts)


def render(result: CycleMetrics, fmt: str) -> str:
    if fmt == "json":
        return to_json(result)
    if fmt in ("md", "markdown"):
        return to_markdown(result)
    if fmt == "html":
        return to_html(result)
    raise ValueError(f"unknown report format {fmt!r} (md, html or json)")


__all__ = ["to_json", "to_markdown", "to_html", "render", "table_rows", "monitor_rows", "version_rows",
           "org_rows", "fmt_value", "fmt_change", "fmt_interval", "MetricResult"]
