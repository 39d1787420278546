"""The in-process executor's traffic source (pipelines/rewards/files_job.py): a drained population's events, written
as wire lines and run through the bounded reward job and its sink, give the rows and the task-outcome rows the
reward computation gives over the same events, with nothing pending or late; what does not parse is a dead letter."""

from datetime import timedelta

import polars as pl

from codetasks.policy import ErrorRates, ReferencePolicy
from infra.offline_cycle import rewards_and_outcomes
from instrumentation.simulator.clock import StepClock
from instrumentation.simulator.config import SimulatorConfig
from instrumentation.simulator.population import Population
from instrumentation.simulator.user import ListSink
from pipelines.rewards.files_job import run_files, write_traffic
from pipelines.rewards.spec import RewardSpec
from schemas.reward_table import outcome_table, read_outcome_table, read_reward_table


def _drained_events():
    sim = SimulatorConfig(users=12, seed=5, background_rate=0.3, privacy_rate=0.2)
    clock = StepClock(latency_s=sim.deterministic_latency_s)
    sink, policy = ListSink(), ReferencePolicy(0, ErrorRates(wrong=0.3, broken=0.2), policy_version="7")
    Population(sim, policy, sink, clock).run(clock.start + timedelta(hours=1))
    return sorted([*sink.events, *policy.trajectories(arm="treatment")], key=lambda e: (e.event_time, e.event_id))


def test_a_traffic_file_gives_the_rows_of_the_reward_computation_through_the_production_sink(tmp_path):
    events, spec = _drained_events(), RewardSpec()
    path = tmp_path / "traffic" / "c1.jsonl"
    assert write_traffic(path, events) == len(events)
    with open(path, "ab") as f:
        f.write(b'{"event_type": "trajectory", "schema_version": 1}\n')       # no envelope: a dead letter
    table = tmp_path / "rewards" / "table"
    summary = run_files("c1", [str(path)], table, spec, result=tmp_path / "result.json",
                        dead_letters=tmp_path / "dead.parquet")
    c = summary["counters"]
    assert c["events_read"] == len(events) + 1 and sum(v for k, v in c.items() if k.startswith("dead_letter_")) == 1
    assert c.get("requests_pending", 0) == 0 and c.get("late_events", 0) == 0 and c.get("outcomes_pending", 0) == 0

    expected_rows, expected_outcomes = rewards_and_outcomes(events, spec)
    rows = read_reward_table(table, "c1")
    assert rows.height == expected_rows.height > 50 and sum(n for _, n in summary["partitions"]) == rows.height
    cols = [c for c in expected_rows.columns if c in rows.columns]
    assert rows.select(cols).sort("request_id").equals(expected_rows.select(cols).sort("request_id"))
    outcomes = read_outcome_table(outcome_table(table), "c1")
    assert outcomes.height == expected_outcomes.height > 0
    cols = [c for c in expected_outcomes.columns if c in outcomes.columns]
    key = ["request_id"]
    assert outcomes.select(cols).sort(key).equals(expected_outcomes.select(cols).sort(key))
    assert outcomes.filter(pl.col("outcome_label") == "known").height == outcomes.height, "every task was judged"
