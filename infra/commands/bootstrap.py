"""`rtrl bootstrap [--force] [--fresh]`: make checkpoint v0 and register it with aliases `champion` and `control`.

The default policy (a small Llama with a tokenizer trained here, supervised on the task generator's
demonstrations) takes a few minutes on 2 CPU cores, once: it is kept in `policy.cache_dir` and a later bootstrap
with the same `[policy]` config registers that copy (`--fresh` trains again); `policy.base_checkpoint` registers an
existing Hugging Face causal-LM folder instead. Needs only the MLflow store (no `rtrl up`). Idempotent: when
`champion` is already set it says so and exits 0. Progress goes to stderr, the summary (one JSON object) to
stdout. Exit 1 when a base checkpoint cannot serve as the policy.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys

from infra.commands import add_command


def add_parser(subparsers) -> None:
    p = add_command(subparsers, "bootstrap", main, "make policy checkpoint v0 (or register policy.base_checkpoint) "
                    "with aliases champion and control",
                    epilog="idempotent: when alias champion is set it does nothing (exit 0) unless --force. The "
                           "default policy is kept in policy.cache_dir (default <state_dir>/policy-v0) and reused "
                           "by later bootstraps with the same [policy] config, in any state dir. Progress on stderr, "
                           "a JSON summary on stdout; needs only the MLflow store, not `rtrl up`.")
    p.add_argument("--force", action="store_true", help="make and register a new v0 even if champion is set "
                   "(moves champion and control to it)")
    p.add_argument("--fresh", action="store_true", help="train the default policy even when policy.cache_dir "
                   "holds a current one (the new one replaces it there)")


def main(args, cfg) -> int:
    # Before torch loads: OpenMP workers that sleep instead of spinning when the cores are shared (spinning
    # threads made training steps up to 10x slower on a busy 2-core machine).
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    from trainer.bootstrap.bootstrap import BootstrapError, bootstrap

    def log(line: str) -> None:
        print(f"[bootstrap] {line}", file=sys.stderr, flush=True)

    out = sys.stdout
    try:
        # libraries print while working (DeepSpeed's logger, imported by save_pretrained, writes to stdout):
        # stdout carries only the summary
        with contextlib.redirect_stdout(sys.stderr):
            summary = bootstrap(cfg, force=args.force, log=log, fresh=args.fresh)
    except BootstrapError as e:
        print(f"rtrl bootstrap: {e}", file=sys.stderr)
        return 1
    print(json.dumps(summary), file=out)
    return 0
