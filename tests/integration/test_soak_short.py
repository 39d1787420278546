"""A short soak, the default tier's representative of `rtrl bench soak`: five small cycles of production's cycle by
the in-process executor (each champion serves new simulated users, the traffic goes through the files source, the
reward job, validate, measure, train, the one gate, promote, deploy, then registry retention), with a retention
window of one rollback. After every cycle no version an alias or the rollback chain holds has lost its files and
at most K unaliased versions hold files; by the end retention has deleted some; then the rollback still loads."""

from __future__ import annotations

import shutil
from datetime import datetime, timezone

import pytest

from infra.config import load_config, render_overrides
from infra.orchestrator import steps
from infra.orchestrator.ledger import DONE
from registry.client import ArtifactsDeleted, Registry, content_digest

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]

CYCLES, KEEP = 5, 1
SMALL = ['orchestrator.source="files"', "trainer.min_rows=16", "trainer.rows_per_step=64", "trainer.max_rows=96",
         "trainer.threads=1", 'gate.suites=["users"]', "gate.users.users=6", "gate.users.hours=0.25",
         "gate.users.margin=0.5", "gate.users.anchor_margin=0.5", "learning.jobs=1",
         f"retention.keep_promoted={KEEP}", "retention.min_age_s=0", "retention.cache_max_bytes=0"]


def _loads(registry: Registry, version: str) -> bool:
    """The version's files come back from the artifact store into an empty cache, with the digest of its tag."""
    shutil.rmtree(registry.cache_dir / registry.model / f"v{version}", ignore_errors=True)
    try:
        return content_digest(registry.local_path(version)) == registry.digest(version)
    except ArtifactsDeleted:
        return False


@pytest.fixture(scope="module")
def soaked(bootstrapped, tmp_path_factory):
    """Run the cycles; after each, what the registry held. (cfg, registry, per-cycle observations)."""
    from infra.learning.score import sampling_of
    from infra.offline_cycle import serve
    from pipelines.rewards.files_job import write_traffic
    from registry.retention import aliased_versions, versions_with_artifacts

    state0, _, _ = bootstrapped
    v0 = Registry.from_config(load_config(None, [f'state_dir="{state0}"'])).local_path("1")
    state = tmp_path_factory.mktemp("soak")
    overrides = [*render_overrides({"state_dir": state}), *SMALL]
    cfg = load_config(None, overrides)
    registry = Registry.from_config(cfg)
    first = registry.register(v0, tags={"kind": "bootstrap"}, run_name="v0")
    registry.set_alias("champion", first)
    registry.set_alias("control", first)
    sim = cfg.simulator.model_copy(update={"users": 12, "privacy_rate": 0.0})
    seen = []
    for i in range(1, CYCLES + 1):
        champion, cid = registry.version_of("champion"), f"c{i}"
        served = serve(registry.local_path(champion), champion, sim.model_copy(update={"seed": 100 + i}), 0.5,
                       seed=i, **sampling_of(cfg))
        write_traffic(steps.traffic_file(cfg, cid), served.events)
        ctx, ledger = steps.context_for(cfg, cid, datetime.now(timezone.utc), log=print, overrides=overrides)
        rec = steps.run_cycle(ctx, ledger)
        seen.append({"cycle": cid, "status": rec.status, "retention": rec.result("deploy").get("retention"),
                     "aliased": aliased_versions(registry), "with_artifacts": versions_with_artifacts(registry),
                     "aliased_load": {v: _loads(registry, v) for v in aliased_versions(registry)}})
    return cfg, registry, seen


def test_every_cycle_is_done_and_retention_ran_after_each_deploy(soaked):
    _, _, seen = soaked
    assert [s["status"] for s in seen] == [DONE] * CYCLES
    assert all(s["retention"] and "error" not in s["retention"] for s in seen), [s["retention"] for s in seen]


def test_no_version_an_alias_holds_ever_lost_its_files(soaked):
    _, _, seen = soaked
    for s in seen:
        assert s["aliased_load"] and all(s["aliased_load"].values()), s


def test_at_most_k_unaliased_versions_hold_files_and_retention_deleted_some(soaked):
    _, registry, seen = soaked
    for s in seen:
        assert len(set(s["with_artifacts"]) - s["aliased"]) <= KEEP, s
    registered = {str(v.version) for v in registry.client.search_model_versions(f"name='{registry.model}'")}
    deleted = registered - set(seen[-1]["with_artifacts"])
    assert len(registered) == CYCLES + 1 and deleted, (registered, seen[-1])
    for version in deleted:
        assert registry.info(version).tags.get("retention.artifacts_deleted")      # tags stay for audit
        assert not _loads(registry, version)


def test_rollback_after_the_soak_restores_a_champion_whose_files_load(soaked):
    from infra.bench.soak import roll_back_chain

    cfg, registry, _ = soaked
    before = registry.version_of("champion")
    rolled = roll_back_chain(cfg, KEEP, log=print)
    assert len(rolled) == KEEP and all(r["ok"] for r in rolled), rolled
    assert registry.version_of("champion") == rolled[-1]["version"] != before
