"""The Dagster cadence sensor backs off a failing cycle, then skips it as stuck and says why, until `rtrl cycle
--unstick` clears it; the runs of old finished cycles are deleted. The cycle job is production's, run in this process
against a fresh registry, where its first step fails for real (no champion); the orchestrator's clock is frozen and
moved by hand."""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta, timezone

import pytest

from infra.orchestrator.clock import AcceleratedClock, clock_path
from infra.orchestrator.ledger import DONE, FAILED, STUCK, CycleRecord, Ledger

pytestmark = [pytest.mark.integration]
T0 = datetime(2026, 11, 1, tzinfo=timezone.utc)


def test_the_sensor_backs_off_a_failing_cycle_then_skips_it_as_stuck_and_says_why(tmp_path):
    import dagster as dg

    from infra.cli import main
    from infra.orchestrator import definitions

    overrides = [f'state_dir="{tmp_path}"', 'orchestrator.clock="accelerated"', 'orchestrator.source="files"',
                 "orchestrator.max_failures=2", "orchestrator.retry_backoff_s=600"]
    resource = definitions.RtrlResource(overrides=overrides)
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(definitions.cycles.name, ["c1"])
    job = dg.Definitions(assets=definitions.cycle_assets, jobs=[definitions.cycle_job],
                         resources={"rtrl": resource}).resolve_job_def(definitions.CYCLE_JOB)

    def at(t: datetime) -> None:          # the orchestrator's clock, stopped at t
        AcceleratedClock(t.isoformat(), time.time(), 0.0).save(clock_path(tmp_path))

    def run_c1() -> bool:
        return job.execute_in_process(partition_key="c1", instance=instance, raise_on_error=False).success

    def tick():
        return definitions.cadence_sensor(dg.build_sensor_context(instance=instance, resources={"rtrl": resource}))

    at(T0)
    assert not run_c1()
    rec = Ledger(tmp_path).load("c1")
    assert rec.status == FAILED and [f["step"] for f in rec.failures] == ["collect"], rec.error
    r = tick()
    assert isinstance(r, dg.SkipReason) and r.skip_message.startswith("backing off: cycle c1 failed 1 time(s)")
    assert (T0 + timedelta(seconds=600)).isoformat() in r.skip_message

    at(T0 + timedelta(seconds=600))
    r = tick()
    assert isinstance(r, dg.SensorResult) and [q.partition_key for q in r.run_requests] == ["c1"]
    assert r.run_requests[0].tags["rtrl/resume"] == "true"
    assert not run_c1()
    assert Ledger(tmp_path).load("c1").status == STUCK

    at(T0 + timedelta(days=7))
    r = tick()
    assert isinstance(r, dg.SkipReason) and r.skip_message.startswith("cycle c1 is stuck: 2 failures in a row")
    assert "alias champion is not set" in r.skip_message and "rtrl cycle c1 --unstick" in r.skip_message
    logged = json.loads((tmp_path / "orchestrator" / "cadence.jsonl").read_text().splitlines()[-1])
    assert (logged["start"], logged["stuck"], logged["failures"]) == (False, "c1", 2)

    assert main([*sum((["--set", o] for o in overrides), []), "cycle", "c1", "--unstick"]) == 0
    r = tick()
    assert isinstance(r, dg.SensorResult) and [q.partition_key for q in r.run_requests] == ["c1"]

    # once c1 is finished and a newer cycle is too, its runs go with their event logs (orchestrator.keep_cycles)
    ledger = Ledger(tmp_path)
    rec = ledger.load("c1")
    rec.status = DONE
    ledger.save(rec)
    ledger.save(CycleRecord("c2", 2, T0.isoformat(), 0.0, status=DONE))
    runs = [r.run_id for r in instance.get_runs()]
    assert len(runs) == 2
    assert sorted(definitions.prune_runs(instance, ledger, ledger.latest(), keep_cycles=2)) == []
    assert sorted(definitions.prune_runs(instance, ledger, ledger.latest(), keep_cycles=1)) == sorted(runs)
    assert instance.get_runs() == [] and not instance.get_records_for_run(runs[0]).records
