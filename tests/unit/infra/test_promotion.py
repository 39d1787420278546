"""Promotion by compare-and-swap on alias `champion` against a real MLflow SQLite store: concurrent promoters in
separate processes, a champion that moved since the eval, the gate check and --force, rollback, audit tags."""

import json
import multiprocessing as mp
import subprocess
import time
from pathlib import Path

import pytest

from infra.argv import rtrl_argv
from registry.promotion import PromotionRefused, lock_path_for, promote, rollback
from registry.client import Registry

pytestmark = pytest.mark.slow   # an MLflow store per test: seconds each

REPO = Path(__file__).parents[3]


def make_registry(root: Path) -> Registry:
    return Registry(f"sqlite:///{root / 'mlflow.db'}", root / "artifacts", "policy", root / "cache")


def gated(reg: Registry, against: str, decision: str = "promote") -> str:
    """Register a version whose gate compared it against `against`."""
    d = Path(reg.artifact_root).parent / f"ckpt{time.monotonic_ns()}"
    d.mkdir()
    (d / "config.json").write_text("{}")
    v = reg.register(d)
    reg.set_version_tags(v, {"gate.decision": decision, "gate.champion_version": against, "gate.run_id": f"run{v}",
                             "gate.interval": "[-0.0100, +0.0300]",
                             "gate.reasons": "" if decision == "promote" else "inconclusive"})
    return v


@pytest.fixture
def setup(tmp_path):
    reg = make_registry(tmp_path)
    v1 = gated(reg, "", decision="none")
    reg.set_alias("champion", v1)
    return reg, lock_path_for(reg.tracking_uri, tmp_path), v1


class SlowRegistry(Registry):
    """Reads the champion, then waits: without the lock both promoters would read the same champion and win."""

    def version_of(self, alias):
        v = super().version_of(alias)
        time.sleep(0.5)  # the slow read is the behaviour under test: the window a lock must close
        return v


def _race(root: str, version: str, barrier, out):
    reg = SlowRegistry(f"sqlite:///{root}/mlflow.db", Path(root) / "artifacts", "policy", Path(root) / "cache")
    lock = lock_path_for(reg.tracking_uri, Path(root))
    barrier.wait()
    try:
        out.put((version, "ok", promote(reg, version, lock).champion))
    except PromotionRefused as e:
        out.put((version, "refused", str(e)))


