"""Staging a version for evaluation over fake engines: pinned requests reach it and are never logged, no arm gets
it, promoting it is a switch without a load, unstaging retires it unless an alias or another stage of it (gates run
at once) holds it, and a forgotten stage expires."""

from __future__ import annotations

import asyncio

from starlette.testclient import TestClient

from schemas.api_keys import KeyStore
from serving.app import EVAL_ARM, Gateway, create_app
from serving.arms import Fleet
from serving.config import ServingConfig
from tests.unit.serving.fakes import FakeLoader, FakeRegistry, fake_fleet
from tests.waiting import wait_for_async


def test_a_staged_version_is_promoted_by_a_switch_without_loading_again():
    async def scenario():
        f, reg, loader = fake_fleet({"control": "1", "champion": "1"})
        await f.start()
        loader.load_delay_s = 0.05
        assert await f.stage("2", cpu_cores="1") >= 0.05                   # the seconds it took, the load's included
        loader.load_delay_s = 0.0
        assert [e.version for e in loader.engines] == ["1", "2"] and loader.cpu_cores["2"] == "1"
        assert f.arm_versions() == {"control": "1", "treatment": "1"}      # no arm serves a staged version
        with f.lease_version("2") as slot:
            assert slot.version == "2"
        reg.aliases["champion"] = "2"
        (swap,) = await f.poll_once()
        assert swap.to_version == "2" and len(loader.engines) == 2          # no second load
        assert await f.unstage("2") is True
        assert not loader.engines[1].shut_down                             # the alias holds it now
        assert f.arm_versions() == {"control": "1", "treatment": "2"}
        await f.close()

    asyncio.run(scenario())


def test_unstaging_a_rejected_candidate_shuts_its_engine_down_and_staging_twice_loads_once():
    async def scenario():
        f, reg, loader = fake_fleet({"control": "1", "champion": "1"})
        await f.start()
        await f.stage("3")
        assert await f.stage("3") == 0
        assert len(loader.engines) == 2
        await f.stage("1")                                                  # the champion: already loaded
        assert len(loader.engines) == 2
        assert await f.unstage("3") is True                                 # two gates staged it: one is done,
        with f.lease_version("3") as slot:                                  # the other still runs on it
            assert slot.version == "3"
        assert await f.unstage("3") is True and await f.unstage("3") is False
        assert await f.unstage("1") is True
        await wait_for_async(lambda: loader.engines[1].shut_down, 5, "v3's engine shut down")
        assert not loader.engines[0].shut_down
        assert f.staged == []
        try:
            with f.lease_version("3"):
                raise AssertionError("an unstaged version was leased")
        except LookupError:
            pass
        await f.close()

    asyncio.run(scenario())


def test_a_stage_no_alias_took_expires_after_its_ttl():
    async def scenario():
        f, reg, loader = fake_fleet({"control": "1", "champion": "1"}, stage_ttl_s=0.05)
        await f.start()
        await f.stage("4")
        await asyncio.sleep(0.1)  # wall time past the 0.05 s TTL (the fleet reads time.monotonic: no clock to inject)
        await f.poll_once()
        assert f.staged == []
        await wait_for_async(lambda: loader.engines[1].shut_down, 5, "the expired stage's engine shut down")
        await f.close()

    asyncio.run(scenario())


def test_pinned_requests_reach_the_staged_version_and_are_never_logged(tmp_path):
    scfg = ServingConfig()
    keys = KeyStore(tmp_path / "keys.json")
    admin = {"authorization": f"Bearer {keys.create('gate', org='*', role='admin')}"}
    loader, events = FakeLoader(), []
    gw = Gateway(scfg, Fleet(scfg, FakeRegistry({"control": "1", "champion": "1"}), loader), "rtrl-policy",
                 emit=events.append)
    body = {"user": "gate", "messages": [{"role": "user", "content": "fix it"}]}
    with TestClient(create_app(gw, poll=False, keys=keys)) as client:
        r = client.post("/v1/chat/completions", json={**body, "model": "rtrl-policy/v5"})
        assert r.status_code == 404 and "not staged" in r.json()["error"]["message"]
        assert client.post("/admin/stage", json={"version": "5"}).status_code == 401      # no admin key
        assert client.post("/admin/stage", json={"version": "five"}, headers=admin).status_code == 400
        assert client.post("/admin/stage", json={"version": "5", "cpu_cores": "1; rm -rf /"},
                           headers=admin).status_code == 400
        r = client.post("/admin/stage", json={"version": 5}, headers=admin)
        assert r.status_code == 200 and r.json()["staged"] == ["5"]
        assert client.get("/health").json()["staged"] == ["5"]
        r = client.post("/v1/chat/completions", json={**body, "model": "rtrl-policy/v5"})
        assert r.status_code == 200 and r.json()["policy_version"] == "5" and r.json()["arm"] == EVAL_ARM
        assert events == []                                                 # evaluation is not training data
        r = client.post("/v1/chat/completions", json={**body, "model": "anything-else"})
        assert r.json()["policy_version"] == "1" and len(events) == 1       # routed and logged as usual
        assert client.post("/admin/unstage", json={"version": "5"}, headers=admin).json()["unstaged"] is True
        r = client.post("/v1/chat/completions", json={**body, "model": "rtrl-policy/v5"})
        assert r.status_code == 404
        # an org's specialized version is staged and pinned by its label (the org gate, evals/org_gate.py)
        assert client.post("/admin/stage", json={"version": "3@o1"}, headers=admin).json()["staged"] == ["3@o1"]
        r = client.post("/v1/chat/completions", json={**body, "model": "rtrl-policy/v3@o1"})
        assert r.status_code == 200 and r.json()["policy_version"] == "3@o1"
        assert client.post("/admin/stage", json={"version": "3@o/1"}, headers=admin).status_code == 400
