"""Checkpoint v0: make the default policy (or take `policy.base_checkpoint`), register it, alias it.

    setup            the corpus of demonstrations, the tokenizer trained on it, a fresh small Llama
    train            supervised training on the demonstrations (`sft.train`), stopped as soon as the sampled
                     (T=1) edit accuracy on dev tasks reaches `target_accuracy` and the evaluation tasks confirm it
                     (`confirm_margin`): v0 is imperfect on purpose, so RL has headroom, and a stop on the measured
                     accuracy lands there whatever the seed (seeds 0, 1, 2 needed 400, 800 and 800 steps) or the
                     CPU (the same seed trains other weights where the float kernels differ)
    evaluate         accuracy, broken tool calls and question rates on other fresh tasks (`evaluate.evaluate`)
    save_checkpoint  an HF folder (safetensors, config, generation config, tokenizer) + rtrl_metadata.json
    register         an MLflow model version tagged kind=bootstrap, aliases `champion` and `control` on it

Idempotent: when `champion` is already set nothing is done unless `force`. With `policy.base_checkpoint` set, that
folder is validated (a causal LM and a tokenizer with a chat template) and registered as v0 instead. A default
policy made here is kept in `policy_cache(cfg)` (`policy.cache_dir`); a later bootstrap, in any state dir, registers
that copy instead of training again when `stale_reason` finds it made by this recipe and config (not with `fresh`).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

ALIASES = ("champion", "control")   # the RL lineage starts here; control is the A/B arm's frozen checkpoint
METADATA = "rtrl_metadata.json"
# what the [policy] config does not say about how v0 is made: raise it when the code's recipe changes (a cache made
# by an older recipe, with the same config, is stale). 2: the copy circuit gained the skip-bigram head. 3: the stop
# is confirmed on the evaluation tasks (a v0 of recipe 2 stopped on a lucky dev check was never confirmed).
RECIPE = 3
REPO = Path(__file__).resolve().parents[2]


class BootstrapError(RuntimeError):
    """A base checkpoint that cannot serve as the policy, or a bootstrap that could not finish."""


def code_version() -> str:
    """The git commit of this code ('+dirty' when the tree has changes), or 'unknown' outside a git checkout."""
    try:
        head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def make_default_policy(policy, folder: Path, log: Callable[[str], None] = print) -> dict:
    """Corpus -> tokenizer -> model -> SFT -> evaluation -> `folder`; returns the metadata written beside it."""
    import torch

    from trainer.bootstrap import sft
    from trainer.bootstrap.corpus import build_corpus
    from trainer.bootstrap.evaluate import evaluate
    from trainer.bootstrap.model import build_model, n_parameters
    from trainer.bootstrap.tokenizer import train_tokenizer

    t0 = time.monotonic()
    torch.set_num_threads(policy.threads)
    # setup
    corpus = build_corpus(policy.seed, policy.train_workspaces, policy.tasks_per_workspace, policy.train_orgs,
                          policy.repair_rate, policy.house_rules)
    # repair turns repeat their task's text (the attempt copies the edit): trained on them, the BPE merges more
    # pairs (1194 tokens instead of 945), and the bigger vocabulary slowed SFT (dev accuracy 0.18 at step 600
    # instead of 0.50 at 450)
    tokenizer = train_tokenizer((e.prompt + e.completion for e in corpus if e.turn != "repair"), policy.vocab_size)
    data, dropped = sft.encode(tokenizer, corpus, policy.max_position_embeddings)
    model = build_model(policy, tokenizer, policy.seed)
    params = n_parameters(model)
    log(f"corpus: {len(corpus)} demonstrations ({dropped} longer than {policy.max_position_embeddings} tokens "
        f"dropped); tokenizer: {len(tokenizer)} tokens; model: Llama {policy.layers}x{policy.hidden_size}, "
        f"{params:,} parameters ({time.monotonic() - t0:.0f}s)")
    # train, stopping once the dev accuracy reaches the target
    checks: list[dict] = []
    confirmed: dict = {}    # step -> the evaluation's sampled pass, measured there to confirm a stop
    stop = (_stop_at_target(policy, model, tokenizer, checks, confirmed, log) if policy.target_accuracy > 0
            else None)
    result = sft.train(model, data, steps=policy.steps, batch_size=policy.batch_size, lr=policy.learning_rate,
                       warmup_steps=policy.warmup_steps, min_lr_ratio=policy.min_lr_ratio,
                       weight_decay=policy.weight_decay, grad_clip=policy.grad_clip, seed=policy.seed,
                       pad_id=tokenizer.pad_token_id, log_every=policy.log_every, log=log, stop=stop)
    if stop is not None and result.steps >= policy.steps:
        log(f"warning: dev accuracy never reached {policy.target_accuracy} (confirmed) in {policy.steps} steps")
    # evaluate
    held_out = _tasks(policy, policy.eval_seed, policy.eval_tasks)
    ev = evaluate(model, tokenizer, held_out, max_new_tokens=policy.eval_max_new_tokens,
                  batch_size=policy.eval_batch_size, seed=policy.eval_seed, log=log,
                  sampled=confirmed.get(result.steps))
    # save_checkpoint
    meta = {"kind": "bootstrap", "parent": None, "seed": policy.seed, "steps": result.steps,
            "train_examples": len(data), "dropped_examples": dropped, "examples_seen": result.examples_seen,
            "completion_tokens_seen": result.completion_tokens, "parameters": params,
            "first_loss": round(result.first_loss, 4), "final_loss": round(result.final_loss, 4),
            "train_seconds": round(result.seconds, 1), "sft_log": result.log, "dev_checks": checks,
            "eval": ev.to_dict(),
            "policy_config": policy.model_dump(), "recipe": RECIPE, "code_version": code_version(),
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "seconds": round(time.monotonic() - t0, 1)}
    save_checkpoint(model, tokenizer, folder, meta)
    return meta


# how a bootstrap ran or where it is kept, not what it made
RUN_ONLY_KEYS = frozenset({"threads", "log_every", "base_checkpoint", "cache_dir"})


def stale_reason(folder: Path, policy) -> str:
    """'' when the default policy cached in `folder` (a copy of a bootstrapped v0) was made from this `[policy]`
    config by the code's `RECIPE`, else why not: a cache made from another recipe must not stand in for the v0 the
    config describes. A key the cache's metadata lacks was added after it was made and counts as its default: a new
    recipe key's default must keep the recipe as it was (a change the config cannot express raises `RECIPE`)."""
    if policy.base_checkpoint:
        return f"policy.base_checkpoint is set: v0 is {policy.base_checkpoint}"
    meta_path = folder / METADATA
    if not (folder / "config.json").is_file() or not meta_path.is_file():
        return f"no policy in {folder}"
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError) as e:
        return f"unreadable {meta_path}: {e}"
    if meta.get("kind") != "bootstrap":
        return f"{folder} holds a {meta.get('kind')!r} checkpoint, not a bootstrapped default policy"
    if meta.get("recipe", 1) != RECIPE:
        return f"made by bootstrap recipe {meta.get('recipe', 1)}, the code's is {RECIPE}"
    made = meta.get("policy_config") or {}
    want = policy.model_dump()
    made = {k: f.default for k, f in type(policy).model_fields.items()} | made
    changed = sorted(k for k in (set(made) | set(want)) - RUN_ONLY_KEYS if made.get(k) != want.get(k))
    if changed:
        return f"made with another [policy] config ({', '.join(changed)} differ)"
    return ""


