"""Production's Dagster resource gives a new cycle no settings of its own; the demo's
(infra.orchestrator.demo_definitions) gives a new cycle the overrides its run is tagged with (the time budget's).
Both run the same step functions (infra.orchestrator.steps)."""
# no `from __future__ import annotations`: Dagster reads the asset's annotations
import json

import pytest

dg = pytest.importorskip("dagster")

from infra.orchestrator import definitions as production  # noqa: E402
from infra.orchestrator.demo_definitions import SETTINGS_TAG, DemoRtrlResource, demo_definitions  # noqa: E402

seen: dict = {}


@dg.asset
def probe(context: dg.AssetExecutionContext, rtrl: production.RtrlResource) -> None:
    cfg = rtrl.load()
    seen.update(kind=type(rtrl).__name__, settings=rtrl.new_cycle_settings(context.run),
                state=str(cfg.state_path), kept=type(rtrl.with_settings(["trainer.max_rows=512"])).__name__)


@pytest.mark.parametrize("resource, expected", [
    (production.RtrlResource, {"kind": "RtrlResource", "settings": [], "kept": "RtrlResource"}),
    (DemoRtrlResource, {"kind": "DemoRtrlResource", "settings": ["trainer.max_rows=512"], "kept": "DemoRtrlResource"}),
])
def test_only_the_demos_resource_takes_a_cycles_settings_from_its_run(tmp_path, resource, expected):
    seen.clear()
    rtrl = resource(overrides=[f'state_dir="{tmp_path}"'])
    result = dg.materialize([probe], resources={"rtrl": rtrl}, instance=dg.DagsterInstance.ephemeral(),
                            tags={SETTINGS_TAG: json.dumps(["trainer.max_rows=512"])})
    assert result.success and seen == {**expected, "state": str(tmp_path)}


def test_the_demos_definitions_run_productions_cycle_job_with_the_demos_resource():
    defs = demo_definitions(None, ["trainer.threads=1"])
    job = defs.resolve_job_def(production.CYCLE_JOB)
    assert {a.key for a in defs.resolve_all_asset_specs()} >= {dg.AssetKey(production.ASSETS[s][0])
                                                               for s in production.MEASURE_STEPS}
    assert job.name == production.CYCLE_JOB and isinstance(defs.resources["rtrl"], DemoRtrlResource)
    assert defs.resources["rtrl"].overrides == ["trainer.threads=1"]
