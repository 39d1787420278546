"""Data-quality reports: `SuiteResult`s -> Markdown, HTML and JSON (one table per suite: rule, status, observed,
unexpected examples), and a one-screen text summary for the terminal.

A report folder is a storage location (`schemas.storage`): a local folder or an object-store URL
(`s3://bucket/quality/<run>`). Each file is written atomically (a reader sees a whole report file or none), and
`read_report` reads report.json back from either."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any, Sequence

from pipelines.quality.result import RuleResult, SuiteResult, all_passed
from schemas import storage

STATUS_MARK = {"pass": "PASS", "fail": "FAIL", "error": "ERROR"}


def _example_text(r: RuleResult) -> list[str]:
    return [json.dumps(e, default=str, separators=(", ", ": ")) for e in r.unexpected_examples]


def _md_cell(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def to_json(results: Sequence[SuiteResult], meta: dict[str, Any] | None = None) -> str:
    doc = {"success": all_passed(list(results)), **(meta or {}), "suites": [s.to_dict() for s in results]}
    return json.dumps(doc, indent=2, default=str)


def _suite_line(s: SuiteResult) -> str:
    failed = len(s.failed)
    verdict = "PASS" if s.success else f"FAIL ({failed} of {len(s.results)} rules)"
    return f"{s.name}: {verdict}, {s.row_count} rows, {len(s.results)} rules, {s.seconds:.2f} s"


def to_markdown(results: Sequence[SuiteResult], meta: dict[str, Any] | None = None) -> str:
    ok = all_passed(list(results))
    lines = ["# Data-quality report", "",
             f"**{'PASS' if ok else 'FAIL'}**: " + ("every suite passed." if ok else
                                                    "training must not use this data."), ""]
    for k, v in (meta or {}).items():
        lines.append(f"- {k}: `{v}`")
    if meta:
        lines.append("")
    for s in results:
        lines += [f"## {s.name}: {'PASS' if s.success else 'FAIL'}", "", _suite_line(s), "",
                  "| rule | status | observed | unexpected examples |", "|---|---|---|---|"]
        for r in s.results:
            lines.append(f"| {_md_cell(r.rule)} | {STATUS_MARK[r.status]} | {_md_cell(r.observed)} | "
                         f"{_md_cell('; '.join(_example_text(r)))} |")
        lines += ["", "<details><summary>rules</summary>", ""]
        lines += [f"- `{r.rule}` ({r.expectation}): {r.description}" for r in s.results]
        lines += ["", "</details>", ""]
    return "\n".join(lines)


_CSS = """
body{font-family:system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin-bottom:2em;width:100%}
th,td{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top;font-size:14px}
th{background:#f3f3f3} tr.fail td,tr.error td{background:#fdecea} .pass{color:#1a7f37;font-weight:bold}
.fail,.error{color:#b42318;font-weight:bold} code{font-size:12px} .desc{color:#666;font-size:12px}
"""


def to_html(results: Sequence[SuiteResult], meta: dict[str, Any] | None = None) -> str:
    esc = html.escape
    ok = all_passed(list(results))
    out = ["<!doctype html><html><head><meta charset='utf-8'><title>rtrl data-quality report</title>",
           f"<style>{_CSS}</style></head><body>", "<h1>Data-quality report</h1>",
           f"<p class='{'pass' if ok else 'fail'}'>{'PASS' if ok else 'FAIL'}: "
           f"{'every suite passed.' if ok else 'training must not use this data.'}</p>"]
    if meta:
        out.append("<ul>" + "".join(f"<li>{esc(str(k))}: <code>{esc(str(v))}</code></li>" for k, v in meta.items())
                   + "</ul>")
    for s in results:
        status = "pass" if s.success else "fail"
        out += [f"<h2>{esc(s.name)}: <span class='{status}'>{status.upper()}</span></h2>",
                f"<p>{esc(_suite_line(s))}</p>",
                "<table><tr><th>rule</th><th>status</th><th>observed</th><th>unexpected examples</th></tr>"]
        for r in s.results:
            examples = "<br>".join(f"<code>{esc(t)}</code>" for t in _example_text(r))
            out.append(f"<tr class='{r.status}'><td><b>{esc(r.rule)}</b><div class='desc'>{esc(r.description)}"
                       f"</div></td><td class='{r.status}'>{STATUS_MARK[r.status]}</td><td>{esc(r.observed)}</td>"
                       f"<td>{examples}</td></tr>")
        out.append("</table>")
    out.append("</body></html>")
    return "\n".join(out)


def summary(results: Sequence[SuiteResult], max_failures: int = 8) -> str:
    """A few lines for the terminal: a verdict per suite and its failing rules with one example each."""
    lines = []
    for s in results:
        lines.append(_suite_line(s))
        for r in s.failed[:max_failures]:
            example = f"  e.g. {_example_text(r)[0]}" if r.unexpected_examples else ""
            lines.append(f"  {STATUS_MARK[r.status]} {r.rule}: {r.observed}{example}"[:200])
        if len(s.failed) > max_failures:
            lines.append(f"  ... and {len(s.failed) - max_failures} more failing rules (see the report)")
    lines.append("ALL PASS" if all_passed(list(results)) else "FAILED: training on this data is blocked")
    return "\n".join(lines)


REPORT_FILES = {"md": "report.md", "html": "report.html", "json": "report.json"}


def write_report(results: Sequence[SuiteResult], directory: str | Path, meta: dict[str, Any] | None = None
                 ) -> dict[str, Path | str]:
    """Write report.md, report.html and report.json into `directory` (a local folder, created, or an object-store
    URL), each atomically; return their locations (a `Path` each for a local folder, URL strings otherwise).
    report.json goes last: a reader that finds it finds the other two."""
    d = storage.normalize(directory)
    paths = {kind: storage.join(d, name) for kind, name in REPORT_FILES.items()}
    storage.write_text(paths["md"], to_markdown(results, meta))
    storage.write_text(paths["html"], to_html(results, meta))
    storage.write_text(paths["json"], to_json(results, meta))
    return paths


def read_report(directory: str | Path) -> dict[str, Any]:
    """The report.json of a report folder (local or object store) as written by `write_report`; its `suites` are
    `SuiteResult.to_dict()`s. FileNotFoundError when there is none."""
    return json.loads(storage.read_text(storage.join(directory, REPORT_FILES["json"])))
