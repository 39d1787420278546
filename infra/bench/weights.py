"""`rtrl bench weights`: what a cycle ships at a real shape: served weights as a verified delta against the parent's.

In process, against a real MLflow registry (SQLite, file artifacts) whose ship policy is bf16 (the GPU profiles'
serving precision), with the cycle's real trainer (trainer.train.Trainer: DeepSpeed, the profile's loss settings
and learning rate):

  1. v1: a model of the shape, random weights made here (`--shape 0.5b`: Qwen2.5-0.5B's shape, 494M parameters;
     `toy`: the default policy's), registered: its served weights an anchor.
  2. v2..vN: each trained `--steps` optimizer steps from its parent on generated rows of realistic length (prompts
     and completions of the lengths coding-assistant requests have), at the learning rate of
     infra/configs/profiles/qwen2.5-0.5b.toml, and registered: its served weights shipped as `choose_kind` says.
  3. Per version, in float32 and in bf16: full against delta bytes, the share of elements changed, encode and
     decode seconds, and whether the rebuilt weights equal the trainer's (cast to the precision) bit for bit.
  4. The chain: the newest version rebuilt on a host with an empty cache (from its anchor through every delta,
     each checked) -- its seconds and length -- and the bytes the lineage stores: served copies and masters, and
     `under_retention`, what stays once retention has run with `retention.keep_promoted` on the lineage promoted
     version by version (`stored_under_retention`: masters for what may be rolled back to, served weights alone
     for the links of the newest version's delta chain).
  5. The swap (`--swap`, vLLM on this machine's device): an engine serving v(N-1) reloads vN in place (the layers
     of the changed tensors, verified: serving.engine.VllmEngine.reload) against a new engine started on vN (a
     full load), and the two engines' log-probs of the same tokens compared.

Training on a CPU runs in float32 (the profile's bf16 mixed precision is for GPUs); the master is float32 either
way, and the served bf16 weights are its cast, as in production.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Callable

PROFILE = Path(__file__).resolve().parents[1] / "configs" / "profiles" / "qwen2.5-0.5b.toml"
# request lengths of coding-assistant traffic (tokens): prompts carry files and tool results, completions an edit
LENGTHS = {"0.5b": dict(prompt=(384, 896), completion=(96, 320)), "toy": dict(prompt=(64, 400), completion=(16, 96))}


def profile_trainer() -> dict:
    """The GPU profile's [trainer] table (its learning rate and loss settings)."""
    return tomllib.loads(PROFILE.read_text())["trainer"]


