"""Spare engines over fake engines (serving/spares.py): a stage or swap takes an idle engine and reloads it instead
of starting one, serving's start fills the pool one engine at a time, a drained retiree joins the pool, a failed
reload falls back to a new engine, a stage on other cores moves the spare there (one left to vLLM's choice of cores
starts its own engine), a promoted spare moves to the arms' cores, and none is kept when `spare_engines` is 0."""

from __future__ import annotations

import asyncio

from serving.protocol import SampleSpec, Sampling
from serving.arms import Fleet
from tests.unit.serving.fakes import fake_fleet
from tests.waiting import wait_for_async


async def until(check, timeout_s: float = 5.0) -> None:
    await wait_for_async(check, timeout_s, "condition", interval_s=0.01)


async def answer(f: Fleet, version: str) -> str:
    with f.lease_version(version) as slot:
        return (await slot.engine.sample([1, 2], SampleSpec(64, Sampling(1.0))))[0].text


def test_a_staged_version_takes_the_warm_spare_and_returns_to_the_pool_when_unstaged():
    async def scenario():
        f, reg, loader = fake_fleet({"control": "1", "champion": "1"}, spare_engines=1, spare_cpu_cores="1")
        await f.start()
        await until(lambda: f.spares.status()["idle"] == 1)
        assert [(e.version, e.cpu_cores) for e in loader.engines] == [("1", ""), ("1", "1")]
        spare = loader.engines[1]
        await f.stage("2", cpu_cores="1")
        assert len(loader.engines) == 2 and spare.reloads == ["2"]        # reloaded, no engine started
        assert await answer(f, "2") == "answer from v2"
        assert f.spares.status()["idle"] == 0 and f.spares.status()["reloads"] == 1
        await f.unstage("2")                                               # rejected: it retires
        await until(lambda: f.spares.status()["idle"] == 1)
        assert not spare.shut_down and f.spares.status()["kept_retired"] == 1
        assert len(loader.engines) == 2                                    # the retiree refilled the pool
        await f.close()
        assert spare.shut_down and all(e.shut_down for e in loader.engines)

    asyncio.run(scenario())


def test_serving_start_fills_a_pool_of_two_spares_one_engine_start_at_a_time():
    async def scenario():
        f, reg, loader = fake_fleet({"control": "1", "champion": "1"}, spare_engines=2, spare_cpu_cores="1")
        loader.load_delay_s = 0.05
        await f.start()
        await until(lambda: f.spares.status()["idle"] == 2)
        assert [(e.version, e.cpu_cores) for e in loader.engines] == [("1", ""), ("1", "1"), ("1", "1")]
        assert loader.most_loading == 1 and f.spares.status()["started"] == 2
        await f.stage("2", cpu_cores="1")                                 # two stages in a row: both reloads
        await f.stage("3", cpu_cores="1")
        assert len(loader.engines) == 3 and f.spares.status()["reloads"] == 2
        await f.close()

    asyncio.run(scenario())


def test_a_promoted_spare_moves_to_the_arms_cores_and_back_to_the_spare_cores_when_it_retires():
    async def scenario():
        f, reg, loader = fake_fleet({"control": "1", "champion": "1"}, cpu_cores="0", spare_engines=1,
                                    spare_cpu_cores="1")
        await f.start()
        await until(lambda: f.spares.status()["idle"] == 1)
        spare = loader.engines[1]
        await f.stage("2", cpu_cores="1")                                  # the gate's candidate, on the spare
        assert spare.reloads == ["2"] and spare.cpu_cores == "1"
        reg.aliases["champion"] = "2"
        await f.poll_once()                                                # promoted: it serves treatment now
        assert spare.cpu_cores == "0" and spare.binds == ["0"]
        await f.unstage("2")
        await f.stage("3", cpu_cores="1")                                  # v1 serves control: a new engine
        reg.aliases["champion"] = "3"
        await f.poll_once()
        await until(lambda: f.spares.status()["idle"] == 1)                # v2's engine retired into the pool
        assert spare.binds == ["0", "1"] and f.spares.status()["kept_retired"] == 1
        await f.close()

    asyncio.run(scenario())


def test_a_promoted_stage_is_switched_in_and_the_drained_old_champion_becomes_the_spare():
    async def scenario():
        f, reg, loader = fake_fleet({"control": "1", "champion": "2"}, spare_engines=1)
        await f.start()
        await until(lambda: f.spares.status()["idle"] == 1)
        old_champion = next(e for e in loader.engines if e.version == "2")
        await f.stage("3")
        reg.aliases["champion"] = "3"
        (swap,) = await f.poll_once()
        assert (swap.from_version, swap.to_version, len(loader.engines)) == ("2", "3", 3)  # the staged engine: no load
        assert f.arm_versions() == {"control": "1", "treatment": "3"}
        await until(lambda: swap.old_engine_kept_spare)
        assert not old_champion.shut_down and not swap.old_engine_shut_down
        await f.unstage("3")                                               # deploy: the alias holds it now
        # pool full: no new spare started (a start would be a task begun at once: Spares.replenish) nor made
        assert not f.spares.status()["loading"] and len(loader.engines) == 3
        await f.stage("4")
        assert old_champion.reloads == ["4"] and await answer(f, "4") == "answer from v4"
        await f.close()

    asyncio.run(scenario())


def test_a_spare_that_fails_to_reload_is_shut_down_and_a_new_engine_serves_the_stage():
    async def scenario():
        f, reg, loader = fake_fleet({"control": "1", "champion": "1"}, spare_engines=1)
        await f.start()
        await until(lambda: f.spares.status()["idle"] == 1)
        spare = loader.engines[1]
        spare.reload_fails = True
        await f.stage("2")
        assert spare.shut_down and [e.version for e in loader.engines] == ["1", "1", "2"]
        assert await answer(f, "2") == "answer from v2"
        await f.close()

    asyncio.run(scenario())


def test_a_stage_on_other_cores_takes_the_spare_and_moves_it_there():
    async def scenario():
        f, reg, loader = fake_fleet({"control": "1", "champion": "1"}, spare_engines=1, spare_cpu_cores="1")
        await f.start()
        await until(lambda: f.spares.status()["idle"] == 1)
        spare = loader.engines[1]
        await f.stage("2", cpu_cores="0")
        assert spare.reloads == ["2"] and spare.binds == ["0"] and len(loader.engines) == 2
        assert f.spares.status()["idle"] == 0
        await f.close()

    asyncio.run(scenario())


def test_a_stage_left_to_vllms_choice_of_cores_starts_its_own_engine_while_the_spares_are_bound():
    async def scenario():
        f, reg, loader = fake_fleet({"control": "1", "champion": "1"}, spare_engines=1, spare_cpu_cores="1")
        await f.start()
        await until(lambda: f.spares.status()["idle"] == 1)
        await f.stage("2")
        assert loader.engines[1].reloads == [] and loader.cpu_cores["2"] == "" and len(loader.engines) == 3
        assert f.spares.status()["idle"] == 1
        await f.close()

    asyncio.run(scenario())


def test_without_spares_no_engine_is_kept_and_a_retiree_shuts_down():
    async def scenario():
        f, reg, loader = fake_fleet({"control": "1", "champion": "1"})
        await f.start()
        await f.stage("2")
        await f.unstage("2")
        await until(lambda: loader.engines[1].shut_down)
        assert len(loader.engines) == 2 and f.spares.status() == {
            "capacity": 0, "cores": "", "idle": 0, "loading": False, "reloads": 0, "started": 0, "kept_retired": 0}
        await f.close()

    asyncio.run(scenario())
