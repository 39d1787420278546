"""The promotion lock's compare-and-swap logic, on local storage with a fake clock: the lease object is taken by
one holder at a time, a live lease is waited for (and the wait times out with a refusal naming the holder), a stale
one is taken over only after the same version was seen for a whole ttl, two waiters never both take it over, a
holder stops writing at half its ttl, and release never deletes another holder's lease. Which lock a promotion
takes: the registry's own (configured or under an object-store root), else the caller's flock."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from registry.client import default_promotion_lock
from registry.promotion import ObjectLease, PromotionRefused, lock_for, registry_lock
from schemas import storage


class Clock:
    def __init__(self):
        self.t = 100.0
        self.on_sleep = None

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s
        if self.on_sleep is not None:
            self.on_sleep(self.t)


def lease(loc, clock: Clock, ttl_s: float = 10.0, timeout_s: float = 60.0) -> ObjectLease:
    return ObjectLease(loc, ttl_s=ttl_s, timeout_s=timeout_s, poll_s=1.0, clock=clock, sleep=clock.sleep)


def test_one_holder_at_a_time_and_release_frees_it(tmp_path):
    clock, loc = Clock(), tmp_path / "locks" / "promotion.lease"
    a = lease(loc, clock).acquire()
    body = json.loads(loc.read_bytes())
    assert a.version is not None and a.taken_over is None and {"owner", "by", "pid", "ttl_s"} <= body.keys()
    with pytest.raises(PromotionRefused, match=r"another promotion holds the lease .* \(by .*@") as e:
        lease(loc, clock, ttl_s=1000, timeout_s=5).acquire()
    assert "for more than 5 s" in str(e.value) and clock.t >= 105
    assert a.release() is True and not loc.exists()
    b = lease(loc, clock).acquire()        # free again: taken at once
    assert b.version != a.version           # every lease body is unique: an old version never matches a new one
    assert b.release() is True


def test_a_stale_lease_is_taken_over_only_after_a_whole_ttl_of_the_same_version(tmp_path):
    clock, loc = Clock(), tmp_path / "promotion.lease"
    storage.create_if_absent(loc, b'{"by": "crashed@host-a", "owner": "o1"}')
    start = clock.t
    b = lease(loc, clock, ttl_s=10).acquire()
    assert b.taken_over == {"by": "crashed@host-a", "owner": "o1"}
    assert 10 <= clock.t - start <= 11     # watched for one ttl (its own clock), then replaced if unchanged
    assert json.loads(loc.read_bytes())["owner"] != "o1"


def test_a_lease_that_changes_hands_restarts_the_watch(tmp_path):
    """A busy lock (new holders one after the other) is never mistaken for a stale one."""
    clock, loc = Clock(), tmp_path / "promotion.lease"
    storage.create_if_absent(loc, b'{"owner": "h0"}')
    n = {"i": 0}

    def new_holder(t):
        if t < 140:           # every 6 s a new holder takes the (released) lease: each seen for less than a ttl
            if int(t) % 6 == 0:
                n["i"] += 1
                v = storage.read_versioned(loc)[1]
                storage.delete_if_version(loc, v)
                storage.create_if_absent(loc, json.dumps({"owner": f"h{n['i']}"}).encode())

    clock.on_sleep = new_holder
    b = lease(loc, clock, ttl_s=10, timeout_s=100).acquire()
    assert clock.t >= 140 and b.taken_over is not None and b.taken_over["owner"] == f"h{n['i']}"


def test_two_waiters_never_both_take_over_the_same_stale_lease(tmp_path):
    clock, loc = Clock(), tmp_path / "promotion.lease"
    storage.create_if_absent(loc, b'{"owner": "dead"}')
    stale = storage.read_versioned(loc)[1]
    first = lease(loc, clock).acquire()   # took it over
    # the second waiter watched the same stale version for a ttl too: its conditional replace must fail
    assert storage.replace_if_version(loc, b'{"owner": "second"}', stale) is None
    assert json.loads(loc.read_bytes())["owner"] not in ("dead", "second")
    assert first.release() is True


def test_the_holder_stops_writing_at_half_its_ttl_and_never_deletes_a_successor(tmp_path):
    clock, loc = Clock(), tmp_path / "promotion.lease"
    a = lease(loc, clock, ttl_s=10).acquire()
    clock.t += 4.9
    a.check()
    clock.t += 0.1
    with pytest.raises(PromotionRefused, match="half its ttl"):
        a.check()
    clock.t += 10  # a waiter on another host took it over meanwhile
    b = lease(loc, clock, ttl_s=10).acquire()
    assert b.taken_over is not None
    assert a.release() is False and loc.exists()      # a's conditional delete does not touch b's lease
    assert b.release() is True and not loc.exists()
    with pytest.raises(PromotionRefused, match="not held"):
        a.check()


def test_lease_arguments_are_checked(tmp_path):
    with pytest.raises(ValueError):
        ObjectLease(tmp_path / "x", ttl_s=0)


def test_registry_lock_on_a_local_path_is_the_flock(tmp_path):
    lock = tmp_path / "sub" / "registry.promotion.lock"
    with registry_lock(lock) as check:
        check()                           # a no-op for the flock
        with pytest.raises(PromotionRefused, match="another promotion holds"):
            with registry_lock(lock, timeout_s=0.1):
                pass
    assert lock.exists()


class _Reg:
    def __init__(self, promotion_lock):
        self.promotion_lock = promotion_lock


def test_a_promotion_takes_the_registrys_own_lock_else_the_callers(tmp_path):
    assert lock_for(_Reg(None), tmp_path / "p.lock") == tmp_path / "p.lock"
    assert lock_for(object(), str(tmp_path / "p.lock")) == tmp_path / "p.lock"   # any registry-like object
    assert lock_for(_Reg("s3://b/locks//x.lease"), tmp_path / "p.lock") == "s3://b/locks/x.lease"
    assert lock_for(_Reg(Path("/shared/p.lock")), tmp_path / "p.lock") == Path("/shared/p.lock")
    assert default_promotion_lock(tmp_path / "artifacts", "policy") is None
    assert default_promotion_lock("s3://b/mlflow/", "policy") == "s3://b/mlflow/_rtrl-locks/promotion-policy.lease"
