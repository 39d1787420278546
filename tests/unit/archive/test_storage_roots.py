"""The archive over `schemas.storage`: a URL root from config, the lease that locks an object-store root (its logic
run here on the local conditional writes; against a real S3 server in tests/integration/test_archive_s3.py)."""

from __future__ import annotations

import json
import os
import time

import pytest

from infra.config import load_config
from pipelines.archive import layout, lock
from pipelines.archive.lock import FileLock, RootLock, S3Lease
from pipelines.archive.manifest import ArchiveError
from pipelines.archive.reader import read_events
from tests.unit.archive.helpers import FakeLog, all_types, archive_all


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


def test_a_lease_refuses_a_second_holder_until_released(lease_root):
    first = S3Lease(lease_root, ttl_s=60)
    first.acquire()
    held = json.loads((lease_root / layout.LOCK_FILE).read_text())
    assert held["pid"] == os.getpid() and held["expires_at"] > time.time() + 50
    assert S3Lease.holder(lease_root) == os.getpid()
    second = S3Lease(lease_root, ttl_s=60)
    with pytest.raises(ArchiveError, match="another archiver .* holds the lease"):
        second.acquire()
    first.release()
    assert not (lease_root / layout.LOCK_FILE).exists()
    second.acquire()
    second.release()


def test_an_expired_lease_is_taken_over_and_its_old_holder_stops_at_its_next_renewal(lease_root):
    crashed = S3Lease(lease_root, ttl_s=0.2)
    crashed.acquire()
    time.sleep(0.3)  # it stopped renewing: the lease expired
    successor = S3Lease(lease_root, ttl_s=60)
    successor.acquire()
    assert json.loads((lease_root / layout.LOCK_FILE).read_text())["owner"] == successor.owner
    with pytest.raises(ArchiveError, match="lost the lease"):
        crashed.renew(force=True)
    crashed.release()  # releasing a lost lease leaves the successor's alone
    assert json.loads((lease_root / layout.LOCK_FILE).read_text())["owner"] == successor.owner
    successor.renew(force=True)
    successor.release()


def test_renewal_extends_the_lease_and_is_rate_limited(lease_root):
    lease = S3Lease(lease_root, ttl_s=0.6)
    lease.acquire()
    before = json.loads((lease_root / layout.LOCK_FILE).read_text())["expires_at"]
    lease.renew()  # within ttl/3 of the last renewal: nothing written
    assert json.loads((lease_root / layout.LOCK_FILE).read_text())["expires_at"] == before
    time.sleep(0.25)
    lease.renew()
    assert json.loads((lease_root / layout.LOCK_FILE).read_text())["expires_at"] > before
    lease.release()


def test_a_server_that_ignores_conditional_writes_is_refused(lease_root, monkeypatch):
    monkeypatch.setattr(lock.storage, "create_if_absent", lambda loc, data: "etag")  # If-None-Match ignored
    with pytest.raises(ArchiveError, match="does not honour conditional writes"):
        S3Lease(lease_root).acquire()