@pytest.mark.integration
def test_concurrent_promoters_against_the_same_champion_exactly_one_wins(setup, tmp_path):
    reg, lock, v1 = setup
    v2, v3 = gated(reg, v1), gated(reg, v1)
    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_race, args=(str(tmp_path), v, barrier, out)) for v in (v2, v3)]
    for p in procs:
        p.start()
    results = sorted(out.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(timeout=60)
    outcomes = [r[1] for r in results]
    assert sorted(outcomes) == ["ok", "refused"], results
    winner = next(r[0] for r in results if r[1] == "ok")
    loser_msg = next(r[2] for r in results if r[1] == "refused")
    assert "champion moved since the eval" in loser_msg and f"points to {winner}" in loser_msg
    assert reg.version_of("champion") == winner and reg.version_of("previous") == v1


def test_promotion_is_refused_when_the_champion_moved_since_the_eval(setup):
    reg, lock, v1 = setup
    v2 = gated(reg, v1)
    v3 = gated(reg, v1)
    promote(reg, v3, lock)
    with pytest.raises(PromotionRefused, match=f"points to {v3}, and version {v2} was compared against {v1}"):
        promote(reg, v2, lock)
    with pytest.raises(PromotionRefused, match="champion moved"):
        promote(reg, v2, lock, force=True)             # --force skips the gate check, never the CAS
    assert reg.version_of("champion") == v3 and "promotion.time" not in reg.info(v2).tags


def test_promotion_needs_a_passing_gate_unless_forced_and_force_is_audited(setup):
    reg, lock, v1 = setup
    kept = gated(reg, v1, decision="keep_champion")
    with pytest.raises(PromotionRefused, match="was not passed by its gate: keep_champion \\(inconclusive\\)"):
        promote(reg, kept, lock)
    assert reg.version_of("champion") == v1
    result = promote(reg, kept, lock, force=True)
    assert (result.champion, result.forced) == (kept, True)
    assert reg.info(kept).tags["promotion.forced"] == "true"


def test_an_ungated_version_needs_force_and_an_expected_champion(setup):
    reg, lock, v1 = setup
    d = Path(reg.artifact_root).parent / "plain"
    d.mkdir()
    (d / "config.json").write_text("{}")
    plain = reg.register(d)
    with pytest.raises(PromotionRefused, match="has no gate result"):
        promote(reg, plain, lock)
    with pytest.raises(PromotionRefused, match="--expect-champion"):
        promote(reg, plain, lock, force=True)
    assert promote(reg, plain, lock, force=True, expect_champion=v1).champion == plain


def test_promotion_writes_the_audit_tags_and_moves_previous(setup):
    reg, lock, v1 = setup
    v2 = gated(reg, v1)
    result = promote(reg, v2, lock)
    tags = reg.info(v2).tags
    assert (result.champion, result.previous) == (v2, v1)
    assert tags["promotion.previous_version"] == v1 and tags["promotion.eval_run"] == f"run{v2}"
    assert tags["promotion.decision"] == "promote" and tags["promotion.interval"] == "[-0.0100, +0.0300]"
    assert tags["promotion.forced"] == "false" and tags["promotion.time"] and "@" in tags["promotion.by"]
    assert reg.version_of("champion") == v2 and reg.version_of("previous") == v1
    with pytest.raises(PromotionRefused, match="already the champion"):
        promote(reg, v2, lock)


def test_rollback_restores_previous_and_walks_back_promotion_by_promotion(setup):
    reg, lock, v1 = setup
    v2 = gated(reg, v1)
    promote(reg, v2, lock)
    v3 = gated(reg, v2)
    promote(reg, v3, lock)
    r = rollback(reg, lock)
    assert (r.champion, r.replaced, r.previous) == (v2, v3, v1)
    assert reg.version_of("champion") == v2 and reg.version_of("previous") == v1
    assert reg.info(v3).tags["rollback.restored_version"] == v2 and reg.info(v2).tags["restored.replaced_version"] == v3
    rollback(reg, lock)
    assert reg.version_of("champion") == v1 and reg.version_of("previous") is None
    with pytest.raises(PromotionRefused, match="previous is not set"):
        rollback(reg, lock)


def test_the_lock_times_out_with_a_refusal(tmp_path):
    from registry.promotion import registry_lock

    with registry_lock(tmp_path / "l"):
        with pytest.raises(PromotionRefused, match="another promotion holds"):
            with registry_lock(tmp_path / "l", timeout_s=0.2):
                pass


@pytest.mark.integration
def test_cli_promote_and_rollback_print_json_and_refuse_with_exit_3(tmp_path):
    from tests.conftest import make_config

    state = tmp_path / "state"
    reg = Registry.from_config(make_config(state))
    v1 = gated(reg, "", decision="none")
    reg.set_alias("champion", v1)
    v2, v3 = gated(reg, v1), gated(reg, v1, decision="keep_champion")

    def rtrl(*args):
        out = subprocess.run(rtrl_argv(*args, overrides=[f'state_dir="{state}"']),
                             capture_output=True, text=True, cwd=REPO, timeout=120)
        return out.returncode, json.loads(out.stdout.strip().splitlines()[-1]), out.stderr

    code, doc, err = rtrl("promote", v3)
    assert code == 3 and doc["promote"]["ok"] is False and "refused" in err and "keep_champion" in err
    code, doc, _ = rtrl("promote", v2)
    assert code == 0 and doc["promote"]["champion"] == v2 and doc["promote"]["previous"] == v1
    code, doc, _ = rtrl("rollback")
    assert code == 0 and doc["rollback"]["champion"] == v1
    assert reg.version_of("champion") == v1


def test_an_orgs_champion_moves_by_the_same_compare_and_swap_against_what_its_org_was_served(setup):
    reg, lock, v1 = setup
    acme = reg.for_org("acme")
    first = gated(acme, v1)                    # the org had no champion: its gate compared with the shared one
    assert promote(acme, first, lock).champion == first
    assert acme.version_of("champion") == first and reg.version_of("champion") == v1     # the shared one stays
    assert reg.version_of("champion@acme") == f"{first}@acme"
    second = gated(acme, v1)                   # gated against the shared champion, but acme has its own now
    with pytest.raises(PromotionRefused, match=f"points to {first}@acme"):
        promote(acme, second, lock)
    third = gated(acme, f"{first}@acme")
    assert promote(acme, third, lock).champion == third and acme.version_of("previous") == first
    assert rollback(acme, lock).champion == first and reg.version_of("champion") == v1


def test_cli_promotes_an_org_version_given_as_its_label(tmp_path):
    from tests.conftest import make_config

    state = tmp_path / "state"
    reg = Registry.from_config(make_config(state))
    v1 = gated(reg, "", decision="none")
    reg.set_alias("champion", v1)
    acme = reg.for_org("acme")
    v = gated(acme, v1)

    def rtrl(*args):
        return subprocess.run(rtrl_argv(*args, overrides=[f'state_dir="{state}"']), capture_output=True, text=True,
                              cwd=REPO, timeout=120)

    out = rtrl("promote", f"{v}@acme")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["promote"]["champion"] == v and acme.version_of("champion") == v
    assert reg.version_of("champion") == v1
    bad = rtrl("rollback", "--org", "a/b")
    assert bad.returncode == 2 and "org id" in bad.stderr
