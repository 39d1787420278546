"""The flaky-task check quarantines tasks whose tests judge the reference solution inconsistently, or whose
fail_to_pass / pass_to_pass split is wrong, and keeps sound tasks."""

from __future__ import annotations

import pytest

from evals.tasks import load_task
from evals.tasks.flaky import check_flaky, check_flaky_cached, flaky_reason
from evals.tasks.generate import generate_suite
from evals.tasks.grade import GradeResult
from tests.unit.evals.task_folders import TOML, needs_bwrap, write_task

F2P, P2P, P2P2 = ("tests/test_calc.py::test_add_adds", "tests/test_calc.py::test_sub_subtracts",
                  "tests/test_calc.py::CalcCase::test_mul")


def _g(**outcomes) -> GradeResult:
    ids = {"f": F2P, "p": P2P, "q": P2P2}
    out = {ids[k]: v for k, v in outcomes.items()}
    return GradeResult("user-1", all(v == "passed" for v in out.values()), out)


GOOD_BEFORE, GOOD_AFTER = _g(f="failed", p="passed", q="passed"), _g(f="passed", p="passed", q="passed")


def test_consistent_sound_task_is_kept(user_task_dir):
    assert flaky_reason(load_task(user_task_dir), [GOOD_BEFORE] * 3, [GOOD_AFTER] * 3) is None


@pytest.mark.parametrize("before,after,why", [
    ([GOOD_BEFORE] * 3, [GOOD_AFTER, _g(f="failed", p="passed", q="passed"), GOOD_AFTER], "changed outcome"),
    ([GOOD_BEFORE, _g(f="failed", p="failed", q="passed"), GOOD_BEFORE], [GOOD_AFTER] * 3, "changed outcome"),
    ([_g(f="passed", p="passed", q="passed")] * 3, [GOOD_AFTER] * 3, "passes on the snapshot"),
    ([_g(f="failed", p="error", q="passed")] * 3, [GOOD_AFTER] * 3, "does not pass on the snapshot"),
    ([GOOD_BEFORE] * 3, [_g(f="passed", p="passed", q="missing")] * 3, "does not pass on the reference solution"),
])
def test_inconsistent_or_mis_specified_outcomes_are_quarantined(user_task_dir, before, after, why):
    assert why in flaky_reason(load_task(user_task_dir), before, after)


def test_infrastructure_failure_while_checking_quarantines(user_task_dir):
    broken = GradeResult("user-1", False, infra_error="bwrap missing")
    assert "failed: bwrap missing" in flaky_reason(load_task(user_task_dir), [broken] * 3, [GOOD_AFTER] * 3)


def test_runs_below_two_cannot_see_flakiness(user_task_dir):
    with pytest.raises(ValueError):
        check_flaky([load_task(user_task_dir)], runs=1)


@pytest.mark.integration
@needs_bwrap
def test_check_quarantines_random_and_mis_specified_tasks_and_keeps_sound_ones(tmp_path):
    good = generate_suite(tmp_path / "gen", 4, seed=11)
    # Eight coin-flip tests graded six times: the task escapes only if all 48 flips pass (probability 2**-48).
    coins = "".join(f"\n\ndef test_coin_{i}():\n    assert random.random() < 0.5\n" for i in range(8))
    random_tests = "import random\n\nimport calc\n\n\ndef test_add_adds():\n    assert calc.add(2, 3) == 5\n" + coins
    random_toml = TOML.replace('id = "user-1"', 'id = "coin-flips"').replace(
        'pass_to_pass = ["tests/test_calc.py::test_sub_subtracts", "tests/test_calc.py::CalcCase::test_mul"]',
        "pass_to_pass = [" + ", ".join(f'"tests/test_calc.py::test_coin_{i}"' for i in range(8)) + "]")
    flaky = load_task(write_task(tmp_path / "bad", "coin", toml=random_toml, tests=random_tests))
    no_f2p_toml = (TOML.replace('id = "user-1"', 'id = "already-passing"')
                   .replace("test_add_adds", "test_sub_subtracts", 1)
                   .replace('pass_to_pass = ["tests/test_calc.py::test_sub_subtracts", ', "pass_to_pass = ["))
    passing = load_task(write_task(tmp_path / "bad", "passing", toml=no_f2p_toml))
    unsolved = load_task(write_task(tmp_path / "bad", "unsolved", toml=TOML.replace("user-1", "no-solution"),
                                    solution=False))
    sound = load_task(write_task(tmp_path / "bad", "sound"))
    quarantined = check_flaky([*good, flaky, passing, unsolved, sound], runs=3)
    assert set(quarantined) == {"coin-flips", "already-passing", "no-solution"}
    assert "passes on the snapshot" in quarantined["already-passing"]
    assert "no reference solution" in quarantined["no-solution"]


@pytest.mark.integration
@needs_bwrap
def test_cached_verdicts_are_reused_until_a_task_changes(tmp_path):
    sound = load_task(write_task(tmp_path / "suite", "sound"))
    unsolved = load_task(write_task(tmp_path / "suite", "unsolved", toml=TOML.replace("user-1", "no-solution"),
                                    solution=False))
    cache = tmp_path / "suite" / ".flaky-cache.json"
    first, graded = check_flaky_cached([sound, unsolved], 2, cache)
    assert graded == 2 and set(first) == {"no-solution"} and cache.exists()
    again, graded = check_flaky_cached([sound, unsolved], 2, cache)
    assert graded == 0 and again == first
    assert check_flaky_cached([sound, unsolved], 3, cache)[1] == 2       # other runs: other verdicts
    (sound.dir / "tests" / "test_calc.py").write_text("def test_add_adds():\n    assert False\n")
    changed, graded = check_flaky_cached([load_task(sound.dir), unsolved], 2, cache)
    assert graded == 1 and set(changed) == {"user-1", "no-solution"}
