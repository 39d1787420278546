"""The demo's configuration is the overlay infra/configs/demo.toml on the defaults, under the user's own config file
and --set, then the values computed at run time; every `rtrl` command of the demo runs with the same config."""

from __future__ import annotations

import pytest

from infra.config import (CONFIGS_DIR, apply_override, load_config, overlay_overrides, render_overrides,
                          toml_value)
from infra.bench.live import LIVE_CONFIG
from infra.bench.soak import SOAK_CONFIG
from infra.bench.specialize import OVERLAYS as BENCH_OVERLAYS, bench_config
from infra.orchestrator.demo import DEMO_CONFIG, SPECIALIZE_CONFIG, Demo


def _differences(cfg) -> dict:
    """Every key whose value differs from the defaults, by dotted name."""
    out: dict = {}

    def walk(default, value, key):
        if isinstance(default, dict):
            for k in default:
                walk(default[k], value[k], f"{key}.{k}" if key else k)
        elif default != value:
            out[key] = value

    walk(load_config(None, []).model_dump(mode="json"), cfg.model_dump(mode="json"), "")
    return out


@pytest.fixture
def fixed_machine(monkeypatch):
    """Two cores and a known A/B split salt."""
    monkeypatch.setattr("infra.orchestrator.demo.os.cpu_count", lambda: 2)
    monkeypatch.setattr("infra.orchestrator.demo.secrets.token_hex", lambda n: "ab12cd34")


def test_the_demo_without_flags_runs_with_exactly_these_settings(tmp_path, fixed_machine):
    # `rtrl --set state_dir=<tmp> demo`: the demo's effective config, the same as before the settings became an
    # overlay (computed then from the demo's own copies of these keys and its hand-written overrides)
    given = render_overrides({"state_dir": str(tmp_path)})
    demo = Demo(load_config(None, given), None, given, log=lambda _: None)
    assert _differences(demo.cfg) == {
        "state_dir": str(tmp_path / "demo"),
        "policy.cache_dir": str(tmp_path / "policy-v0"),
        "trainer.max_rows": 1024,
        "trainer.rows_per_step": 128,
        "trainer.lr": 0.0003,
        "trainer.negative_kinds": ["question"],
        "trainer.threads": 1,
        "serving.experiment": "rtrl-ab-1-ab12cd34",
        "serving.cpu_cores": "0",
        "serving.spare_engines": 2,
        "serving.spare_cpu_cores": "1",
        "serving.busy_poll_ms": 5.0,
        "serving.shutdown_grace_s": 1,
        "simulator.think_s": [180.0, 1440.0],
        "simulator.session_gap_s": [3599.9, 21599.6],
        "simulator.start_spread_s": 1800.0,
        "gate.suites": ["tasks"],
        "gate.tasks.suite_dir": str(tmp_path / "eval-suites" / "default-n40-seed7"),
        "gate.tasks.suites_root": str(tmp_path / "eval-suites"),
        "gate.tasks.suite_tasks": 40,
        "gate.tasks.engine_cpu_cores": "1",
        "gate.tasks.via_serving": True,
        "gate.tasks.reuse_episodes": True,
        "gate.tasks.workers": 16,
        "orchestrator.interval_s": 3600.0,
        "orchestrator.min_mature_rows": 400,
        "orchestrator.range_idle_s": 0.5,
        "orchestrator.sensor_interval_s": 2.0,
        "orchestrator.clock": "accelerated",
    }
    assert demo.cfg.gate.tasks.samples_per_task == 4 and demo.cfg.demo.cycles == 3      # the defaults already
    # what the steps, serving, the users and the Dagster resource load: the same file and overrides
    assert load_config(demo.config_path, demo.overrides) == demo.cfg
    assert demo.cli.overrides == demo.overrides


def test_specialize_layers_its_overlay_over_the_demos(tmp_path, fixed_machine):
    given = render_overrides({"state_dir": str(tmp_path)})
    plain = Demo(load_config(None, given), None, given, log=lambda _: None)
    demo = Demo(load_config(None, given), None, given, log=lambda _: None, specialize=True)
    extra = {k: v for k, v in _differences(demo.cfg).items() if _differences(plain.cfg).get(k) != v}
    assert [(a["name"], a["per_org"]) for a in extra.pop("serving.arms")] == [
        ("control", False), ("treatment", False), ("specialized", True)]
    assert extra == {"specialize.enabled": True, "specialize.min_rows": 64, "specialize.lr": 1.5e-3,
                     "specialize.parallel_gates": 4,
                     "simulator.background_rate": 0.15, "gate.tasks.org_suite_tasks": 48,
                     "gate.tasks.org_samples_per_task": 2, "serving.max_loras": 8,
                     "serving.max_lora_rank": 8, "demo.cycles": 1, "demo.budget_s": 1080.0,
                     "demo.ab_tail_until_s": 960.0, "simulator.keyword_only_orgs": ["o0", "o2"],
                     "policy.house_rules": True, "policy.cache_dir": str(tmp_path / "policy-v0-house-rules")}
    assert demo.cfg.trainer.max_rows == 1024                                   # the demo's overlay still applies
    assert load_config(demo.config_path, demo.overrides) == demo.cfg


