"""The progress line of long commands and the reward job's summary shape."""

import io

import pytest

from infra.commands.rewards import _line, summarize
from infra.progress import ProgressLine
from pipelines.rewards import progress
from tests.waiting import wait_for


def test_progress_line_prints_plain_lines_when_not_a_terminal_and_the_final_state_once():
    out = io.StringIO()
    state = {"n": 0}
    with ProgressLine(lambda s: f"done {state['n']}", stream=out, every_s=0.05):
        for n in (1, 2, 3):
            state["n"] = n
            wait_for(lambda: f"done {n}" in out.getvalue().splitlines(), 10, f"a periodic line saying done {n}",
                     interval_s=0.01)
    lines = out.getvalue().splitlines()
    assert lines[-1] == "done 3" and lines == sorted(lines) and "\r" not in out.getvalue()


def test_summary_groups_dead_letters_by_reason_and_fills_missing_counters_with_zero():
    s = summarize({"events_read": 10, "dead_letter_invalid_json": 2, "dead_letter_invalid_field": 1,
                   "rows_emitted": 4})
    assert s["dead_letters"] == {"invalid_field": 1, "invalid_json": 2}
    assert s["events_read"] == 10 and s["rows_emitted"] == 4 and s["late_events"] == 0 and s["requests_pending"] == 0


@pytest.fixture
def counters():
    """The reward job's process-wide progress counters, empty for the test and again after it."""
    progress.reset()
    yield progress
    progress.reset()


def test_progress_line_shows_read_share_when_the_total_is_known(counters):
    progress.put("events_total", 200)
    progress.add("events_read", 50)
    progress.add("rows_emitted", 7)
    assert _line("rewards c1", 3.2) == "rewards c1 · events 50/200 (25%) · rows 7 · 3s"
    progress.reset()
    progress.put("range_records", 1234)
    assert "fixing the offset range: 1,234 records" in _line("rewards c1", 0)
