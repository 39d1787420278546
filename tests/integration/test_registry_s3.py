"""The MLflow registry with its artifact root on S3, against a real S3 server (moto's, as the stack runs it) and a
real MLflow store: a registered checkpoint's files land in the bucket and nothing under a local artifact folder,
and come back byte for byte; promoters in separate processes, sharing no lock file, race through the lease object
in the bucket and exactly one wins; rollback is still one call; a stale lease is taken over, a live one is not.
Also the other locations that take object-store URLs: quality reports and `rtrl replay`'s archive check
on s3:// URLs."""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from pathlib import Path

import pytest

from infra.config import load_config
from registry.client import Registry, content_digest
from registry.promotion import ObjectLease, PromotionRefused, lock_for, promote, rollback
from schemas import storage

pytestmark = pytest.mark.integration


def config(state: Path, db: Path, root: str, *extra: str):
    return load_config(None, [f'state_dir="{state}"', f'mlflow.tracking_uri="sqlite:///{db}"',
                              f'mlflow.artifact_root="{root}"', 'mlflow.registered_model="policy"', *extra])


def checkpoint(folder: Path, seed: int = 0) -> Path:
    (folder / "tok").mkdir(parents=True)
    (folder / "config.json").write_text('{"model_type": "tiny"}')
    (folder / "model.safetensors").write_bytes(os.urandom(64 * 1024) + bytes([seed]))
    (folder / "tok" / "tokenizer.json").write_text('{"v": %d}' % seed)
    return folder


def gated(reg: Registry, folder: Path, against: str) -> str:
    v = reg.register(folder)
    reg.set_version_tags(v, {"gate.decision": "promote", "gate.champion_version": against, "gate.run_id": f"r{v}"})
    return v


@pytest.fixture
def s3_registry(s3_server, tmp_path, monkeypatch):
    """A registry on a local SQLite store whose artifact root is a fresh s3:// prefix (MLFLOW_S3_ENDPOINT_URL is
    set by the registry and undone after the test)."""
    monkeypatch.delenv("MLFLOW_S3_ENDPOINT_URL", raising=False)
    root = s3_server.url("mlflow")
    cfg = config(tmp_path / "host-a", tmp_path / "mlflow.db", root)
    return Registry.from_config(cfg), root, cfg


def test_a_checkpoint_registered_on_s3_lands_in_the_bucket_and_downloads_identical(s3_registry, s3_server,
                                                                                  tmp_path):
    from infra.stack.mlflow_store import MlflowStore

    reg, root, cfg = s3_registry
    assert reg.artifact_root == root and os.environ["MLFLOW_S3_ENDPOINT_URL"] == s3_server.endpoint
    MlflowStore(cfg.mlflow, cfg.mlflow_tracking_uri(), cfg.path_or_default(cfg.mlflow.artifact_root, "x"),
                cfg.state_path).ensure_store()   # `rtrl up`'s store step: no folder made for an s3:// root
    src = checkpoint(tmp_path / "ckpt")
    v = reg.register(src)

    exp = reg.client.get_experiment_by_name("rtrl-checkpoints")
    assert exp.artifact_location == f"{root}/rtrl-checkpoints"
    assert reg.client.get_run(reg.info(v).run_id).info.artifact_uri.startswith(f"{root}/rtrl-checkpoints/")
    keys = s3_server.keys(root)
    assert sorted(k.rsplit("/checkpoint/", 1)[1] for k in keys if "/checkpoint/" in k) == [
        "config.json", "model.safetensors", "tok/tokenizer.json"]
    # nothing written to a local artifact folder: not the default one, not a mangled "s3:" one
    assert not (cfg.state_path / "mlflow-artifacts").exists()
    assert not any(p.name.startswith("s3:") for p in [*tmp_path.rglob("*"), *Path.cwd().iterdir()])

    got = reg.local_path(v)
    assert got.is_relative_to(cfg.state_path / "checkpoints")
    assert content_digest(got) == content_digest(src) == reg.digest(v)
    assert sorted(p.relative_to(got).as_posix() for p in got.rglob("*") if p.is_file()) == [
        "config.json", "model.safetensors", "tok/tokenizer.json"]
    assert (got / "model.safetensors").read_bytes() == (src / "model.safetensors").read_bytes()

    # a second registry (another host: its own state dir and cache) downloads the same files from the bucket
    other = Registry.from_config(config(tmp_path / "host-b", tmp_path / "mlflow.db", root))
    assert content_digest(other.local_path(v)) == content_digest(src)


class SlowRegistry(Registry):
    """Reads the champion, then waits: without a lock every promoter reads the same champion and wins."""

    def version_of(self, alias):
        v = super().version_of(alias)
        time.sleep(0.5)  # the slow read is the behaviour under test: the window the lock must close
        return v


def _race(state: str, db: str, root: str, version: str, shared_lock: bool, barrier, out) -> None:
    """One promoter "host": its own state dir and its own local lock file; the lease (if any) in the bucket."""
    cfg = config(Path(state), Path(db), root)
    reg = SlowRegistry.from_config(cfg)
    if not shared_lock:
        reg.promotion_lock = None      # the control: each host's own flock, as before this lease existed
    own_lock = Path(state) / "registry.promotion.lock"
    used = lock_for(reg, own_lock)
    barrier.wait()
    try:
        res = promote(reg, version, own_lock)
        out.put((version, "ok", res.champion, str(used)))
    except PromotionRefused as e:
        out.put((version, "refused", str(e), str(used)))
    except Exception as e:  # noqa: BLE001 - the control only: both passed the check and collided in the store
        if shared_lock:
            raise
        out.put((version, "collided", f"{type(e).__name__}: {e}", str(used)))


