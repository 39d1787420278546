"""The gate report (JSON, Markdown, HTML) and its MLflow record: metrics with intervals, categories, worst
regressions with escaped transcripts, a run with the report and the decision tagged on the candidate version."""

import json

import pytest

from evals.gate import TasksGateConfig, decide
from evals.gate.report import write_report
from evals.gate.tracking import log_to_mlflow
from evals.records import Episode

HOSTILE = "<script>alert('x')</script> ``` fence | pipe"


def episodes(cand_version="2", champ_version="1"):
    """20 tasks x 2 samples; the candidate loses task t000 on both samples and every transcript is hostile."""
    eps = []
    for t in range(20):
        for s in range(2):
            for arm, v in (("candidate", cand_version), ("champion", champ_version)):
                resolved = not (arm == "candidate" and t == 0)
                eps.append(Episode(f"t{t:03d}", s, arm, category=f"cat{t % 2}", resolved=resolved, edited=True,
                                   completion_tokens=100, policy_version=v,
                                   transcript=[{"role": "user", "content": f"{arm} task {t}: {HOSTILE}"},
                                               {"role": "assistant", "content": None,
                                                "tool_calls": [{"function": {"name": "edit_file",
                                                                             "arguments": HOSTILE}}]}]))
    return eps


CFG = TasksGateConfig(min_pairs=10, min_tasks=5, bootstrap_resamples=100)


def test_report_files_have_every_metric_category_and_the_worst_regression(tmp_path):
    eps = episodes()
    result = decide(eps, CFG)
    paths = write_report(result, eps, tmp_path / "r", meta={"candidate_version": "2"})
    doc = json.loads(paths["json"].read_text())
    assert doc["candidate_version"] == "2" and doc["decision"] == result.decision
    md, page = paths["md"].read_text(), paths["html"].read_text()
    for name in ("resolved rate", "broken_tool_calls", "edit_rate", "needless_questions",
                 "median_completion_tokens", "cat0", "cat1", "t000"):
        assert name in md and name in page
    p = result.primary
    assert f"[{p.lower:+.1%}, {p.upper:+.1%}]" in md
    assert "candidate task 0" in md and "champion task 0" in md      # both transcripts of the lost sample


def test_transcripts_cannot_inject_markup(tmp_path):
    eps = episodes()
    paths = write_report(decide(eps, CFG), eps, tmp_path)
    page = paths["html"].read_text()
    assert "<script>" not in page and "&lt;script&gt;" in page
    md = paths["md"].read_text()
    assert "\n````\n" in md                       # a fence longer than the ``` inside the transcript
    in_fences, fence = [], None
    for line in md.splitlines():                  # every <script> of the Markdown sits inside a code fence
        if fence is None and line.startswith("```"):
            fence = line
        elif fence is not None and line == fence:
            fence = None
        elif "<script>" in line:
            in_fences.append(fence is not None)
    assert in_fences and all(in_fences)


@pytest.fixture
def registry(tmp_path):
    from registry.client import Registry

    reg = Registry(f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path / "artifacts", "policy", tmp_path / "cache")
    for marker in ("one", "two"):
        d = tmp_path / marker
        d.mkdir()
        (d / "config.json").write_text(json.dumps({"marker": marker}))
        reg.register(d)
    return reg


def test_log_to_mlflow_records_the_run_and_tags_the_candidate_version(tmp_path, registry):
    eps = episodes()
    result = decide(eps, CFG)
    write_report(result, eps, tmp_path / "report")
    run_id = log_to_mlflow(result, tmp_path / "report", registry, candidate_version="2", champion_version="1")
    run = registry.client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert run.data.params["margin"] == "0.05" and run.data.params["champion_version"] == "1"
    assert run.data.metrics["resolved.lower"] == pytest.approx(result.primary.lower)
    assert run.data.metrics["promote"] == (1.0 if result.promote else 0.0)
    assert {a.path for a in registry.client.list_artifacts(run_id, "report")} == {
        "report/report.json", "report/report.md", "report/report.html"}
    tags = registry.info("2").tags
    assert tags["gate.decision"] == result.decision and tags["gate.run_id"] == run_id
    assert tags["gate.champion_version"] == "1"
    assert tags["gate.interval"] == f"[{result.primary.lower:+.4f}, {result.primary.upper:+.4f}]"
    assert tags["gate.time"].endswith("+00:00")
    assert registry.client.get_experiment(run.info.experiment_id).name == "rtrl-gate"


def test_log_to_mlflow_refuses_versions_the_episodes_contradict(tmp_path, registry):
    result = decide(episodes(champ_version="7"), CFG)
    with pytest.raises(ValueError, match="champion version '1'"):
        log_to_mlflow(result, tmp_path, registry, candidate_version="2", champion_version="1")
    assert "gate.decision" not in registry.info("2").tags