def keep_as_default_policy(folder: Path, cache: Path) -> None:
    """Replace the cached default policy `cache` with a copy of the bootstrapped v0 in `folder` (copied beside it
    first, so a crash mid-copy never leaves a half cache that `stale_reason` could take for a policy)."""
    tmp = cache.with_name(cache.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(folder, tmp)
    shutil.rmtree(cache, ignore_errors=True)
    tmp.rename(cache)


def policy_cache(cfg) -> Path:
    """Where the bootstrapped default policy is kept for reuse: `policy.cache_dir`, else <state_dir>/policy-v0
    (policy-v0-house-rules for a v0 of `policy.house_rules`: the two never replace each other)."""
    if cfg.policy.cache_dir:
        return Path(cfg.policy.cache_dir).expanduser().resolve()
    return cfg.state_path / ("policy-v0-house-rules" if cfg.policy.house_rules else "policy-v0")


def _tasks(policy, seed: int, n: int):
    """`n` fresh tasks: chains of 4 in workspaces of `seed` (never the training seed), of the `[policy]` corpus's
    orgs and house rules."""
    from trainer.bootstrap.corpus import generate_tasks

    return generate_tasks(seed, -(-n // 4), 4, policy.train_orgs, house_rules=policy.house_rules)[:n]


def target_confirmed(policy, dev_accuracy: float, confirm: Callable[[], float]) -> bool:
    """Whether a dev check of `dev_accuracy` stops training: it reaches `target_accuracy`, and `confirm()` (the
    sampled accuracy on the evaluation tasks, measured only then) reaches `target_accuracy - confirm_margin`."""
    if dev_accuracy < policy.target_accuracy:
        return False
    floor = policy.target_accuracy - policy.confirm_margin
    return floor <= 0 or confirm() >= floor


def _stop_at_target(policy, model, tokenizer, checks: list, confirmed: dict, log: Callable[[str], None]):
    """sft.train's `stop`: from `check_after`, every `check_every` steps, the sampled edit accuracy on the dev tasks
    (seed eval_seed + 1); True once it reaches `target_accuracy` and the evaluation tasks confirm it
    (`target_confirmed`: the first pass of the evaluation v0 reports, the same prompts and seed). Appends every
    check to `checks`, and each confirmation's metrics to `confirmed` by step (the evaluation after a stop
    reuses them)."""
    import torch

    from trainer.bootstrap.evaluate import evaluate

    dev = _tasks(policy, policy.eval_seed + 1, policy.dev_tasks)
    held_out = _tasks(policy, policy.eval_seed, policy.eval_tasks)

    def sampled(tasks, seed: int, repairs: bool):
        model.eval()
        with torch.random.fork_rng():
            m = evaluate(model, tokenizer, tasks, max_new_tokens=policy.eval_max_new_tokens,
                         batch_size=policy.eval_batch_size, seed=seed, log=lambda _: None, greedy=False,
                         repairs=repairs).sampled
        model.train()
        return m

    def stop(step: int) -> bool:
        if step < policy.check_after or (step - policy.check_after) % policy.check_every:
            return False
        m = sampled(dev, policy.eval_seed + 1, repairs=False)
        check = {"step": step, "accuracy": m.edit_accuracy, "broken_rate": m.broken_rate}
        checks.append(check)
        log(f"dev check at step {step}: sampled edit accuracy {m.edit_accuracy:.3f} (target "
            f"{policy.target_accuracy}), broken {m.broken_rate:.3f}")

        def confirm() -> float:
            c = confirmed[step] = sampled(held_out, policy.eval_seed, repairs=True)
            check["confirm_accuracy"] = c.edit_accuracy
            floor = policy.target_accuracy - policy.confirm_margin
            log(f"confirm on the evaluation tasks: sampled edit accuracy {c.edit_accuracy:.3f} (needs {floor:.2f})"
                + ("" if c.edit_accuracy >= floor else ": a lucky dev check, training goes on"))
            return c.edit_accuracy

        return target_confirmed(policy, m.edit_accuracy, confirm)

    return stop


def save_checkpoint(model, tokenizer, folder: Path, meta: dict) -> None:
    """A plain HF Llama folder: config.json, generation_config.json, model.safetensors, tokenizer files."""
    from transformers import GenerationConfig

    folder.mkdir(parents=True, exist_ok=True)
    model.generation_config = GenerationConfig(eos_token_id=tokenizer.eos_token_id,
                                               pad_token_id=tokenizer.pad_token_id)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    (folder / METADATA).write_text(json.dumps(meta, indent=2) + "\n")


def validate_checkpoint(folder: Path) -> dict:
    """Check an HF folder can be the policy: a causal-LM config whose model builds, weights, a tokenizer with a chat
    template and an eos token. Returns facts about it; raises BootstrapError saying what is wrong."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    if not folder.is_dir():
        raise BootstrapError(f"policy.base_checkpoint {str(folder)!r} is not a directory")
    if not (folder / "config.json").is_file():
        raise BootstrapError(f"{folder} is not a Hugging Face checkpoint folder (no config.json)")
    try:
        config = AutoConfig.from_pretrained(folder)
        with torch.device("meta"):  # the architecture builds as a causal LM, without reading the weights
            model = AutoModelForCausalLM.from_config(config)
    except (ValueError, KeyError, OSError) as e:
        raise BootstrapError(f"{folder} does not load as a causal language model: {e}") from None
    weights = sorted(p.name for p in folder.iterdir() if p.suffix in (".safetensors", ".bin"))
    if not weights:
        raise BootstrapError(f"{folder} has no weights (*.safetensors or *.bin)")
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder)
    except (ValueError, OSError, TypeError) as e:
        raise BootstrapError(f"{folder}: the tokenizer does not load: {e}") from None
    if not getattr(tokenizer, "chat_template", None):
        raise BootstrapError(f"{folder}: the tokenizer has no chat_template (serving formats requests with it)")
    if tokenizer.eos_token is None:
        raise BootstrapError(f"{folder}: the tokenizer has no eos token (serving stops generation at it)")
    try:
        tokenizer.apply_chat_template([{"role": "user", "content": "hello"}], add_generation_prompt=True,
                                      tokenize=False)
    except Exception as e:  # a template error of any kind: Jinja raises its own exception types
        raise BootstrapError(f"{folder}: the chat template does not render a user message: {e}") from None
    return {"architecture": type(model).__name__, "model_type": config.model_type,
            "parameters": sum(p.numel() for p in model.parameters()), "weights": weights,
            "eos_token": tokenizer.eos_token}


def _stage_base_checkpoint(folder: Path, staging: Path, meta: dict) -> Path:
    """The base checkpoint's files (symlinked, copied by the registry) plus rtrl_metadata.json."""
    staging.mkdir(parents=True)
    for p in folder.iterdir():
        if p.name != METADATA:
            (staging / p.name).symlink_to(p.resolve(), target_is_directory=p.is_dir())
    (staging / METADATA).write_text(json.dumps(meta, indent=2) + "\n")
    return staging


def _default_policy(cfg, folder: Path, fresh: bool, log: Callable[[str], None]) -> tuple[dict, Path | None]:
    """The default policy in `folder`: a copy of the cached one when it is current (and not `fresh`), else made
    here and then cached. Returns its metadata and the cache it came from (None when made here)."""
    cache = policy_cache(cfg)
    stale = "--fresh" if fresh else stale_reason(cache, cfg.policy)
    if not stale:
        shutil.copytree(cache, folder)
        meta = json.loads((folder / METADATA).read_text())
        log(f"reusing the default policy cached in {cache} (made {meta.get('created', '?')} by recipe {RECIPE} "
            f"from this [policy] config; --fresh trains a new one)")
        return meta, cache
    if cache.exists():
        log(f"not reusing {cache}: {stale}")
    meta = make_default_policy(cfg.policy, folder, log)
    try:
        keep_as_default_policy(folder, cache)
    except OSError as e:            # v0 is made: a cache that cannot be written costs only the next bootstrap
        log(f"warning: could not keep a copy in {cache} ({e}); later bootstraps will train again")
    else:
        log(f"kept a copy in {cache}: later bootstraps with this [policy] config reuse it")
    return meta, None


def bootstrap(cfg, force: bool = False, log: Callable[[str], None] = print, fresh: bool = False) -> dict:
    """Make and register v0 (see the module docstring); returns the summary `rtrl bootstrap` prints."""
    from registry.client import Registry

    t0 = time.monotonic()
    policy = cfg.policy
    if cfg.mlflow_tracking_uri().startswith("sqlite:///"):
        Path(cfg.mlflow_tracking_uri().removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    registry = Registry.from_config(cfg)
    current = registry.version_of("champion")
    if current is not None and not force:
        log(f"alias champion already points to version {current} of {registry.model}; nothing to do "
            "(--force makes a new v0)")
        return {"version": current, "skipped": True, "model": registry.model}

    work = cfg.state_path / "bootstrap"
    work.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="v0-", dir=work))
    try:
        if policy.base_checkpoint:
            base = Path(policy.base_checkpoint).expanduser().resolve()
            facts = validate_checkpoint(base)
            log(f"base checkpoint {base}: {facts['architecture']}, {facts['parameters']:,} parameters")
            meta = {"kind": "base_checkpoint", "parent": None, "source": str(base), **facts,
                    "code_version": code_version(),
                    "created": datetime.now(timezone.utc).isoformat(timespec="seconds")}
            folder = _stage_base_checkpoint(base, tmp / "checkpoint", meta)
            tags = {"kind": "base_checkpoint", "parent": "", "source": str(base)}
        else:
            folder = tmp / "checkpoint"
            meta, reused = _default_policy(cfg, folder, fresh, log)
            sampled, greedy = meta["eval"]["sampled"], meta["eval"]["greedy"]
            tags = {"kind": "bootstrap", "parent": "", "seed": policy.seed, "steps": meta["steps"],
                    "accuracy": sampled["edit_accuracy"], "broken_rate": sampled["broken_rate"],
                    "repair_accuracy": sampled["repair_accuracy"],
                    "greedy_accuracy": greedy["edit_accuracy"], "greedy_broken_rate": greedy["broken_rate"]}
        tags["code_version"] = meta["code_version"]
        version = registry.register(folder, tags=tags, run_name="bootstrap-v0", log=log)
        for alias in ALIASES:
            registry.set_alias(alias, version)
        log(f"registered {registry.model} version {version}; aliases {', '.join(ALIASES)} -> {version}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    summary = {"version": version, "model": registry.model, "kind": meta["kind"], "aliases": list(ALIASES),
               "seconds": round(time.monotonic() - t0, 1)}
    if meta["kind"] == "bootstrap":
        summary.update(accuracy=tags["accuracy"], broken_rate=tags["broken_rate"],
                       repair_accuracy=tags["repair_accuracy"],
                       greedy_accuracy=tags["greedy_accuracy"], greedy_broken_rate=tags["greedy_broken_rate"],
                       parameters=meta["parameters"], steps=meta["steps"], train_examples=meta["train_examples"],
                       train_seconds=meta["train_seconds"], final_loss=meta["final_loss"],
                       reused=str(reused) if reused else None)
    else:
        summary.update(source=meta["source"], parameters=meta["parameters"])
    return summary
