"""The demo's machine split and the replay output guard: plain functions, no services."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from infra.config import render_overrides
from infra.orchestrator.demo import Demo, core_settings
from infra.orchestrator.replay import output_for
from tests.conftest import make_config


@pytest.mark.parametrize("cores, expected", [
    (None, []), (1, []),
    (2, ['serving.cpu_cores="0"', 'gate.tasks.engine_cpu_cores="1"', 'serving.spare_cpu_cores="1"']),
    (3, ['serving.cpu_cores="0"', 'gate.tasks.engine_cpu_cores="1-2"', 'serving.spare_cpu_cores="1-2"']),
    (8, ['serving.cpu_cores="0-3"', 'gate.tasks.engine_cpu_cores="4-7"', 'serving.spare_cpu_cores="4-7"']),
])
def test_serving_and_gate_engines_get_disjoint_cores(cores, expected):
    assert render_overrides(core_settings(cores)) == expected


def test_every_core_split_is_a_valid_config(tmp_path):
    cfg = make_config(tmp_path, *render_overrides(core_settings(8)))
    assert (cfg.serving.cpu_cores, cfg.gate.tasks.engine_cpu_cores, cfg.serving.spare_cpu_cores) == \
        ("0-3", "4-7", "4-7")


T0, T1 = datetime(2026, 11, 1, tzinfo=timezone.utc), datetime(2026, 11, 1, 5, tzinfo=timezone.utc)


@pytest.mark.parametrize("inside", ["rewards/table", "rewards/table/policy_version=1", "rewards"])
def test_a_replay_never_writes_into_the_production_table(tmp_path, inside):
    cfg = make_config(tmp_path)
    with pytest.raises(ValueError, match="production reward table"):
        output_for(cfg, T0, T1, str(cfg.state_path / inside))


def test_a_replay_defaults_to_its_own_folder_named_by_the_range(tmp_path):
    cfg = make_config(tmp_path)
    assert output_for(cfg, T0, T1, None) == cfg.state_path / "replay" / "20261101T000000Z--20261101T050000Z"
    assert output_for(cfg, T0, T1, str(tmp_path / "mine")) == (tmp_path / "mine").resolve()


def test_the_demo_gates_on_a_suite_kept_outside_its_fresh_state_dir(tmp_path):
    from evals.gate_run import default_suite

    demo = Demo(make_config(tmp_path), None, [f'state_dir="{tmp_path}"'], log=lambda m: None)
    suite = demo.cfg.gate.tasks.suite_dir
    assert suite.startswith(str(tmp_path / "eval-suites")) and not suite.startswith(str(demo.state))
    demo.ensure_suite()
    assert str(default_suite(demo.cfg.model_copy(update={"state_dir": str(tmp_path)}))) == suite


def test_the_specialized_demo_keeps_each_orgs_suite_outside_its_fresh_state_dir(tmp_path):
    given = [f'state_dir="{tmp_path}"', "gate.tasks.org_suite_tasks=2"]
    demo = Demo(make_config(tmp_path), None, given, log=lambda m: None, specialize=True)
    suites = demo.org_suites()
    assert sorted(suites) == ["o0", "o1", "o2", "o3"]
    assert all(p.parent == tmp_path / "eval-suites" and p.name.startswith(f"org-{o}-") for o, p in suites.items())
    assert Demo(make_config(tmp_path), None, given, log=lambda m: None).org_suites() == {}   # the plain demo


def test_the_demo_pace_slows_each_user_so_more_users_make_the_same_load(tmp_path):
    given = ["demo.pace=0.25", "simulator.start_spread_s=600"]
    base = make_config(tmp_path, *given)
    cfg = Demo(base, None, given, log=lambda _: None).cfg
    assert cfg.simulator.think_s == pytest.approx([x * 4 for x in base.simulator.think_s])
    assert cfg.simulator.session_gap_s == pytest.approx([x * 4 for x in base.simulator.session_gap_s])
    assert cfg.simulator.start_spread_s == 600


def test_a_resumed_demo_goes_on_from_where_the_last_ones_simulated_time_stood(tmp_path):
    from datetime import timedelta

    from infra.orchestrator.clock import AcceleratedClock, clock_path
    from infra.orchestrator.demo import RESUME_MARGIN_S
    from infra.orchestrator.ledger import CycleRecord, Ledger

    demo = Demo(make_config(tmp_path), None, [], log=lambda _: None)
    assert demo.resumed_origin() is None                     # nothing to go on from
    anchor = 1_000_000.0
    AcceleratedClock(T0.isoformat(), anchor, 60.0).save(clock_path(demo.state))
    ledger = Ledger(demo.state)
    ledger.save(CycleRecord("c1", 1, (T0 + timedelta(hours=2)).isoformat(), anchor + 120, status="done",
                            finished_wall=anchor + 200))
    ledger.save(CycleRecord("c2", 2, (T0 + timedelta(hours=4)).isoformat(), anchor + 240))   # left running
    # the last record's wall time (c2's start, 240 s) plus the margin, on the last demo's clock
    assert demo.resumed_origin() == T0 + timedelta(seconds=(240 + RESUME_MARGIN_S) * 60)
    # a cycle stamped later than that clock says (an earlier resume on a clock behind it): after that cycle
    ledger.save(CycleRecord("c3", 3, (T0 + timedelta(hours=9)).isoformat(), anchor + 250))
    assert demo.resumed_origin() == T0 + timedelta(hours=9, seconds=RESUME_MARGIN_S * 60)


@pytest.mark.parametrize("wait_s, until_s, elapsed, expected", [
    (0.0, 0.0, 400.0, 0.0),        # neither: measure right after the last cycle
    (0.0, 540.0, 400.0, 140.0),    # cycles done early: the rest of the budget is A/B traffic
    (0.0, 540.0, 600.0, 0.0),      # cycles done late: measure at once
    (30.0, 540.0, 600.0, 30.0),    # ab_tail_wait_s is a floor on its own
    (30.0, 540.0, 400.0, 140.0),   # the later of the two
])
def test_the_ab_tail_waits_for_traffic_until_the_configured_time_since_the_start(tmp_path, wait_s, until_s, elapsed,
                                                                                   expected):
    from infra.orchestrator.demo import tail_wait_s

    cfg = make_config(tmp_path, f"demo.ab_tail_wait_s={wait_s}", f"demo.ab_tail_until_s={until_s}")
    assert tail_wait_s(cfg.demo, elapsed) == pytest.approx(expected)


@pytest.mark.integration      # the suite's flaky check grades tasks in sandboxed processes
def test_prepare_has_nothing_to_do_only_when_v0_the_suite_and_v0s_gate_episodes_all_exist(tmp_path):
    import json

    from evals.gate_run import COMPLETE, default_suite, episode_cache_of
    from evals.records import Episode
    from registry.client import content_digest
    from trainer.bootstrap.bootstrap import RECIPE

    cfg = make_config(tmp_path, "gate.tasks.suite_tasks=2", "gate.tasks.samples_per_task=1")
    demo = Demo(cfg, None, [f'state_dir="{tmp_path}"', "gate.tasks.suite_tasks=2", "gate.tasks.samples_per_task=1"],
                log=lambda m: None)
    assert demo.prepared() is None                                   # nothing made yet
    v0 = demo.v0_cache
    v0.mkdir(parents=True)
    (v0 / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (v0 / "model.safetensors").write_bytes(b"weights")
    made = {"kind": "bootstrap", "policy_config": demo.cfg.policy.model_dump(), "recipe": RECIPE}
    (v0 / "rtrl_metadata.json").write_text(json.dumps(made))
    assert demo.prepared() is None                                   # no suite yet
    suite = default_suite(demo.base)
    assert (suite / COMPLETE).is_file() and str(suite) == demo.cfg.gate.tasks.suite_dir
    assert demo.prepared() is None                                   # v0's episodes not kept
    cache, _, tasks = episode_cache_of(demo.cfg)
    first = cache.store(content_digest(v0), [Episode(task_id=tasks[0].id, sample=0, arm="champion")])
    assert first is not None and len(tasks) == 2 and demo.prepared() is None     # one task's episode only
    kept = cache.store(content_digest(v0), [Episode(task_id=t.id, sample=0, arm="champion") for t in tasks])
    assert demo.prepared() == kept
    (v0 / "rtrl_metadata.json").write_text(json.dumps({**made, "created": "later", "code_version": "abc"}))
    assert demo.prepared() == kept                                   # re-made elsewhere: the same model
    other_recipe = {**made["policy_config"], "repair_rate": 0.5}
    (v0 / "rtrl_metadata.json").write_text(json.dumps({**made, "policy_config": other_recipe}))
    assert demo.prepared() is None                                   # made from another recipe: made anew
    (v0 / "rtrl_metadata.json").write_text(json.dumps({**made, "recipe": RECIPE - 1}))
    assert demo.prepared() is None                                   # made by older bootstrap code: made anew
    (v0 / "rtrl_metadata.json").write_text(json.dumps(made))
    (v0 / "model.safetensors").write_bytes(b"other weights")         # another v0: its episodes are not kept
    assert demo.prepared() is None


def test_every_demo_splits_its_users_anew_a_resumed_one_keeps_its_split_and_a_configured_split_is_kept(tmp_path):
    from infra.orchestrator.demo import experiment_path
    from serving.router import Router

    cfg = make_config(tmp_path)
    first, second = (Demo(cfg, None, [], log=lambda _: None) for _ in range(2))
    assert first.experiment != second.experiment
    assert first.experiment.startswith(cfg.serving.experiment + "-")
    assert first.cfg.serving.experiment == first.experiment          # what serving's router salts the hash with
    assert Demo(cfg, None, [], log=lambda _: None, resume=True).experiment == cfg.serving.experiment  # none kept
    users = [f"s0-u{i}" for i in range(432)]
    arms = [[Router(d.experiment, cfg.serving.arms).assign(u) for u in users] for d in (first, second)]
    assert arms[0] != arms[1] and 150 < arms[0].count("treatment") < 282

    experiment_path(first.state).parent.mkdir(parents=True, exist_ok=True)
    experiment_path(first.state).write_text(first.experiment + "\n")      # as `run` keeps it
    assert Demo(cfg, None, [], log=lambda _: None, resume=True).experiment == first.experiment
    assert Demo(cfg, None, [], log=lambda _: None).experiment not in (first.experiment, second.experiment)
    given = ['serving.experiment="ab-fixed"', "demo.new_split=false"]
    assert Demo(make_config(tmp_path, *given), None, given, log=lambda _: None).cfg.serving.experiment == "ab-fixed"


def test_the_demo_trains_with_its_own_negative_kinds_and_an_empty_list_turns_them_off(tmp_path):
    for given, expected in (([], ["question"]), (["trainer.negative_kinds=[]"], [])):
        base = make_config(tmp_path, *given)
        assert Demo(base, None, given, log=lambda _: None).cfg.trainer.negative_kinds == expected


def test_the_demo_counts_its_finished_cycles_from_the_ledgers_latest_record():
    from infra.orchestrator.demo import finished_cycles
    from infra.orchestrator.ledger import BLOCKED, DONE, RUNNING, CycleRecord

    def latest(seq, status):
        return CycleRecord(f"c{seq}", seq, "2026-11-01T00:00:00+00:00", 0.0, status=status)

    assert finished_cycles(None) == 0
    assert [finished_cycles(latest(3, s)) for s in (DONE, BLOCKED, RUNNING)] == [3, 3, 2]
