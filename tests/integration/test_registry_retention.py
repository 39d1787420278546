"""Registry retention on a real MLflow registry (SQLite, a local artifact folder, tiny checkpoints): the artifacts of
unkept versions are deleted and nothing else's (a dry run only says which); their tags stay; rolling back to each kept previous champion still
loads; a promotion and a rollback racing with retention never leave an alias on a version that cannot load; and
`rtrl retention` prints the plan and applies it."""

from __future__ import annotations

import json
import shutil
import threading
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from registry.client import DELETED_TAG, ArtifactsDeleted, Registry
from registry.promotion import PromotionRefused, lock_path_for, promote, rollback
from registry.retention import aliased_versions, versions_with_artifacts
from registry.retention_apply import apply_retention

pytestmark = [pytest.mark.integration]

LATER = datetime.now(timezone.utc) + timedelta(hours=2)    # every version registered here is an hour past min age
MIN_AGE_S = 3600.0


def make_registry(root: Path, cache: str = "cache") -> Registry:
    return Registry(f"sqlite:///{root / 'mlflow.db'}", root / "artifacts", "policy", root / cache)


@pytest.fixture(scope="module")
def blank_db(tmp_path_factory) -> Path:
    """An empty MLflow store, its tables made once (seconds) and copied into each test's folder."""
    root = tmp_path_factory.mktemp("blank")
    make_registry(root).client.search_experiments()
    return root / "mlflow.db"


def register(reg: Registry, marker: str, **tags) -> str:
    d = Path(reg.artifact_root).parent / "src" / marker
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps({"marker": marker}))
    (d / "weights.bin").write_bytes(marker.encode() * 64)
    return reg.register(d, tags=tags)


def gated_and_promoted(reg: Registry, lock, marker: str, **tags) -> str:
    champion = reg.version_of("champion")
    v = register(reg, marker, **tags)
    reg.set_version_tags(v, {"gate.decision": "promote", "gate.champion_version": champion, "gate.run_id": f"g{v}"})
    promote(reg, v, lock)
    return v


def checkpoint_dir(reg: Registry, version: str) -> Path:
    run = reg.client.get_run(reg.info(version).run_id)
    return Path(run.info.artifact_uri.removeprefix("file://")) / "checkpoint"


def loads(root: Path, version: str) -> str:
    """The marker of `version` as a fresh host would load it (an empty cache: a real download)."""
    fresh = make_registry(root, cache=f"fresh-cache-{version}")
    try:
        return json.loads((fresh.local_path(version) / "config.json").read_text())["marker"]
    finally:
        shutil.rmtree(fresh.cache_dir, ignore_errors=True)


@pytest.fixture
def lineage(tmp_path, blank_db):
    """v1 bootstrap (champion, control), v2..v6 each promoted over the one before; every version cached here."""
    shutil.copy(blank_db, tmp_path / "mlflow.db")
    reg = make_registry(tmp_path)
    lock = lock_path_for(reg.tracking_uri, tmp_path)
    v1 = register(reg, "m1", kind="bootstrap")
    reg.set_alias("champion", v1)
    reg.set_alias("control", v1)
    for i in range(2, 7):
        gated_and_promoted(reg, lock, f"m{i}")
    for v in map(str, range(1, 7)):
        reg.local_path(v)
    return reg, lock, tmp_path


