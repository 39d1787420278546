"""Hot swaps on GPUs over fake engines (serving/arms.py): a checkpoint of the same architecture is reloaded into the
old engine (no second engine on the device) after the old version's requests finish on the old weights, while new
requests wait for the new ones and none fails; another architecture, a shared engine or `swap = "blue_green"` keep
the blue/green swap; a failed reload falls back to a fresh engine; each alias's engine starts on its arms' devices;
spares and core moves are CPU-only."""

from __future__ import annotations

import asyncio

from serving.config import ArmConfig
from serving.protocol import SampleSpec, Sampling
from tests.unit.serving.fakes import checkpoint_config, fake_fleet
from tests.waiting import wait_for_async


async def request(f, arm: str) -> tuple[str, str]:
    """(the version the answer is attributed to, the weights that sampled it), as the gateway leases."""
    with f.lease(arm) as slot:
        await slot.wait_ready()
        (gen,) = await slot.engine.sample([1, 2], SampleSpec(64, Sampling(1.0)))
        return slot.version, gen.text.removeprefix("answer from v")


def folders(tmp_path, **archs) -> dict:
    return {v: checkpoint_config(tmp_path / f"v{v}", **cfg) for v, cfg in archs.items()}


def test_a_same_architecture_swap_on_a_gpu_reloads_the_one_engine_and_fails_no_request(tmp_path):
    async def scenario():
        f, reg, loader = fake_fleet({"control": "1", "champion": "2"}, device="cuda",
                                    folders=folders(tmp_path, **{"1": {}, "2": {}, "3": {}}))
        await f.start()
        old = next(e for e in loader.engines if e.version == "2")
        old.delay_s, old.reload_s = 0.2, 0.1
        in_flight = [asyncio.create_task(request(f, "treatment")) for _ in range(4)]
        await wait_for_async(lambda: len(old.calls) == 4, 5, "4 requests generating on v2")
        reg.aliases["champion"] = "3"
        poll = asyncio.create_task(f.poll_once())
        await wait_for_async(lambda: f.arm_versions()["treatment"] == "3", 5, "the switch")
        waiting = [asyncio.create_task(request(f, "treatment")) for _ in range(3)]   # come during drain + reload
        (swap,) = await poll
        results = await asyncio.gather(*in_flight, *waiting)
        # each answer sampled by the weights of the version it is attributed to: old ones on v2, new ones on v3
        assert results == [("2", "2")] * 4 + [("3", "3")] * 3
        assert len(loader.engines) == 2 and old.reloads == ["3"] and not old.shut_down   # no second engine
        assert (swap.in_place, swap.in_flight_at_switch, swap.old_engine_shut_down) == (True, 4, False)
        assert swap.drain_s >= 0.1 and swap.reload_s >= 0.1 and swap.load_s >= swap.drain_s + 0.1 - 1e-3
        assert [e["version"] for e in f.status()["engines"]] == ["1", "3"]
        assert await request(f, "treatment") == ("3", "3")
        await f.close()
        assert old.shut_down

    asyncio.run(scenario())


def test_another_architecture_or_an_engine_another_alias_holds_swaps_blue_green(tmp_path):
    async def scenario():
        f, reg, loader = fake_fleet({"control": "1", "champion": "1"}, device="cuda",
                                    folders=folders(tmp_path, **{"1": {}, "2": {}, "3": {"hidden_size": 128}}))
        await f.start()
        reg.aliases["champion"] = "2"            # v1's engine also serves control: a second engine
        (swap,) = await f.poll_once()
        assert not swap.in_place and len(loader.engines) == 2 and loader.engines[0].reloads == []
        reg.aliases["champion"] = "3"            # another architecture: a second engine
        (swap,) = await f.poll_once()
        assert not swap.in_place and [e.version for e in loader.engines] == ["1", "2", "3"]
        await f.close()

    asyncio.run(scenario())