def _run_race(tmp_path: Path, root: str, versions: list[str], shared_lock: bool) -> list[tuple]:
    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(len(versions)), ctx.Queue()
    procs = [ctx.Process(target=_race, args=(str(tmp_path / f"host-{i}-{shared_lock}"), str(tmp_path / "mlflow.db"),
                                             root, v, shared_lock, barrier, out))
             for i, v in enumerate(versions)]
    for p in procs:
        p.start()
    try:
        results = sorted(out.get(timeout=120) for _ in procs)
    finally:
        for p in procs:
            p.join(timeout=30)
    assert all(p.exitcode == 0 for p in procs)
    return results


@pytest.mark.full   # the default tier's time budget (docs/testing.md)
def test_promoters_in_separate_processes_race_through_the_s3_lease_and_exactly_one_wins(s3_registry, tmp_path):
    reg, root, _ = s3_registry
    v1 = reg.register(checkpoint(tmp_path / "c1", 1))
    reg.set_alias("champion", v1)
    candidates = [gated(reg, checkpoint(tmp_path / f"c{i}", i), v1) for i in (2, 3, 4)]

    results = _run_race(tmp_path, root, candidates, shared_lock=True)
    assert {r[3] for r in results} == {f"{root}/_rtrl-locks/promotion-policy.lease"}  # the lease, not a file
    outcomes = sorted(r[1] for r in results)
    assert outcomes == ["ok", "refused", "refused"], results
    winner = next(r[0] for r in results if r[1] == "ok")
    for r in results:
        if r[1] == "refused":
            assert "champion moved since the eval" in r[2] and f"points to {winner}" in r[2]
    assert reg.version_of("champion") == winner and reg.version_of("previous") == v1
    assert not storage.exists(f"{root}/_rtrl-locks/promotion-policy.lease")   # released

    # rollback: still one call, under the same lease
    res = rollback(reg, tmp_path / "unused.lock")
    assert (res.champion, reg.version_of("champion"), reg.version_of("previous")) == (v1, v1, None)

    # the control: the same race with each process's own flock lets every promoter past the compare-and-swap:
    # both win, or both write and the store's own uniqueness rejects the second alias row (SQLite's UNIQUE
    # constraint, a collision, not a refusal) - either way nothing serialised them
    control = _run_race(tmp_path, root, [gated(reg, checkpoint(tmp_path / f"d{i}", 10 + i), v1) for i in (1, 2)],
                        shared_lock=False)
    kinds = sorted(r[1] for r in control)
    assert kinds in (["ok", "ok"], ["collided", "ok"]), control
    assert all("UNIQUE constraint" in r[2] for r in control if r[1] == "collided"), control


def test_a_stale_lease_on_s3_is_taken_over_after_its_ttl_and_a_live_one_is_not(s3_server):
    url = f"{s3_server.url('lease')}/promotion.lease"
    assert storage.create_if_absent(url, b'{"by": "crashed@host-a", "owner": "x"}') is not None  # a crashed holder
    t0 = time.monotonic()
    with ObjectLease(url, ttl_s=1.0, timeout_s=10, poll_s=0.05) as lease:
        assert time.monotonic() - t0 >= 1.0 and lease.taken_over["by"] == "crashed@host-a"
        lease.check()   # just taken: half its ttl left
        with pytest.raises(PromotionRefused, match="another promotion holds the lease"):
            ObjectLease(url, ttl_s=30, timeout_s=0.5, poll_s=0.05).acquire()   # live: not taken over
        with pytest.raises(PromotionRefused, match="half its ttl"):
            lease.check()   # 0.5 s later: the holder must not write any more
    assert not storage.exists(url)


def test_quality_reports_and_the_replay_archive_check_take_s3_urls(s3_server, tmp_path, monkeypatch):
    from datetime import datetime, timezone

    from infra.commands.replay import archive_problem
    from pipelines.quality import read_report, write_report
    from pipelines.quality.result import RuleResult, SuiteResult

    monkeypatch.chdir(tmp_path)
    rule = RuleResult("reward_within_clip", "expect_column_values_to_be_between", "reward", False,
                      description="reward in [-1, 1]", observed="1 of 3 rows",
                      unexpected_examples=[{"request_id": "r-2"}])
    suite = SuiteResult("rewards", False, [rule], 3, 0.01)
    url = s3_server.url("quality")
    paths = write_report([suite], url, meta={"rewards": "s3://b/rewards"})
    assert paths["json"] == f"{url}/report.json"
    assert [k.rsplit("/", 1)[1] for k in s3_server.keys(url)] == ["report.html", "report.json", "report.md"]
    doc = read_report(url)
    assert doc["success"] is False and SuiteResult.from_dict(doc["suites"][0]) == suite
    assert "| reward_within_clip | FAIL |" in storage.read_text(paths["md"])
    assert list(tmp_path.iterdir()) == []    # nothing written locally (no "s3:" folder)

    t0, t1 = datetime(2026, 11, 1, tzinfo=timezone.utc), datetime(2026, 11, 2, tzinfo=timezone.utc)
    missing = s3_server.url("archive")
    assert archive_problem(missing, t0, t1).startswith(f"no archive at {missing}: build one")
