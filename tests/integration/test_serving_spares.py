"""A warm spare engine with real vLLM (serving.spare_engines = 1): a hot swap reloads the spare's weights in place
instead of starting an engine, the reloaded engine answers with the new checkpoint's log-probs (the serving contract
holds after a reload), and the engine retired by the next swap goes back to the pool.

The checkpoints tie the LM head to the input embedding, as the default policy does: vLLM's own in-place reload
left such a head computing with the first checkpoint's packed weights (serving/vllm_reload.py).
"""

from __future__ import annotations

import os
import uuid

import pytest

from serving.affinity import thread_affinities
from tests.conftest import free_port
from tests.integration.gateway import openai_client, running_gateway, teacher_forced_logprobs, trajectories, users_of
from tests.waiting import wait_for

# a CPU-only opt-in (serving.spare_engines)
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.full, pytest.mark.exclusive]

LOGPROB_TOLERANCE = 1e-3  # as tests/integration/test_serving.py
# as `rtrl demo`: the arms' engines on core 0, the spare on core 1 (a promoted spare moves to core 0)
SPLIT_CORES = {"cpu_cores": "0", "spare_cpu_cores": "1"} if len(os.sched_getaffinity(0)) >= 2 else {}
PROMPT = [{"role": "user", "content": "Raise RETRIES in app/util.py"}]


def test_a_swapped_in_version_reloads_the_spare_and_serves_the_new_weights(stack, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM

    from infra.orchestrator.steps import serving_status
    from registry.client import Registry
    from serving.testing import make_tiny_checkpoint

    model = f"spares-it-{uuid.uuid4().hex[:8]}"
    cfg = stack.cfg.model_copy(update={
        "mlflow": stack.cfg.mlflow.model_copy(update={"registered_model": model}),
        "serving": stack.cfg.serving.model_copy(update={"port": free_port(), "max_tokens": 32, "registry_poll_s": 0.5,
                                                        "spare_engines": 1, "drain_timeout_s": 30,
                                                        **SPLIT_CORES}),
        "sdk": stack.cfg.sdk.model_copy(update={"linger_ms": 5, "send_timeout_s": 5})})
    registry = Registry.from_config(cfg)
    folders = [make_tiny_checkpoint(tmp_path / f"ckpt{s}", seed=s, tied=True) for s in (0, 1)]
    a, b = (registry.register(f, tags={"test": "spares"}) for f in folders)
    registry.set_alias("control", a)
    registry.set_alias("champion", a)
    with running_gateway(cfg) as gateway:
        status = lambda: serving_status(cfg) or {}  # noqa: E731
        wait_for(lambda: status().get("spares", {}).get("idle") == 1, 240, "the spare engine started with serving")
        registry.set_alias("champion", b)                          # promotion: treatment moves to B
        swap = wait_for(lambda: next((s for s in status().get("swaps", []) if s["to_version"] == b), None), 60,
                        "the swap to B")
        spares = status()["spares"]
        assert (spares["reloads"], spares["started"], spares["idle"]) == (1, 1, 0)   # B took the spare: no start
        print(f"spare reload: swap to B took {swap['load_s']:.2f}s")
        if SPLIT_CORES:                                            # B serves an arm now: on the arms' core
            with gateway.fleet.lease("treatment") as slot:
                assert slot.version == b and slot.engine.cpu_cores == "0"
                workers = slot.engine.worker_pids()
            assert workers
            for pid in workers:
                assert set(map(frozenset, thread_affinities(pid).values())) == {frozenset({0})}, pid

        client = openai_client(f"http://{cfg.serving.host}:{cfg.serving.port}")
        rids = set()
        for user in users_of(gateway, "treatment", 2):
            rid = f"spare-{uuid.uuid4().hex}"
            r = client.chat.completions.create(model="rtrl-policy", user=user, messages=PROMPT, logprobs=True,
                                               max_tokens=32, metadata={"request_id": rid})
            assert r.model_extra["policy_version"] == b
            rids.add(rid)
        events = trajectories(cfg.kafka.bootstrap(), cfg.kafka.partitions_for("trajectories"), rids)
        assert set(events) == rids
        lm = {i: AutoModelForCausalLM.from_pretrained(str(folders[i]), dtype=torch.float32).eval() for i in (0, 1)}
        new = old = 0.0
        for e in events.values():
            served = torch.tensor(e["behaviour_logprobs"])
            ref = {i: teacher_forced_logprobs(lm[i], e["prompt_token_ids"], e["completion_token_ids"]) for i in lm}
            new = max(new, (ref[1] - served).abs().max().item())
            old = max(old, (ref[0] - served).abs().max().item())
        print(f"spare reload: max |serving - transformers(B)| = {new:.2e}; vs the old weights A: {old:.2e}")
        assert new < LOGPROB_TOLERANCE and old > 100 * LOGPROB_TOLERANCE

        registry.set_alias("champion", a)                          # rollback: B's engine retires to the pool
        wait_for(lambda: any(s["to_version"] == a and s["old_engine_kept_spare"] for s in status()["swaps"]), 60,
                 "B's engine kept as the spare")
        spares = status()["spares"]
        assert (spares["idle"], spares["kept_retired"], spares["started"]) == (1, 1, 1)
