"""`rtrl quality`: exit 0 when every suite passes, 3 when one fails, 2 on bad input; reports land in DIR."""

from __future__ import annotations

import argparse
import json

import pytest

from infra.commands.quality import main
from infra.config import load_config
from pipelines.rewards.spec import RewardSpec
from tests.unit.quality.helpers import edit, reward_frame, valid_reward_rows


def _args(**kw) -> argparse.Namespace:
    return argparse.Namespace(**{"rewards": None, "events": None, "report": None, "start": None, "end": None, **kw})


@pytest.fixture
def cfg(tmp_path):
    return load_config(None, [f"state_dir={tmp_path / 'state'}"])


@pytest.fixture
def table(tmp_path):
    path = tmp_path / "rewards.parquet"
    reward_frame(valid_reward_rows(RewardSpec())).write_parquet(path)
    return path


def test_passing_rewards_exit_0_and_write_the_report_under_the_state_dir(cfg, table, capsys):
    assert main(_args(rewards=str(table)), cfg) == 0
    reports = list((cfg.state_path / "quality").glob("*/report.json"))
    assert len(reports) == 1 and json.loads(reports[0].read_text())["success"] is True
    out = capsys.readouterr().out
    assert "rewards: PASS" in out and "ALL PASS" in out and str(reports[0].parent) in out


def test_a_failing_suite_exits_3_and_the_report_names_the_rule(cfg, table, tmp_path, capsys):
    bad = tmp_path / "bad.parquet"
    frame = reward_frame(valid_reward_rows(RewardSpec()))
    edit(frame, {"request_id": "r-0"}, mature_time=frame["request_time"][0]).write_parquet(bad)
    assert main(_args(rewards=str(bad), report=str(tmp_path / "out")), cfg) == 3
    assert "| mature_time_after_maturity_delay | FAIL |" in (tmp_path / "out" / "report.md").read_text()
    assert "FAIL mature_time_after_maturity_delay" in capsys.readouterr().out


def test_events_and_rewards_together_catch_a_privacy_mode_row(cfg, tmp_path, capsys):
    from tests.unit.archive.helpers import FakeLog, archive_all
    from tests.unit.quality.helpers import fixture_event, reward_row

    log = FakeLog(partitions=1)
    log.produce([fixture_event("trajectory", request_id="r-0").without_content()])
    archive_all(tmp_path / "archive", log)
    path = tmp_path / "rewards.parquet"
    reward_frame([reward_row(0, RewardSpec())]).write_parquet(path)
    code = main(_args(rewards=str(path), events=str(tmp_path / "archive"), report=str(tmp_path / "r")), cfg)
    assert code == 3
    doc = json.loads((tmp_path / "r" / "report.json").read_text())
    assert [s["name"] for s in doc["suites"]] == ["events", "rewards"]
    assert [s["success"] for s in doc["suites"]] == [True, False]


@pytest.mark.parametrize("kw, message", [
    ({}, "give --rewards PATH and/or --events"),
    ({"rewards": "/nonexistent/rewards.parquet"}, "does not exist"),
    ({"events": "/nonexistent/archive"}, "does not exist"),
    ({"events": ".", "start": "2026-11-01T10:00:00"}, "needs a timezone"),
])
def test_bad_input_exits_2_with_the_reason(cfg, kw, message, capsys):
    assert main(_args(**kw), cfg) == 2
    assert message in capsys.readouterr().err


def test_a_file_that_is_not_parquet_exits_2(cfg, tmp_path, capsys):
    junk = tmp_path / "junk.parquet"
    junk.write_text("not parquet")
    assert main(_args(rewards=str(junk)), cfg) == 2
    assert "rtrl quality:" in capsys.readouterr().err
