"""The archive over `schemas.storage`: a URL root from config, the lease that locks an object-store root (its logic
run here on the local conditional writes, its expiry and renewals on a fake clock; against a real S3 server in
tests/integration/test_archive_s3.py)."""

from __future__ import annotations

import json
import os

import pytest

from infra.config import load_config
from pipelines.archive import layout, lock
from pipelines.archive.lock import FileLock, RootLock, S3Lease
from pipelines.archive.manifest import ArchiveError
from pipelines.archive.reader import read_events
from tests.unit.archive.helpers import FakeClock, FakeLog, all_types, archive_all


def test_archive_root_keeps_an_object_store_url_a_url(tmp_path):
    cfg = load_config(None, [f'state_dir="{tmp_path}"', 'archive.output_dir="s3://bkt/events/"'])
    assert layout.archive_root(cfg) == "s3://bkt/events"
    cfg = load_config(None, [f'state_dir="{tmp_path}"'])
    assert layout.archive_root(cfg) == tmp_path / "archive"


def test_root_lock_is_an_flock_locally_and_a_lease_in_an_object_store(tmp_path):
    assert isinstance(RootLock(tmp_path)._impl, FileLock)
    assert isinstance(RootLock(str(tmp_path))._impl, FileLock)
    impl = RootLock("s3://bkt/root")._impl
    assert isinstance(impl, S3Lease) and impl.path == "s3://bkt/root/_archiver.lock"


def test_a_string_root_archives_and_reads_like_a_path_root(tmp_path):
    log = FakeLog(partitions=2)
    log.produce(all_types(20))
    archive_all(str(tmp_path / "a"), log)
    archive_all(tmp_path / "b", log)
    assert read_events(str(tmp_path / "a")).drop("_topic").equals(read_events(tmp_path / "b").drop("_topic"))


@pytest.fixture
def lease_root(tmp_path, monkeypatch):
    """S3Lease over a local folder: its logic is the same on the local conditional writes."""
    monkeypatch.setattr(lock, "_CONDITIONAL_OK", set())
    return tmp_path


def lease(root, clock: FakeClock, ttl_s: float = 60.0) -> S3Lease:
    """A lease whose wall clock (expiry) and monotonic clock (renewal pace) are both `clock`: time passes when the
    test advances it."""
    return S3Lease(root, ttl_s=ttl_s, wall_clock=clock, clock=clock)


def held(root) -> dict:
    return json.loads((root / layout.LOCK_FILE).read_text())


def test_a_lease_refuses_a_second_holder_until_released(lease_root):
    clock = FakeClock()
    first = lease(lease_root, clock)
    first.acquire()
    assert held(lease_root)["pid"] == os.getpid() and held(lease_root)["expires_at"] == clock() + 60
    assert S3Lease.holder(lease_root) == os.getpid()
    second = lease(lease_root, clock)
    with pytest.raises(ArchiveError, match="another archiver .* holds the lease"):
        second.acquire()
    first.release()
    assert not (lease_root / layout.LOCK_FILE).exists()
    second.acquire()
    second.release()


def test_an_expired_lease_is_taken_over_and_its_old_holder_stops_at_its_next_renewal(lease_root):
    clock = FakeClock()
    crashed = lease(lease_root, clock, ttl_s=30)
    crashed.acquire()
    clock.advance(29)  # it stopped renewing, but its lease lasts ttl_s after its last renewal
    with pytest.raises(ArchiveError, match="holds the lease"):
        lease(lease_root, clock).acquire()
    clock.advance(2)  # 31 s without a renewal: the lease expired
    successor = lease(lease_root, clock)
    successor.acquire()
    assert held(lease_root)["owner"] == successor.owner
    with pytest.raises(ArchiveError, match="lost the lease"):
        crashed.renew(force=True)
    crashed.release()  # releasing a lost lease leaves the successor's alone
    assert held(lease_root)["owner"] == successor.owner
    successor.renew(force=True)
    successor.release()


def test_renewal_extends_the_lease_and_is_rate_limited(lease_root):
    clock = FakeClock()
    renewing = lease(lease_root, clock, ttl_s=30)
    renewing.acquire()
    before = held(lease_root)["expires_at"]
    clock.advance(9)
    renewing.renew()  # within ttl/3 (10 s) of the last renewal: nothing written
    assert held(lease_root)["expires_at"] == before
    clock.advance(2)
    renewing.renew()  # 11 s after it: extended to ttl_s from now
    assert held(lease_root)["expires_at"] == before + 11 == clock() + 30
    renewing.release()


def test_a_server_that_ignores_conditional_writes_is_refused(lease_root, monkeypatch):
    monkeypatch.setattr(lock.storage, "create_if_absent", lambda loc, data: "etag")  # If-None-Match ignored
    with pytest.raises(ArchiveError, match="does not honour conditional writes"):
        S3Lease(lease_root).acquire()
