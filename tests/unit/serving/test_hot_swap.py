"""Hot swap logic over fake engines: blue/green switch, in-flight requests finish on the old engine, which is shut
down only after them; shared engines survive; failed loads keep serving the old version."""

from __future__ import annotations

import asyncio

import pytest

from serving.protocol import SampleSpec, Sampling
from serving.arms import Fleet
from serving.config import ServingConfig
from tests.unit.serving.fakes import FakeLoader, FakeRegistry
from tests.waiting import wait_for_async


def fleet(aliases, **kw) -> tuple[Fleet, FakeRegistry, FakeLoader]:
    reg, loader = FakeRegistry(aliases), FakeLoader(**kw)
    return Fleet(ServingConfig(registry_poll_s=0.01, drain_timeout_s=5), reg, loader), reg, loader


async def request(f: Fleet, arm: str) -> str:
    with f.lease(arm) as slot:
        (gen,) = await slot.engine.sample([1, 2], SampleSpec(64, Sampling(1.0)))
        return f"{slot.version}:{gen.text}"


def test_alias_move_switches_new_requests_and_in_flight_ones_finish_on_the_old_engine():
    async def scenario():
        f, reg, loader = fleet({"control": "1", "champion": "1"}, delay_s=0.2)
        await f.start()
        assert len(loader.engines) == 1  # both arms on v1: one engine
        old = loader.engines[0]
        in_flight = [asyncio.create_task(request(f, "treatment")) for _ in range(5)]
        await wait_for_async(lambda: len(old.calls) == 5, 5, "5 requests generating on v1")
        reg.aliases["champion"] = "2"
        swaps = await f.poll_once()
        assert [(s.alias, s.from_version, s.to_version, s.arms) for s in swaps] == [("champion", "1", "2",
                                                                                      ["treatment"])]
        assert swaps[0].in_flight_at_switch == 5
        assert f.arm_versions() == {"control": "1", "treatment": "2"}
        after = await request(f, "treatment")
        assert after.startswith("2:")
        assert [r.split(":")[0] for r in await asyncio.gather(*in_flight)] == ["1"] * 5
        assert not old.shut_down  # control still serves v1
        await f.close()
        assert all(e.shut_down for e in loader.engines)

    asyncio.run(scenario())


def test_the_old_engine_is_shut_down_only_after_its_last_request():
    async def scenario():
        f, reg, loader = fleet({"control": "1", "champion": "1"}, delay_s=0.3)
        await f.start()
        old = loader.engines[0]
        slow = [asyncio.create_task(request(f, arm)) for arm in ("control", "treatment") for _ in range(3)]
        await wait_for_async(lambda: len(old.calls) == 6, 5, "6 requests generating on v1")
        reg.aliases.update(control="2", champion="2")
        swaps = await f.poll_once()
        assert [s.to_version for s in swaps] == ["2", "2"] and len(loader.engines) == 2  # v2 loaded once
        assert not old.shut_down and f.status()["engines"][-1] == {"version": "1", "in_flight": 6, "retiring": True,
                                                  "cpu_cores": ""}
        results = await asyncio.gather(*slow)  # FakeEngine asserts it is not shut down while generating
        assert all(r.startswith("1:") for r in results)
        # the record says so once the shutdown (in a thread) has returned
        await wait_for_async(lambda: old.shut_down and swaps[-1].old_engine_shut_down, 5, "v1's engine shut down")
        assert swaps[-1].drain_s is not None
        assert [e["version"] for e in f.status()["engines"]] == ["2"]
        await f.close()

    asyncio.run(scenario())


def test_requests_keep_flowing_while_the_new_engine_loads():
    async def scenario():
        f, reg, loader = fleet({"control": "1", "champion": "1"})
        await f.start()
        loader.load_delay_s = 0.5  # loads run in a thread: the event loop keeps serving
        reg.aliases["champion"] = "2"
        poll = asyncio.create_task(f.poll_once())
        served = []  # (answer, whether the load was still running when it came)
        while not poll.done():
            served.append((await request(f, "treatment"), loader.loading))
            await asyncio.sleep(0.01)  # paces the requests (the workload)
        assert all(s.startswith("1:") for s, _ in served)
        assert sum(loading for _, loading in served) >= 2, served  # answered while the load ran in its thread
        assert (await poll)[0].load_s >= 0.5
        assert (await request(f, "treatment")).startswith("2:")
        await f.close()

    asyncio.run(scenario())


def test_a_failed_load_keeps_the_old_version_and_is_retried_later(monkeypatch):
    async def scenario():
        f, reg, loader = fleet({"control": "1", "champion": "1"})
        await f.start()
        loader.fail.add("2")
        reg.aliases["champion"] = "2"
        assert await f.poll_once() == []
        assert f.arm_versions()["treatment"] == "1" and "cannot load v2" in f.status()["last_error"]
        loader.fail.clear()
        assert await f.poll_once() == []  # not retried at once
        monkeypatch.setattr("serving.arms.RETRY_FAILED_S", 0.0)
        assert [s.to_version for s in await f.poll_once()] == ["2"]
        await f.close()

    asyncio.run(scenario())


def test_a_registry_error_or_an_unset_alias_keeps_serving():
    async def scenario():
        f, reg, _ = fleet({"control": "1", "champion": "1"})
        await f.start()
        reg.fail_reads = True
        assert await f.poll_once() == [] and "registry unreachable" in f.status()["last_error"]
        reg.fail_reads = False
        del reg.aliases["champion"]
        assert await f.poll_once() == [] and f.arm_versions()["treatment"] == "1"
        await f.close()

    asyncio.run(scenario())


def test_the_poller_swaps_on_its_own():
    async def scenario():
        f, reg, _ = fleet({"control": "1", "champion": "1"})
        await f.start()
        f.start_polling()
        reg.aliases["champion"] = "3"
        await wait_for_async(lambda: f.arm_versions()["treatment"] == "3", 5, "the poller's swap to v3")
        assert f.arm_versions() == {"control": "1", "treatment": "3"} and f.swaps[0].to_version == "3"
        await f.close()

    asyncio.run(scenario())


def test_start_needs_every_alias():
    async def scenario():
        f, _, _ = fleet({"champion": "1"})
        with pytest.raises(LookupError, match="'control' is not set"):
            await f.start()

    asyncio.run(scenario())


def test_the_newest_registered_version_is_prefetched_once_and_a_promotion_then_loads_it():
    async def scenario():
        f, reg, loader = fleet({"control": "1", "champion": "1"})
        await f.start()
        reg.newest = "2"                      # a candidate registered: nothing points to it yet
        await f.poll_once()
        await wait_for_async(lambda: reg.served_calls.count("2") == 1, 5, "version 2 prefetched")
        await f.poll_once()                   # the next poll's prefetch finds it fetched already
        await wait_for_async(lambda: f._prefetching.done(), 5, "the second poll's prefetch")
        assert reg.served_calls.count("2") == 1 and [e.version for e in loader.engines] == ["1"]
        assert list(f.status()["prefetched"]) == ["2"]          # what /health shows
        reg.aliases["champion"] = "2"
        (swap,) = await f.poll_once()
        assert swap.to_version == "2" and loader.engines[-1].version == "2"
        await f.close()

    asyncio.run(scenario())
