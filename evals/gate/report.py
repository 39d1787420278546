"""The gate's report: JSON (the `GateResult`), Markdown and HTML with the per-metric table and its intervals, the
per-category breakdown, what the suite could detect, and the worst regressions (tasks the champion resolved and
the candidate did not) with both arms' transcripts. Transcripts are model output: every string is escaped (HTML)
or fenced (Markdown), never interpreted.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any, Iterable

from evals.gate.decision import GateResult, Regression
from evals.records import Episode

MAX_MESSAGE_CHARS = 4000


def _md_cell(text: str) -> str:
    """Text from the data inside Markdown prose or a table: no raw HTML (Markdown renders tags, so `<` and `&`
    become entities), pipes escaped, one line."""
    text = str(text).replace("&", "&amp;").replace("<", "&lt;")
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _num(x: float | None, signed: bool = False, pct: bool = False) -> str:
    if x is None:
        return "n/a"
    if pct:
        return f"{x:+.1%}" if signed else f"{x:.1%}"
    return f"{x:+.4f}" if signed else f"{x:.4g}"


def metric_rows(result: GateResult) -> list[dict[str, str]]:
    """One row per metric (resolved rate first, then each guardrail), formatted for both tables."""
    rows = []
    p = result.primary
    if p is not None:
        rows.append({"metric": "resolved rate (primary)", "candidate": _num(p.candidate_rate, pct=True),
                     "champion": _num(p.champion_rate, pct=True), "difference": _num(p.difference, True, True),
                     "interval": f"[{_num(p.lower, True, True)}, {_num(p.upper, True, True)}]",
                     "rule": f"lower > −{p.margin:.1%}", "p": f"{p.p_noninferior:.3g}",
                     "verdict": p.verdict.replace("_", "-"), "ok": p.verdict == "non_inferior"})
    for g in result.guardrails:
        rate = g.unit == "rate"
        fmt = (lambda v, s=False: _num(v, s, pct=True)) if rate else (lambda v, s=False: _num(v, s))
        rule = (f"lower ≤ +{g.margin:.1%}" if g.worse_when == "higher" else f"upper ≥ −{g.margin:.1%}")
        rows.append({"metric": f"{g.name} ({g.worse_when} is worse)", "candidate": fmt(g.candidate),
                     "champion": fmt(g.champion), "difference": _num(g.difference, True, True),
                     "interval": f"[{_num(g.lower, True, True)}, {_num(g.upper, True, True)}]", "rule": rule,
                     "p": f"{g.p_worse:.3g}", "verdict": "holds" if g.passed else "TRIPPED", "ok": g.passed})
    return rows


def _headline(result: GateResult) -> str:
    if result.promote:
        return "PROMOTE: the candidate is non-inferior on resolved rate and every guardrail holds."
    return "KEEP CHAMPION: " + ", ".join(result.reasons) + "."


def _facts(result: GateResult, meta: dict[str, Any] | None) -> list[tuple[str, str]]:
    c = result.counts
    facts = [(k, str(v)) for k, v in (meta or {}).items()]
    facts += [("candidate versions", ", ".join(result.candidate_versions) or "?"),
              ("champion versions", ", ".join(result.champion_versions) or "?"),
              ("valid pairs", f"{c.valid_pairs} from {c.tasks} tasks (of {c.keys} task×sample keys)"),
              ("dropped", f"{c.dropped_infra} infrastructure failures, {c.unpaired} unpaired "
                          f"({c.dropped_rate:.1%}; limit {result.config.get('max_infra_failure_rate')})")]
    if result.primary is not None:
        p = result.primary
        facts.append(("McNemar (exact, pairs as independent)",
                      f"{p.candidate_only} candidate-only vs {p.champion_only} champion-only resolved; "
                      f"p two-sided {p.mcnemar_p:.3g}, p candidate worse {p.mcnemar_p_worse:.3g}"))
        facts.append(("interval", f"{p.interval_level:.0%} two-sided = one-sided {p.confidence:.0%} bounds; "
                                  f"{p.method}"))
    if result.design is not None:
        d = result.design
        need = "more than 10^6" if d.tasks_needed is None else str(d.tasks_needed)
        facts.append(("suite power", f"an equal candidate passes with probability {d.power_at_equal:.0%} on this "
                                     f"suite (discordant rate {d.discordant_rate:.2f}, ICC {d.icc:.2f}, K "
                                     f"{d.samples_per_task}); {need} tasks give {d.target_power:.0%}"))
    return facts


def _message_text(m: dict[str, Any]) -> tuple[str, str]:
    """(header, body) of one transcript message, the body cut at MAX_MESSAGE_CHARS."""
    head = str(m.get("role", "?")) + (f" ({m['name']})" if m.get("name") else "")
    content = m.get("content")
    body = content if isinstance(content, str) else ("" if content is None else json.dumps(content, indent=1))
    extra = {k: v for k, v in m.items() if k not in ("role", "name", "content")}
    if extra:
        body += ("\n" if body else "") + json.dumps(extra, indent=1, default=str)
    if len(body) > MAX_MESSAGE_CHARS:
        body = body[:MAX_MESSAGE_CHARS] + f"\n… ({len(body) - MAX_MESSAGE_CHARS} more characters)"
    return head, body


def _fence(body: str) -> str:
    longest = max((len(r) for r in re.findall(r"`+", body)), default=0)
    return "`" * max(3, longest + 1)


def _shown(result: GateResult, episodes: Iterable[Episode]) -> list[tuple[Regression, Episode | None,
                                                                          Episode | None]]:
    """The worst regressions to show, with the candidate's and champion's episode of the first lost sample."""
    shown = result.regressions[: int(result.config.get("report_regressions", 10))]
    want = {(r.task_id, r.lost[0]) for r in shown}
    found: dict[tuple[str, int, str], Episode] = {}
    for e in episodes:
        if (e.task_id, e.sample) in want:
            found[(e.task_id, e.sample, e.arm)] = e
    return [(r, found.get((r.task_id, r.lost[0], "candidate")), found.get((r.task_id, r.lost[0], "champion")))
            for r in shown]


def to_markdown(result: GateResult, episodes: Iterable[Episode] = (), meta: dict[str, Any] | None = None) -> str:
    lines = ["# Evaluation gate", "", f"**{_headline(result)}**", ""]
    lines += [f"- {_md_cell(k)}: {_md_cell(v)}" for k, v in _facts(result, meta)] + [""]
    lines += ["## Metrics (candidate − champion)", "",
              "| metric | candidate | champion | difference | interval | passes when | p (one-sided) | verdict |",
              "|---|---|---|---|---|---|---|---|"]
    for r in metric_rows(result):
        lines.append("| " + " | ".join(_md_cell(r[k]) for k in ("metric", "candidate", "champion", "difference",
                                                                    "interval", "rule", "p", "verdict")) + " |")
    lines += ["", "## Resolved rate by category", "", "| category | pairs | tasks | candidate | champion | "
              "difference | interval |", "|---|---|---|---|---|---|---|"]
    for c in result.categories:
        iv = "n/a" if c.lower is None else f"[{_num(c.lower, True, True)}, {_num(c.upper, True, True)}]"
        lines.append(f"| {_md_cell(c.category or '(none)')} | {c.pairs} | {c.tasks} | "
                     f"{_num(c.candidate_rate, pct=True)} | {_num(c.champion_rate, pct=True)} | "
                     f"{_num(c.difference, True, True)} | {iv} |")
    lines += ["", f"## Worst regressions ({len(result.regressions)} tasks the champion resolved on a sample where "
                  "the candidate did not)", ""]
    for r, cand, champ in _shown(result, episodes):
        lines += [f"### {_md_cell(r.task_id)} ({_md_cell(r.category or 'no category')})", "",
                  f"lost samples {r.lost}, gained samples {r.gained}; transcripts of sample {r.lost[0]}", ""]
        for label, ep in (("candidate (not resolved)", cand), ("champion (resolved)", champ)):
            lines += [f"<details><summary>{html.escape(label)}</summary>", ""]
            if ep is None or not ep.transcript:
                lines += ["(no transcript)", ""]
            for m in (ep.transcript if ep else []):
                head, body = _message_text(m)
                f = _fence(body)
                lines += [f"**{_md_cell(head)}**", "", f, body, f, ""]
            lines += ["</details>", ""]
    return "\n".join(lines)


_CSS = """
body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:80em}
table{border-collapse:collapse;margin-bottom:2em;width:100%}
th,td{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top;font-size:14px}
th{background:#f3f3f3} tr.bad td{background:#fdecea} .promote{color:#1a7f37;font-weight:bold}
.keep{color:#b42318;font-weight:bold} pre{background:#f7f7f7;padding:6px;white-space:pre-wrap;font-size:12px}
.role{font-weight:bold;font-size:12px;margin-top:6px}
"""


def to_html(result: GateResult, episodes: Iterable[Episode] = (), meta: dict[str, Any] | None = None) -> str:
    esc = html.escape
    out = ["<!doctype html><html><head><meta charset='utf-8'><title>rtrl evaluation gate</title>",
           f"<style>{_CSS}</style></head><body><h1>Evaluation gate</h1>",
           f"<p class='{'promote' if result.promote else 'keep'}'>{esc(_headline(result))}</p>",
           "<ul>" + "".join(f"<li>{esc(k)}: {esc(v)}</li>" for k, v in _facts(result, meta)) + "</ul>",
           "<h2>Metrics (candidate − champion)</h2><table><tr><th>metric</th><th>candidate</th><th>champion</th>"
           "<th>difference</th><th>interval</th><th>passes when</th><th>p (one-sided)</th><th>verdict</th></tr>"]
    for r in metric_rows(result):
        cells = "".join(f"<td>{esc(r[k])}</td>" for k in ("metric", "candidate", "champion", "difference",
                                                          "interval", "rule", "p", "verdict"))
        out.append(f"<tr class='{'' if r['ok'] else 'bad'}'>{cells}</tr>")
    out.append("</table><h2>Resolved rate by category</h2><table><tr><th>category</th><th>pairs</th><th>tasks</th>"
               "<th>candidate</th><th>champion</th><th>difference</th><th>interval</th></tr>")
    for c in result.categories:
        iv = "n/a" if c.lower is None else f"[{_num(c.lower, True, True)}, {_num(c.upper, True, True)}]"
        out.append(f"<tr><td>{esc(c.category or '(none)')}</td><td>{c.pairs}</td><td>{c.tasks}</td>"
                   f"<td>{_num(c.candidate_rate, pct=True)}</td><td>{_num(c.champion_rate, pct=True)}</td>"
                   f"<td>{_num(c.difference, True, True)}</td><td>{esc(iv)}</td></tr>")
    out.append(f"</table><h2>Worst regressions</h2><p>{len(result.regressions)} tasks the champion resolved on a "
               "sample where the candidate did not.</p>")
    for r, cand, champ in _shown(result, episodes):
        out.append(f"<h3>{esc(r.task_id)} <small>({esc(r.category or 'no category')})</small></h3>"
                   f"<p>lost samples {esc(str(r.lost))}, gained samples {esc(str(r.gained))}; transcripts of "
                   f"sample {r.lost[0]}</p>")
        for label, ep in (("candidate (not resolved)", cand), ("champion (resolved)", champ)):
            out.append(f"<details><summary>{esc(label)}</summary>")
            if ep is None or not ep.transcript:
                out.append("<p>(no transcript)</p>")
            for m in (ep.transcript if ep else []):
                head, body = _message_text(m)
                out.append(f"<div class='role'>{esc(head)}</div><pre>{esc(body)}</pre>")
            out.append("</details>")
    out.append("</body></html>")
    return "\n".join(out)


def to_json(result: GateResult, meta: dict[str, Any] | None = None) -> str:
    return json.dumps({**(meta or {}), **result.to_dict()}, indent=2, allow_nan=False, default=str)


def write_report(result: GateResult, episodes: Iterable[Episode], directory: str | Path,
                 meta: dict[str, Any] | None = None) -> dict[str, Path]:
    """Write report.json, report.md and report.html into `directory` (created); return their paths. `meta` (e.g.
    candidate and champion versions, suite name) is listed at the top of each."""
    episodes = list(episodes)
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    paths = {"json": d / "report.json", "md": d / "report.md", "html": d / "report.html"}
    paths["json"].write_text(to_json(result, meta))
    paths["md"].write_text(to_markdown(result, episodes, meta))
    paths["html"].write_text(to_html(result, episodes, meta))
    return paths