def test_the_users_config_file_and_overrides_win_over_the_overlay_and_the_run_time_values_over_both(tmp_path,
                                                                                                  fixed_machine):
    mine = tmp_path / "mine.toml"
    mine.write_text(f'state_dir = "{tmp_path}"\n[trainer]\nlr = 1e-3\n[gate.tasks]\nsuite_tasks = 10\n'
                    '[serving]\nexperiment = "mine"\n')
    given = ["trainer.rows_per_step=64", "orchestrator.interval_s=600"]
    demo = Demo(load_config(mine, given), str(mine), given, log=lambda _: None)
    t, g, o = demo.cfg.trainer, demo.cfg.gate.tasks, demo.cfg.orchestrator
    assert (t.lr, g.suite_tasks, t.rows_per_step, o.interval_s) == (1e-3, 10, 64, 600.0)   # the user's
    assert (t.max_rows, t.negative_kinds, g.workers, o.min_mature_rows) == (1024, ["question"], 16, 400)  # overlay's
    # run time, from the layers below: the demo's state dir, a split salted from the user's experiment, the suite
    # the user's gate size names, in the user's state dir
    assert demo.cfg.state_path == tmp_path / "demo" and demo.cfg.serving.experiment == "mine-ab12cd34"
    assert demo.cfg.gate.tasks.suite_dir == str(tmp_path / "eval-suites" / "default-n10-seed7")


def test_the_overlay_is_a_valid_config_on_its_own_and_as_overrides(tmp_path):
    alone = load_config(DEMO_CONFIG)
    assert alone == load_config(None, overlay_overrides(DEMO_CONFIG))
    assert (alone.trainer.rows_per_step, alone.gate.tasks.suite_tasks, alone.serving.busy_poll_ms) == (128, 40, 5.0)
    assert DEMO_CONFIG.parent == CONFIGS_DIR and sorted(CONFIGS_DIR.glob("*.toml")) == sorted([
        DEMO_CONFIG, SPECIALIZE_CONFIG, *BENCH_OVERLAYS[1:], LIVE_CONFIG, SOAK_CONFIG])
    soak = load_config(None, [*overlay_overrides(DEMO_CONFIG), *overlay_overrides(SOAK_CONFIG)])  # over the demo's
    assert soak.orchestrator.interval_s == 5 * 3600 and soak.retention.min_age_s == 0 and soak.demo.budget_s == 0
    # the broker's log bounded: over "s3", broker-watch deletes what is past a window shorter than cycle 4's end
    assert soak.kafka.storage_engine == "s3" and soak.kafka.retention_interval_s > 0
    assert soak.kafka.retention_s < 4 * soak.orchestrator.interval_s / soak.demo.speed
    live = load_config(LIVE_CONFIG)                   # `rtrl bench live`: production's learning settings
    assert (live.trainer.lr, live.trainer.rows_per_step, live.gate.suites) == (2e-4, 256, ["tasks", "users"])
    assert live.orchestrator.interval_s == 5 * 3600 and live.demo.budget_s == 0
    assert load_config(SPECIALIZE_CONFIG) == load_config(None, overlay_overrides(SPECIALIZE_CONFIG))
    bench = bench_config(None, ())                    # `rtrl bench specialize`: over specialize.toml
    assert BENCH_OVERLAYS[0] == SPECIALIZE_CONFIG and bench.policy.house_rules and bench.specialize.lr == 2e-3
    assert bench.gate.tasks.org_samples == 4 and bench.gate.tasks.org_suite_tasks == 48
    # a key the user's file sets is left out, sections and all
    mine = tmp_path / "mine.toml"
    mine.write_text("[trainer]\nlr = 1e-3\n[serving]\nspare_engines = 0\n")
    keys = [o.split("=", 1)[0] for o in overlay_overrides(DEMO_CONFIG, mine)]
    assert "trainer.lr" not in keys and "serving.spare_engines" not in keys and "trainer.max_rows" in keys


@pytest.mark.parametrize("value", [
    "0-3", 'a "quoted" \\ path', "two\nlines\ttab", "ünïcode ✓", "del\x7f", "",
    0, -7, 3e-4, 1e-05, 1e20, 0.1, 2.0, float("inf"), True, False,
    [180.0, 1440.0], ["question"], [], {"max_increase": 0.2, "relative": False}, {"a b": [1, "x"]},
])
def test_rendered_overrides_parse_back_to_the_same_value(value):
    data: dict = {}
    (override,) = render_overrides({"section.key": value})
    apply_override(data, override)
    assert data == {"section": {"key": value}}
    assert override == f"section.key={toml_value(value)}"
