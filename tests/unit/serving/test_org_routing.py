"""The specialized arm (serving.arms[i].per_org): a request of org O goes to O's specialized champion
(`<alias>@O`) when O has one, else to the arm's alias; an org's champion appears, moves and goes away under
polling without a failed request; the trajectory records the org version's label."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from serving.app import Gateway, create_app
from serving.arms import Fleet
from serving.config import ArmConfig, ServingConfig
from serving.router import Router
from tests.unit.serving.fakes import FakeLoader, FakeRegistry
from tests.waiting import wait_for_async

ARMS = [ArmConfig(name="control", alias="control", share=0.34), ArmConfig(name="treatment", alias="champion",
                                                                           share=0.33),
        ArmConfig(name="specialized", alias="champion", share=0.33, per_org=True)]
ALIASES = {"control": "1", "champion": "2", "champion@acme": "3@acme"}


def fleet(aliases=ALIASES):
    reg, loader = FakeRegistry(aliases), FakeLoader()
    return Fleet(ServingConfig(arms=ARMS, registry_poll_s=0.01, drain_timeout_s=5), reg, loader), reg, loader


def served_version(f: Fleet, arm: str, org: str | None) -> str:
    with f.lease(arm, org) as slot:
        return slot.version


def test_the_specialized_arm_serves_each_org_its_champion_and_the_rest_the_shared_one():
    import asyncio

    async def scenario():
        f, reg, loader = fleet()
        await f.start()
        assert served_version(f, "specialized", "acme") == "3@acme"
        assert served_version(f, "specialized", "globex") == "2"          # no lineage of its own: the shared one
        assert served_version(f, "specialized", None) == "2"
        assert served_version(f, "treatment", "acme") == "2" and served_version(f, "control", "acme") == "1"
        assert f.status()["orgs"] == {"champion@acme": "3@acme"}

        reg.aliases["champion@globex"] = "1@globex"                      # globex's first adapter is promoted
        swaps = await f.poll_once()
        assert [(s.alias, s.to_version, s.arms) for s in swaps] == [("champion@globex", "1@globex", ["specialized"])]
        assert served_version(f, "specialized", "globex") == "1@globex"

        reg.aliases["champion@acme"] = "4@acme"                          # acme's champion moves
        swaps = await f.poll_once()
        assert [(s.alias, s.from_version, s.to_version) for s in swaps] == [("champion@acme", "3@acme", "4@acme")]
        assert served_version(f, "specialized", "acme") == "4@acme"
        old = next(e for e in loader.engines if e.version == "3@acme")
        await wait_for_async(lambda: old.shut_down, 5, "the old acme version's engine drained and shut down")

        del reg.aliases["champion@acme"]                                 # rolled back to nothing: the shared one
        await f.poll_once()
        assert served_version(f, "specialized", "acme") == "2"
        await f.close()

    asyncio.run(scenario())


def test_the_gateway_routes_by_the_callers_org_and_logs_the_org_versions_label():
    scfg = ServingConfig(arms=ARMS)
    events = []
    gw = Gateway(scfg, Fleet(scfg, FakeRegistry(ALIASES), FakeLoader(max_model_len=scfg.max_model_len)),
                 "rtrl-policy", emit=events.append)
    router = Router(scfg.experiment, scfg.arms)
    user = next(f"u{i}" for i in range(200) if router.assign(f"u{i}") == "specialized")
    with TestClient(create_app(gw, poll=False)) as client:
        for org, version in (("acme", "3@acme"), ("globex", "2")):
            r = client.post("/v1/chat/completions", json={
                "model": "x", "user": user, "messages": [{"role": "user", "content": "fix it"}],
                "metadata": {"org_id": org}})
            assert r.status_code == 200, r.text
            assert (r.json()["arm"], r.json()["policy_version"]) == ("specialized", version)
    assert [(e.org_id, e.policy_version) for e in events] == [("acme", "3@acme"), ("globex", "2")]


def test_a_per_org_arm_is_a_flag_of_an_ordinary_arm():
    assert not ArmConfig(name="a", alias="champion", share=1).per_org
    with pytest.raises(ValueError):
        ArmConfig(name="a", alias="champion", share=1, per_org="sometimes")
