"""LoRA adapter versions over fake engines (serving/lora.py): an adapter folder is served by a LoRA-enabled engine
of the base version its metadata (or registry tag) names, with its adapter on every request; adapters of one base
share that engine, so a swap between them loads and reloads nothing; the base engine shuts down with its last
adapter; an adapter without a base or over the rank limit is refused; a spare never serves an adapter."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from serving.config import ArmConfig
from serving.lora import Adapter, AdapterHosts, base_version, is_adapter, with_adapters
from serving.protocol import SampleSpec, Sampling
from tests.unit.serving.fakes import FakeLoader, FakeRegistry, checkpoint_config, fake_fleet
from tests.waiting import wait_for_async


def adapter_folder(folder: Path, base: str | None, rank: int = 8) -> Path:
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": rank}))
    if base is not None:
        (folder / "rtrl_metadata.json").write_text(json.dumps({"lora_base": base}))
    return folder


async def answer(f, arm: str) -> str:
    with f.lease(arm) as slot:
        await slot.wait_ready()
        return (await slot.engine.sample([1], SampleSpec(64, Sampling(1.0))))[0].text


def test_an_adapter_is_served_by_its_bases_lora_engine_with_its_adapter_on_each_request(tmp_path):
    async def scenario():
        folders = {"3": checkpoint_config(tmp_path / "v3"), "5": adapter_folder(tmp_path / "v5", "3")}
        fleet, reg, loader = fake_fleet({"control": "3", "champion": "5"}, folders=folders)
        fleet.loader = with_adapters(loader, reg, 16)
        await fleet.start()
        assert [(e.version, e.placement) for e in loader.engines] == [("3", {}), ("3", {"lora": True})]
        assert await answer(fleet, "treatment") == "answer from v3 + v5"
        assert await answer(fleet, "control") == "answer from v3"
        base = loader.engines[1]
        assert base.calls[-1]["adapter"] == Adapter("v5", 5, str(folders["5"]))
        await fleet.close()
        assert base.shut_down

    asyncio.run(scenario())


def test_a_swap_between_adapters_of_one_base_loads_nothing_and_the_base_stops_with_the_last(tmp_path):
    async def scenario():
        folders = {"3": checkpoint_config(tmp_path / "v3"), **{v: adapter_folder(tmp_path / f"v{v}", "3")
                                                                for v in ("5", "6")}}
        fleet, reg, loader = fake_fleet({"control": "5", "champion": "5"}, device="cuda", folders=folders)
        fleet.loader = with_adapters(loader, reg, 16)
        await fleet.start()
        base = loader.engines[0]
        reg.aliases.update(champion="6")
        (swap,) = await fleet.poll_once()
        assert not swap.in_place and len(loader.engines) == 1 and base.reloads == []   # a new LoRARequest only
        assert await answer(fleet, "treatment") == "answer from v3 + v6"
        assert await answer(fleet, "control") == "answer from v3 + v5"
        assert fleet.loader.adapters.status() == {"3": 2}
        reg.aliases.update(control="6")                     # v5 retires: its adapter engine releases the base
        await fleet.poll_once()
        await wait_for_async(lambda: fleet.loader.adapters.status() == {"3": 1}, 5, "v5 released")
        assert not base.shut_down
        await fleet.close()
        assert base.shut_down and fleet.loader.adapters.status() == {}

    asyncio.run(scenario())


def test_an_adapter_without_a_base_or_over_the_rank_limit_is_refused_and_the_base_may_come_from_a_tag(tmp_path):
    class Tagged(FakeRegistry):
        def info(self, version):
            return type("Info", (), {"tags": {"lora_base": "3"} if version == "7" else {}})()

    reg = Tagged({}, {"3": checkpoint_config(tmp_path / "v3")})
    hosts = AdapterHosts(FakeLoader(), reg, 16)
    with pytest.raises(ValueError, match="names no base version"):
        hosts("8", adapter_folder(tmp_path / "v8", None))
    with pytest.raises(ValueError, match="rank 32, over serving.max_lora_rank = 16"):
        hosts("9", adapter_folder(tmp_path / "v9", "3", rank=32))
    tagged = adapter_folder(tmp_path / "v7", None)
    assert is_adapter(tagged) and not is_adapter(tmp_path / "v3") and base_version("7", tagged, reg) == "3"
    assert hosts("7", tagged).base.version == "3"


def test_a_spare_never_takes_an_adapter(tmp_path):
    async def scenario():
        folders = {"3": checkpoint_config(tmp_path / "v3"), "5": adapter_folder(tmp_path / "v5", "3")}
        fleet, reg, loader = fake_fleet({"control": "3", "champion": "3"}, folders=folders, spare_engines=1)
        fleet.loader = with_adapters(loader, reg, 16)
        fleet.spares._loader = fleet.loader
        await fleet.start()
        await wait_for_async(lambda: fleet.spares.status()["idle"] == 1, 5, "the spare")
        await fleet.stage("5")
        assert fleet.spares.status()["idle"] == 1 and loader.engines[-1].placement == {"lora": True}
        await fleet.close()

    asyncio.run(scenario())


def test_with_a_shared_base_one_engine_serves_the_base_and_every_adapter_over_it(tmp_path):
    async def scenario():
        folders = {"3": checkpoint_config(tmp_path / "v3"), **{v: adapter_folder(tmp_path / f"v{v}", "3")
                                                                for v in ("5", "6", "7", "8")}}
        arms = [ArmConfig(name=n, alias=n, share=0.2) for n in ("a", "b", "c", "d", "e")]
        fleet, reg, loader = fake_fleet({"a": "3", "b": "5", "c": "6", "d": "7", "e": "8"}, folders=folders,
                                        arms=arms)
        fleet.loader = with_adapters(loader, reg, 16, share_base=True)
        await fleet.start()
        assert [(e.version, e.placement) for e in loader.engines] == [("3", {"lora": True})]   # one engine
        assert [await answer(fleet, arm) for arm in "abcde"] == [
            "answer from v3", *(f"answer from v3 + v{v}" for v in "5678")]
        assert loader.engines[0].calls[0]["adapter"] is None
        await fleet.close()
        assert loader.engines[0].shut_down

    asyncio.run(scenario())