def _checkpoint(shape: str, policy, folder: Path, seed: int) -> Path:
    """v1: random weights of `shape` (fp32 safetensors) and a chat tokenizer (serving.testing's)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    from infra.bench.gpu import QWEN2_05B
    from schemas.chat_format import END
    from serving.testing import make_tokenizer

    tokenizer = make_tokenizer(512)
    eos = tokenizer.convert_tokens_to_ids(END)
    ids = dict(bos_token_id=eos, eos_token_id=eos, pad_token_id=eos, torch_dtype="float32")
    torch.manual_seed(seed)
    if shape == "0.5b":
        model = Qwen2ForCausalLM(Qwen2Config(**QWEN2_05B, **ids))
    else:
        model = LlamaForCausalLM(LlamaConfig(
            vocab_size=len(tokenizer), hidden_size=policy.hidden_size, intermediate_size=policy.intermediate_size,
            num_hidden_layers=policy.layers, num_attention_heads=policy.heads, num_key_value_heads=policy.heads,
            max_position_embeddings=policy.max_position_embeddings, tie_word_embeddings=True, **ids))
    model.to(torch.float32).save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    return folder


def _rows(n: int, shape: str, vocab: int, seed: int):
    """Generated reward rows: prompt and completion lengths drawn from LENGTHS[shape], rewards ~ N(0, 1)."""
    import polars as pl
    import torch

    g = torch.Generator().manual_seed(seed)
    (p0, p1), (c0, c1) = LENGTHS[shape]["prompt"], LENGTHS[shape]["completion"]
    rows = []
    for i in range(n):
        p, c = int(torch.randint(p0, p1 + 1, (1,), generator=g)), int(torch.randint(c0, c1 + 1, (1,), generator=g))
        rows.append({"request_id": f"r{seed}-{i:05d}",
                     "prompt_token_ids": torch.randint(0, vocab, (p,), generator=g).tolist(),
                     "completion_token_ids": torch.randint(0, vocab, (c,), generator=g).tolist(),
                     "behaviour_logprobs": (-torch.rand(c, generator=g) * 4).tolist(),
                     "reward": float(torch.randn(1, generator=g)), "response_kind": "edit"})
    return pl.DataFrame(rows)


def _train(parent: Path, rows, steps: int, rows_per_step: int, run_dir: Path, log) -> tuple[Path, dict]:
    """A cycle's update: `steps` optimizer steps of `rows_per_step` rows from `parent` at the profile's learning
    rate; (the candidate's folder, figures)."""
    from trainer.config import TrainerConfig
    from trainer.train import Trainer

    prof = profile_trainer()
    cfg = TrainerConfig(lr=prof["lr"], zero_stage=prof["zero_stage"], max_tokens=prof["max_tokens"],
                        gradient_checkpointing=prof["gradient_checkpointing"], micro_batch=1,
                        rows_per_step=rows_per_step, min_rows=1, checkpoint_every=10**6, skip_inert_rows=False)
    t = Trainer(cfg, rows, parent, run_dir)
    t0 = time.perf_counter()
    try:
        t.setup()
        summary = t.train()
        folder = t.save_checkpoint({"bench": "weights"})
    finally:
        t.close()
    log(f"bench weights: trained {summary.steps} steps, {summary.tokens:,} tokens in {time.perf_counter() - t0:.0f}s")
    return folder, {"steps": summary.steps, "tokens": summary.tokens, "lr": cfg.lr,
                    "train_s": round(time.perf_counter() - t0, 1)}


def precision_figures(parent_master: dict, child_master: dict, precision: str) -> dict:
    """The delta of the child's served weights in `precision` against the parent's (both masters' tensors, as
    registry.served.weights_of reads them): bytes, elements changed, encode and decode seconds, and whether
    decoding gives the child's weights bit for bit."""
    from registry.delta import apply, encode
    from registry.served import in_precision

    parent = in_precision(parent_master, precision)
    child = in_precision(child_master, precision)
    t0 = time.perf_counter()
    delta = encode(parent, child)
    encode_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    rebuilt = apply(parent, delta)
    decode_s = time.perf_counter() - t0
    elements = sum(len(t.bits()) for t in child.values())
    return {"full_bytes": delta.full_bytes, "delta_bytes": delta.stored_bytes,
            "delta_share": round(delta.stored_bytes / delta.full_bytes, 4),
            "elements_changed_share": round(delta.changed_elements / elements, 4),
            "encode_s": round(encode_s, 2), "decode_s": round(decode_s, 2), "bitwise_equal": rebuilt == child}


def _swap(serving_cfg, old: tuple[str, Path], new: tuple[str, Path], log) -> dict:
    """vLLM: an engine on `old` reloads `new` in place, against a new engine started on `new`; their log-probs of
    the same tokens compared."""
    from serving.engine import VllmEngine
    from serving.protocol import SampleSpec, Sampling

    async def go() -> dict:
        prompt = list(range(5, 69))
        spec = SampleSpec(16, Sampling(temperature=1.0), seed=7)
        engine = await asyncio.to_thread(VllmEngine.load, old[0], old[1], serving_cfg)
        fresh = None
        try:
            t0 = time.perf_counter()
            await engine.reload(new[0], new[1])
            in_place_s = time.perf_counter() - t0
            loaded = engine.loaded_tensors
            t0 = time.perf_counter()
            fresh = await asyncio.to_thread(VllmEngine.load, new[0], new[1], serving_cfg)
            full_s = time.perf_counter() - t0
            (a,) = await engine.sample(prompt, spec)
            (b,) = await fresh.sample(prompt, spec)
            same = a.token_ids == b.token_ids
            diff = max((abs(x - y) for x, y in zip(a.logprobs, b.logprobs)), default=None) if same else None
            log(f"bench weights: swap in place {in_place_s:.1f}s ({loaded} tensors), full load {full_s:.1f}s")
            return {"in_place_s": round(in_place_s, 2), "full_load_s": round(full_s, 2),
                    "in_place_tensors_loaded": loaded, "same_tokens": same,
                    "max_logprob_diff": None if diff is None else float(f"{diff:.3g}")}
        finally:
            for e in (engine, fresh):
                if e is not None:
                    await e.aclose()

    return asyncio.run(go())


def stored_under_retention(tags: dict[str, dict[str, str]], keep_promoted: int, master_bytes: int) -> dict:
    """The bytes a straight lineage (v1 the anchor v0, each version promoted over the one before, the newest the
    champion) stores once retention has run (registry.retention.plan, every version past its minimum age): a
    master for each version kept whole, served weights for those and for each one only a delta chain holds."""
    from registry.retention import KEEP, TRIM, Lineage, VersionRecord, plan
    from registry.shipping import BYTES_TAG

    versions = sorted(tags, key=int)
    records = [VersionRecord(v, 0.0, {**tags[v], **({"kind": "bootstrap"} if v == versions[0] else
                                                   {"promotion.previous_version": str(int(v) - 1)})})
               for v in versions]
    verdicts = plan([Lineage("bench", records, {"champion": versions[-1]})], keep_promoted=keep_promoted,
                    min_age_s=0.0, now_s=1.0)
    masters = [x.version for x in verdicts if x.action == KEEP]
    served = [x.version for x in verdicts if x.action in (KEEP, TRIM)]
    served_bytes = sum(int(tags[v].get(BYTES_TAG, 0)) for v in served)
    return {"keep_promoted": keep_promoted, "masters_kept": masters, "served_only": [
                x.version for x in verdicts if x.action == TRIM],
            "deleted": [x.version for x in verdicts if x.action not in (KEEP, TRIM)],
            "bytes": len(masters) * master_bytes + served_bytes, "master_bytes": len(masters) * master_bytes,
            "served_bytes": served_bytes}


def run(cfg, shape: str = "0.5b", versions: int = 2, steps: int = 4, rows_per_step: int = 2, seed: int = 0,
        swap: bool = True, log: Callable[[str], None] = print) -> dict:
    from registry.client import Registry
    from registry.delta_chain import chain_to_anchor
    from registry.served import in_precision, weights_of
    from registry.shipping import ShipPolicy, served_folder, shipped_of, stored

    if versions < 2:
        raise ValueError("--versions must be at least 2 (an anchor and a delta)")
    cfg.state_path.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="rtrl-bench-weights-", dir=cfg.state_path))
    policy = ShipPolicy("bf16", cfg.weights.anchor_every, cfg.weights.max_delta_share, cfg.weights.shard_bytes)
    reg = Registry(f"sqlite:///{tmp / 'mlflow.db'}", tmp / "artifacts", "bench-weights", tmp / "cache",
                   ship_policy=policy)
    quiet = lambda *_: None  # noqa: E731
    try:
        masters = {"1": _checkpoint(shape, cfg.policy, tmp / "v1", seed)}
        params = sum(len(t.bits()) for t in weights_of(masters["1"]).values())
        log(f"bench weights: {shape} shape, {params:,} parameters; registering v1")
        reg.register(masters["1"], tags={"parent": ""}, log=quiet)
        vocab = 512
        per_version = []
        for v in range(2, versions + 1):
            parent = str(v - 1)
            folder, trained = _train(masters[parent], _rows(steps * rows_per_step, shape, vocab, seed + v), steps,
                                     rows_per_step, tmp / "train" / f"v{v}", log)
            masters[str(v)] = Path(shutil.move(str(folder), str(tmp / f"v{v}")))
            t0 = time.perf_counter()
            assert reg.register(masters[str(v)], tags={"parent": parent}, log=log) == str(v)
            register_s = time.perf_counter() - t0
            tensors = weights_of(masters[parent]), weights_of(masters[str(v)])      # each master read once
            figures = {p: precision_figures(*tensors, p) for p in ("fp32", "bf16")}
            del tensors
            per_version.append({"version": str(v), **trained, "register_s": round(register_s, 1),
                                "shipped": shipped_of(reg.info(str(v)).tags), **figures})
            log(f"bench weights: v{v}: bf16 delta {figures['bf16']['delta_share']:.1%} of the whole "
                f"({figures['bf16']['elements_changed_share']:.1%} of elements changed), fp32 "
                f"{figures['fp32']['delta_share']:.1%}")
            if v > 2:
                shutil.rmtree(masters[str(v - 2)], ignore_errors=True)   # keep the disk to two masters
        newest = str(versions)
        host = Registry(reg.tracking_uri, tmp / "artifacts", "bench-weights", tmp / "fresh-host")
        t0 = time.perf_counter()
        rebuilt = served_folder(host, newest)
        rebuild_s = time.perf_counter() - t0
        chain = chain_to_anchor(newest, lambda v: stored(reg, v))
        equal = weights_of(rebuilt) == in_precision(weights_of(masters[newest]), "bf16")
        tags = [reg.info(str(v)).tags for v in range(1, versions + 1)]
        shipped = [shipped_of(t) for t in tags]
        master_bytes = sum(p.stat().st_size for p in masters[newest].glob("*.safetensors"))
        result = {"shape": shape, "parameters": params, "profile_lr": profile_trainer()["lr"],
                  "steps_per_version": steps, "rows_per_step": rows_per_step,
                  "prompt_tokens": LENGTHS[shape]["prompt"], "completion_tokens": LENGTHS[shape]["completion"],
                  "versions": per_version,
                  "cycle_bf16_delta_share": per_version[0]["bf16"]["delta_share"],
                  "served_bitwise_equal": all(p["bf16"]["bitwise_equal"] and p["fp32"]["bitwise_equal"]
                                              for p in per_version) and equal,
                  "chain": {"versions": versions, "kinds": [s["kind"] for s in shipped],
                            "rebuild_newest_s": round(rebuild_s, 2), "rebuild_chain_length": len(chain),
                            "rebuilt_equal": equal,
                            "served_bytes_stored": sum(s["bytes"] for s in shipped),
                            "served_bytes_if_whole": sum(s["full_bytes"] for s in shipped),
                            "master_bytes_each": master_bytes,
                            "under_retention": stored_under_retention(
                                {str(v): t for v, t in enumerate(tags, 1)}, cfg.retention.keep_promoted,
                                master_bytes)}}
        if swap:
            older = str(versions - 1)
            result["swap"] = _swap(cfg.serving, (older, served_folder(reg, older)), (newest, rebuilt), log)
        return result
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
