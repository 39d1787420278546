"""Stage 4 of `rtrl bench serving`: a swap by delta, in place, under load.

The gateway restarts with `serving.swap = "in_place"` (the GPU default; on this CPU machine the default is
blue/green) serving the champion, v3. While `--clients` keep sending, v4 is registered: the same weights as v3
with 2 % of each matrix moved (a cycle's worth of change), tagged `parent = v3`, so the registry ships its served
weights as a delta against v3's (registry/shipping.py). The gateway prefetches it (`prefetched` in its /health:
the delta downloaded, applied to v3's cached copy, every tensor's checksum checked). Then champion moves to v4:
the engine drains v3's requests, loads only the changed tensors' layers and verifies them (serving/vllm_reload.py)
while new requests wait. Reported: `delta_shipped` (the version's tags: kind, bytes against the whole),
`prefetched_before_promotion`, the swap record (`in_place`, `drain_s`, `reload_s`, `fallback`), requests during
the swap and how many failed (target 0), and the serving contract after it: the trajectories v4 answered, read
back from Kafka, against the trainer's log-probs of the same tokens (`trainer.logprobs.token_logprobs` over a
transformers forward of v4's float32 checkpoint), max absolute difference against `LOGPROB_TOLERANCE`.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from infra.bench.serving import Clients, by_kind, health, start_gateway, steady_phase, stop_gateway, \
    stream_clients, swap_under_load

LOGPROB_TOLERANCE = 1e-3   # the serving contract (docs/serving.md): absolute, per token, CPU float32
CONTRACT_SAMPLE = 16       # trajectories of the new version checked


def _wait(condition, timeout_s: float, interval_s: float = 0.2):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = condition()
        if got:
            return got
        time.sleep(interval_s)
    return condition()


def served_trajectories(cfg, version: str, n: int, timeout_s: float = 60.0) -> list[dict]:
    """Up to `n` trajectory events of `version` on the trajectories topic (waits until at least one is there)."""
    from infra.chaos.kafka_io import read

    def found() -> list[dict]:
        events = [json.loads(m.value) for m in read(cfg.kafka, ("trajectories",), newest=False, idle_s=1.0)]
        return [e for e in events if e.get("policy_version") == version][:n]

    return _wait(found, timeout_s, interval_s=1.0)


def contract_difference(folder: Path, events: list[dict]) -> float:
    """max |serving's behaviour log-prob - the trainer's| over every completion token of `events`, the trainer's
    computed from `folder` (float32) teacher-forced on the same prompt and completion tokens."""
    import torch
    from transformers import AutoModelForCausalLM

    from trainer.logprobs import token_logprobs

    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    worst = 0.0
    with torch.no_grad():
        for e in events:
            prompt, completion = e["prompt_token_ids"], e["completion_token_ids"]
            logits = model(torch.tensor([prompt + completion])).logits[0].float()
            lp, _ = token_logprobs(logits[len(prompt) - 1:-1], torch.tensor(completion))
            worst = max(worst, (lp - torch.tensor(e["behaviour_logprobs"])).abs().max().item())
    return worst


def delta_swap_stage(cfg, overrides: list[str], registry, old: str, new_folder: Path, clients: int,
                     max_tokens: int, steady_s: float, log, stream_share: float = 0.5) -> dict:
    """The stage (module doc): the gateway on `old` (alias champion), `new_folder` registered as its child."""
    from registry.shipping import shipped_of

    url = start_gateway(cfg, [*overrides, 'serving.swap="in_place"'], log)
    load = Clients(url, clients, max_tokens, streaming=stream_clients(clients, stream_share))
    try:
        load.start()
        steady, _ = steady_phase(load, steady_s)
        new = registry.register(new_folder, tags={"bench": "serving", "parent": old}, log=log)
        shipped = shipped_of(registry.info(new).tags)
        log(f"delta swap: v{new} registered, shipped {shipped}")
        prefetched = _wait(lambda: new in ((health(url) or {}).get("prefetched") or {}),
                           cfg.serving.startup_timeout_s)
        swap = swap_under_load(cfg, url, registry, new, load, log)
        record, during = swap["record"], swap["during"]
        failed = [r for r in during if r["status"] != 200]
        events = served_trajectories(cfg, new, CONTRACT_SAMPLE)
        worst = contract_difference(new_folder, events) if events else None
        log(f"delta swap: serving contract over {len(events)} trajectories of v{new}: max |diff| {worst}")
        return {
            "version": new, "parent": old, "delta_shipped": shipped, "prefetched_before_promotion": bool(prefetched),
            "steady_requests": len(steady),
            "in_place": bool(record and record["in_place"]), "fallback": record and record["fallback"],
            "drain_seconds": record and record["drain_s"], "reload_seconds": record and record["reload_s"],
            "swap_seconds": round(swap["first_new"] - swap["t_move"], 2) if swap["first_new"] else None,
            "requests_during_swap": len(during), "failed_requests_during_swap": len(failed),
            "failed_examples": [r.get("error", "") for r in failed[:3]],
            "swap_by_kind": by_kind(during),
            "versions_served_during_swap": sorted({r["version"] for r in during if "version" in r}),
            "contract_trajectories": len(events),
            "contract_max_abs_logprob_diff": worst, "contract_tolerance": LOGPROB_TOLERANCE,
            "contract_holds": worst is not None and worst <= LOGPROB_TOLERANCE,
        }
    finally:
        load.stop()
        stop_gateway(cfg)
