"""A step command's output: every stderr line reaches the step's log and the echo, in order, and the JSON summary
comes from stdout (stderr and stdout each have one reader; a second reader of stderr used to take lines away)."""

from __future__ import annotations

import sys

import pytest

from infra.orchestrator.rtrl_cli import RtrlCli, StepFailed

NOISY = """
import json, sys
for i in range(3000):
    print(f"[gate] line {i}", file=sys.stderr, flush=True)
    if i % 500 == 0:
        print(f"stdout chatter {i}", flush=True)
print(json.dumps({"gate": {"decision": "promote"}}))
sys.exit(int(sys.argv[1]))
"""


class Script(RtrlCli):
    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-c", NOISY, *args]


@pytest.mark.integration
def test_every_stderr_line_reaches_the_log_and_the_echo_and_the_json_comes_from_stdout(tmp_path):
    echoed: list[str] = []
    code, out = Script(None, [], tmp_path, 60).run("0", step="evaluate", echo=echoed.append)
    expected = [f"[gate] line {i}" for i in range(3000)]
    assert code == 0 and out == {"gate": {"decision": "promote"}}
    assert echoed == expected
    assert (tmp_path / "evaluate.log").read_text().splitlines() == ["$ rtrl 0", *expected]


@pytest.mark.integration
def test_an_unexpected_exit_code_fails_the_step_with_the_log_tail(tmp_path):
    with pytest.raises(StepFailed, match="exited 4") as e:
        Script(None, [], tmp_path, 60).run("4", step="train")
    assert e.value.code == 4 and "[gate] line 2999" in str(e.value)
    code, out = Script(None, [], tmp_path, 60).run("3", step="evaluate", ok_codes=(0, 3))
    assert code == 3 and out["gate"]["decision"] == "promote"