def test_blue_green_stays_the_default_on_cpu_and_can_be_chosen_on_a_gpu(tmp_path):
    async def scenario(device, swap_mode):
        f, reg, loader = fake_fleet({"control": "1", "champion": "2"}, device=device, swap=swap_mode,
                                    folders=folders(tmp_path, **{"1": {}, "2": {}, "3": {}}))
        await f.start()
        reg.aliases["champion"] = "3"
        (swap,) = await f.poll_once()
        await f.close()
        return swap.in_place, len(loader.engines)

    assert asyncio.run(scenario("cpu", "auto")) == (False, 3)
    assert asyncio.run(scenario("cuda", "blue_green")) == (False, 3)
    assert asyncio.run(scenario("cpu", "in_place")) == (True, 2)


def test_a_failed_in_place_reload_gives_the_waiting_requests_a_fresh_engine(tmp_path):
    async def scenario():
        f, reg, loader = fake_fleet({"control": "1", "champion": "2"}, device="cuda",
                                    folders=folders(tmp_path, **{"1": {}, "2": {}, "3": {}}))
        await f.start()
        old = next(e for e in loader.engines if e.version == "2")
        old.reload_fails = True
        reg.aliases["champion"] = "3"
        (swap,) = await f.poll_once()
        assert swap.in_place and swap.old_engine_shut_down and old.shut_down
        assert await request(f, "treatment") == ("3", "3") and loader.engines[-1].version == "3"
        await f.close()

    asyncio.run(scenario())


def test_each_alias_engine_starts_on_its_arms_devices_and_gpu_fleets_keep_no_spares():
    async def scenario():
        arms = [ArmConfig(name="control", alias="control", share=0.5, devices="0", gpu_memory_utilization=0.4),
                ArmConfig(name="treatment", alias="champion", share=0.5, devices="1")]
        f, reg, loader = fake_fleet({"control": "1", "champion": "2"}, device="cuda", arms=arms, spare_engines=1,
                                    cpu_cores="0")
        await f.start()
        assert {e.version: e.placement for e in loader.engines} == {
            "1": {"devices": "0", "gpu_memory_utilization": 0.4}, "2": {"devices": "1"}}
        assert {e["version"]: e["devices"] for e in f.status()["engines"]} == {"1": "0", "2": "1"}
        reg.aliases["champion"] = "3"                    # blue/green (fake folders): the new engine on device 1
        await f.poll_once()
        assert loader.engines[-1].placement == {"devices": "1"} and loader.engines[-1].binds == []
        await f.stage("4")                               # a stage: the loader's defaults
        assert loader.engines[-1].placement == {}
        # a spare would start in the background (Spares.replenish): let any start in flight finish, then none began
        await wait_for_async(lambda: not f.spares.status()["loading"], 5, "no spare engine starting")
        assert f.spares.status()["capacity"] == 0 and f.spares.status()["started"] == 0
        assert len(loader.engines) == 4   # no spare started
        await f.close()

    asyncio.run(scenario())


def test_a_served_copy_failing_verification_in_the_worker_loads_the_master_in_a_fresh_engine(tmp_path):
    from registry.delta import DeltaMismatch

    async def scenario():
        f, reg, loader = fake_fleet({"control": "1", "champion": "2"}, device="cuda",
                                    folders=folders(tmp_path, **{"1": {}, "2": {}, "3": {}}))
        reg.masters = {"3": checkpoint_config(tmp_path / "master-v3")}
        await f.start()
        old = next(e for e in loader.engines if e.version == "2")
        old.reload_fails = DeltaMismatch("tensor x does not match its SHA-256; nothing was loaded")
        reg.aliases["champion"] = "3"
        (swap,) = await f.poll_once()
        assert swap.in_place and swap.fallback == "master" and old.shut_down
        assert loader.engines[-1].folder == tmp_path / "master-v3"
        assert await request(f, "treatment") == ("3", "3")
        await f.close()

    asyncio.run(scenario())
