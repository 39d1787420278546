"""Reports: Markdown, HTML and JSON name every rule with its status, observed value and failing examples."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from pipelines.quality import SuiteResult, check_rewards, summary, write_report
from pipelines.rewards.spec import RewardSpec
from tests.unit.quality.helpers import edit, reward_frame, valid_reward_rows

SPEC = RewardSpec()


def _failing() -> SuiteResult:
    frame = reward_frame(valid_reward_rows(SPEC))
    return check_rewards(edit(frame, {"request_id": "r-2"}, reward=1.5, spec_version=None), SPEC,
                         privacy_request_ids=["r-4"])


def test_report_files_are_written_and_name_the_failing_rules(tmp_path):
    result = _failing()
    paths = write_report([result], tmp_path / "q", meta={"rewards": "t.parquet"})
    assert {p.name for p in (tmp_path / "q").iterdir()} == {"report.md", "report.html", "report.json"}
    md, page = paths["md"].read_text(), paths["html"].read_text()
    for rule in ("reward_equals_clipped_reward_unclipped", "spec_version_not_null", "not_a_privacy_mode_request"):
        assert f"| {rule} | FAIL |" in md
        assert f"<tr class='fail'><td><b>{rule}</b>" in page
    assert "| reward_within_clip | PASS |" in md
    assert '"request_id": "r-2"' in md and "&quot;request_id&quot;: &quot;r-4&quot;" in page
    assert md.startswith("# Data-quality report\n\n**FAIL**")
    doc = json.loads(paths["json"].read_text())
    assert doc["success"] is False and doc["rewards"] == "t.parquet"
    assert SuiteResult.from_dict(doc["suites"][0]) == result


def test_a_passing_report_says_pass(tmp_path):
    result = check_rewards(reward_frame(valid_reward_rows(SPEC)), SPEC)
    paths = write_report([result], tmp_path)
    assert "**PASS**" in paths["md"].read_text() and "| FAIL |" not in paths["md"].read_text()
    assert json.loads(paths["json"].read_text())["success"] is True
    assert summary([result]).endswith("ALL PASS")


def test_html_escapes_values_from_the_data(tmp_path):
    frame = reward_frame(valid_reward_rows(SPEC)).with_columns(pl.lit("<script>x</script>").alias("request_id"))
    paths = write_report([check_rewards(frame, SPEC)], tmp_path)
    page = paths["html"].read_text()
    assert "<script>" not in page and "&lt;script&gt;" in page


def test_summary_lists_each_failing_rule_with_an_example():
    text = summary([_failing()])
    assert text.splitlines()[0].startswith("rewards: FAIL (3 of ")
    assert "FAIL not_a_privacy_mode_request: 1 of 5 rows" in text and '"r-4"' in text
    assert text.endswith("FAILED: training on this data is blocked")


def test_a_report_folder_is_a_storage_location_written_atomically_and_read_back(tmp_path, monkeypatch):
    import os

    from pipelines.quality import read_report

    result = _failing()
    replaced = []
    real_replace = os.replace
    monkeypatch.setattr(os, "replace", lambda a, b: (replaced.append((Path(a).name, Path(b).name)),
                                                     real_replace(a, b)))
    paths = write_report([result], f"file://{tmp_path}/q", meta={"rewards": "t.parquet"})
    assert paths["json"] == tmp_path / "q" / "report.json"
    # every file went through a temp file renamed over its name (schemas.storage's atomic write), report.json last
    assert [b for _, b in replaced] == ["report.md", "report.html", "report.json"]
    assert all(a.startswith(".tmp-") for a, _ in replaced)
    assert sorted(p.name for p in (tmp_path / "q").iterdir()) == ["report.html", "report.json", "report.md"]
    doc = read_report(tmp_path / "q")
    assert doc["success"] is False and SuiteResult.from_dict(doc["suites"][0]) == result
    with pytest.raises(FileNotFoundError):
        read_report(tmp_path / "none")