def test_unkept_versions_lose_their_files_kept_ones_load_and_rollback_to_each_kept_champion_works(lineage):
    reg, lock, root = lineage
    spare = register(reg, "m7")                                 # trained, refused by its gate: nothing holds it
    flying = register(reg, "m8", cycle="c8", candidate="true")  # its cycle has not finished
    reg.local_path(spare)
    dry = apply_retention(reg, lock, keep_promoted=2, min_age_s=MIN_AGE_S, cache_max_bytes=0, now=LATER,
                          in_flight=lambda cycles: cycles & {"c8"}, dry_run=True)
    assert dry["to_delete"] == ["2", "3", spare] and dry["deleted"] == []
    # the cache's copies of the versions to delete, then (bound 0) every one nothing loads now: 4, beyond the aliases
    assert [e["version"] for e in dry["cache"]["evicted"]] == ["2", "3", spare, "4"]
    assert all(checkpoint_dir(reg, v).is_dir() and DELETED_TAG not in reg.info(v).tags for v in ["2", "3", spare])
    assert all((reg.cache_dir / "policy" / f"v{v}").is_dir() for v in "1234567")

    report = apply_retention(reg, lock, keep_promoted=2, min_age_s=MIN_AGE_S, cache_max_bytes=10**9,
                             in_flight=lambda cycles: cycles & {"c8"}, now=LATER)

    # kept: the chain 6, 5, 4 (champion, and the two versions its rollbacks restore), v1 (anchor, control), v8 (in flight)
    assert report["deleted"] == ["2", "3", spare] and report["failed"] == {}
    assert versions_with_artifacts(reg) == ["1", "4", "5", "6", flying]
    assert aliased_versions(reg) == {"1", "5", "6"}
    for v in ["2", "3", spare]:
        assert not checkpoint_dir(reg, v).exists()
        assert not (reg.cache_dir / "policy" / f"v{v}").exists()
        with pytest.raises(ArtifactsDeleted, match=f"version {v} of model 'policy' cannot be loaded: retention"):
            loads(root, v)
    assert reg.info("2").tags["gate.decision"] == "promote" and DELETED_TAG in reg.info("2").tags
    assert reg.info("3").tags["promotion.previous_version"] == "2"        # the audit trail stays
    for v in ["1", "4", "5", "6", flying]:
        assert checkpoint_dir(reg, v).is_dir() and loads(root, v) == f"m{v}"

    assert rollback(reg, lock).champion == "5" and loads(root, reg.version_of("champion")) == "m5"
    back = rollback(reg, lock)                # to 4; the next previous, 3, has no files: the chain ends here
    assert (back.champion, back.previous, reg.version_of("previous")) == ("4", None, None)
    assert loads(root, reg.version_of("champion")) == "m4"
    with pytest.raises(PromotionRefused, match="previous is not set"):
        rollback(reg, lock)
    reg.set_version_tags("3", {"gate.decision": "promote", "gate.champion_version": "4"})
    with pytest.raises(PromotionRefused, match="deleted by retention"):
        promote(reg, "3", lock, force=True)

    again = apply_retention(reg, lock, keep_promoted=2, min_age_s=MIN_AGE_S, cache_max_bytes=10**9,
                            now=LATER)   # 6 and 5 were rolled back from, 8's cycle is done: they go now
    assert again["deleted"] == ["5", "6", flying] and again["gone"] == 3 and again["lost"] == []
    assert loads(root, reg.version_of("champion")) == "m4"


def test_a_promotion_and_a_rollback_racing_with_retention_leave_every_alias_loadable(lineage):
    """Retention reads the aliases (champion 6, previous 5: with one rollback kept, the chain is 6, 5) and, inside its window, a rollback
    (to 5, previous 4) and a promotion of a candidate gated against 6 both start. Without the lock the rollback
    would point previous at 4 after retention planned to delete it. With it they wait, then see retention's
    result: whichever of them runs first, every alias ends on a version that loads."""
    reg, lock, root = lineage
    candidate = register(reg, "m7", cycle="c7", candidate="true")
    reg.set_version_tags(candidate, {"gate.decision": "promote", "gate.champion_version": "6"})
    in_window, outcomes = threading.Event(), {}

    def in_flight(cycles):
        in_window.set()
        threading.Event().wait(1.0)      # retention's window between reading the aliases and tagging: held open
        return cycles & {"c7"}

    def racer(name, fn):
        in_window.wait(30)
        try:
            outcomes[name] = fn().champion
        except PromotionRefused as e:
            outcomes[name] = f"refused: {e}"

    threads = [threading.Thread(target=racer, args=("rollback", lambda: rollback(make_registry(root), lock))),
               threading.Thread(target=racer, args=("promote", lambda: promote(make_registry(root), candidate,
                                                                                lock)))]
    for t in threads:
        t.start()
    report = apply_retention(reg, lock, keep_promoted=1, min_age_s=MIN_AGE_S, cache_max_bytes=10**9,
                             in_flight=in_flight, now=LATER)
    for t in threads:
        t.join(60)
    assert report["deleted"] == ["2", "3", "4"], report
    refused = (f"refused: alias champion moved since the eval: it points to 5, and version {candidate} was "
               "compared against 6; gate it again against 5")
    # rollback first: champion 5, and previous unset (its next one, 4, was deleted); the promotion is then stale.
    # promotion first: champion 7 (previous 6), then the rollback restores 6 (previous 5).
    assert (outcomes["rollback"], outcomes["promote"]) in {("5", refused), ("6", candidate)}, outcomes
    aliases = reg.client.get_registered_model("policy").aliases
    assert set(aliases) >= {"champion", "control"}
    for alias, v in aliases.items():
        assert loads(root, v) == f"m{v}", alias


def test_rtrl_retention_prints_the_plan_and_applies_it(tmp_path, capsys, blank_db):
    from infra.cli import main
    from tests.conftest import free_port

    state = tmp_path / "state"
    state.mkdir()
    shutil.copy(blank_db, state / "mlflow.db")
    reg = Registry(f"sqlite:///{state / 'mlflow.db'}", state / "mlflow-artifacts", "rtrl-policy",
                   state / "checkpoints")
    v1 = register(reg, "m1", kind="bootstrap")
    reg.set_alias("champion", v1)
    old = register(reg, "m2")
    args = ["--set", f"state_dir={state}", "--set", f"serving.port={free_port()}", "--set", "retention.min_age_s=0",
            "retention"]
    assert main([*args, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "would delete: 2" in out and "anchor v0" in out and checkpoint_dir(reg, old).is_dir()
    assert main([*args, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)["retention"]
    assert report["deleted"] == [old] and not checkpoint_dir(reg, old).exists()
