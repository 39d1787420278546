"""The alert rules (infra/monitoring/alerts.yml) load in Prometheus's own checker and pass their unit tests
(infra/monitoring/alerts_test.yml: every alert fires in one case and stays quiet in another), run by `promtool` from
the repository root. docs/alerts.md is their runbook.

promtool comes with the Debian package `prometheus`, which ./infra/setup.sh installs: without it this test fails
rather than skips, so the rules are never left untested."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration]

REPO = Path(__file__).resolve().parents[2]
RULES = "infra/monitoring/alerts.yml"
RULE_TESTS = "infra/monitoring/alerts_test.yml"


def promtool(*args: str) -> subprocess.CompletedProcess:
    exe = shutil.which("promtool")
    if exe is None:
        pytest.fail("promtool is not on PATH: ./infra/setup.sh installs it (the Debian package `prometheus`)")
    r = subprocess.run([exe, *args], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, (f"promtool {' '.join(args)} exited {r.returncode}\n--- stdout\n{r.stdout}"
                               f"\n--- stderr\n{r.stderr}")
    return r


def test_the_rules_pass_promtools_check():
    r = promtool("check", "rules", RULES)
    assert "SUCCESS" in r.stdout + r.stderr, r.stdout + r.stderr


def test_every_alert_passes_its_promtool_unit_tests():
    r = promtool("test", "rules", RULE_TESTS)
    assert "SUCCESS" in r.stdout + r.stderr, r.stdout + r.stderr
