"""The demo's Dagster definitions: the production cycle (infra.orchestrator.definitions) run with the demo's resource.

    defs = demo_definitions(config_path, overrides)        # `rtrl demo` runs its cycle job in process
    tags = {SETTINGS_TAG: json.dumps(["trainer.max_rows=512"])}  # a new cycle's overrides (infra.orchestrator.budget)

The resource differs from production's in one way, the demo's own: a new cycle takes the overrides its run is tagged
with (the time budget's fewer rows and gate samples), which its ledger record keeps for a resumed run. The assets, the
cycle job, the step functions and the cadence are production's; the demo executes the job in its own process.
"""
# no `from __future__ import annotations`: Dagster reads the resource's annotations at definition time
import json

import dagster as dg

from infra.orchestrator import definitions as production

SETTINGS_TAG = "rtrl/settings"   # a run tag: JSON list of `--set` overrides for a new cycle (CycleRecord.settings)


class DemoRtrlResource(production.RtrlResource):
    """The demo's configuration, with a new cycle's settings from its run's SETTINGS_TAG."""

    def new_cycle_settings(self, run: dg.DagsterRun) -> list[str]:
        return json.loads(run.tags.get(SETTINGS_TAG) or "[]")


def demo_definitions(config_path: str | None, overrides: list[str]) -> dg.Definitions:
    """The cycle's assets and job with the demo's resource (the demo's config file and overrides)."""
    return dg.Definitions(assets=production.cycle_assets, jobs=[production.cycle_job],
                          resources={"rtrl": DemoRtrlResource(config_path=config_path or "",
                                                              overrides=list(overrides))})
