"""Starting `rtrl train` on several ranks: the same command again, once per rank, under torchrun.

    if needs_launch(ranks):
        relaunch(ranks, rtrl_args)     # becomes `python -m torch.distributed.run ... -m infra.cli ARGS`; no return

`rtrl train` with `trainer.ranks` (or `--ranks`) N > 1, started as one process, replaces itself with torchrun
(`torch.distributed.run --standalone --nproc-per-node N`): one process per rank on this machine, a free rendezvous
port, RANK / LOCAL_RANK / WORLD_SIZE / MASTER_* set for each. The ranks run the same command with
`trainer.ranks=N` (so they do not launch again); rank 0 alone prints the JSON summary, so the launcher's stdout is
rank 0's. The process keeps its pid (exec): a signal to it (the orchestrator stopping a step) reaches torchrun,
which stops every rank, and a rank that fails makes torchrun stop the others and exit non-zero.

On GPUs each rank takes cuda:LOCAL_RANK (NCCL); without one the ranks run DeepSpeed's CPU accelerator with gloo
(DS_ACCELERATOR=cpu) and share the cores (OMP_NUM_THREADS = cores / N unless set). A process that is already a rank
of a larger world (WORLD_SIZE > 1: torchrun or the `deepspeed` launcher started it) is not launched again.
"""

from __future__ import annotations

import os
import sys


def in_launched_world() -> bool:
    """True in a rank of a multi-rank job (a launcher set WORLD_SIZE > 1)."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def needs_launch(ranks: int) -> bool:
    return ranks > 1 and not in_launched_world()


def launch_argv(ranks: int, rtrl_args: list[str]) -> list[str]:
    """torchrun's command line: `ranks` processes on this machine, each `python -m infra.cli RTRL_ARGS`."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1",
            "--nproc-per-node", str(ranks), "-m", "infra.cli", *rtrl_args]


def launch_env(ranks: int, env: dict[str, str] | None = None) -> dict[str, str]:
    """The ranks' environment: this one, less a single process's rank variables (torchrun sets its own), with the
    CPU accelerator and a share of the cores each when there is no GPU."""
    import torch

    out = dict(os.environ if env is None else env)
    from trainer.engine import OWN_WORLD, WORLD_VARS

    for k in (*WORLD_VARS, "LOCAL_WORLD_SIZE", OWN_WORLD):   # a parent's world of one is not the ranks' either
        out.pop(k, None)
    if not torch.cuda.is_available():
        out.setdefault("DS_ACCELERATOR", "cpu")
        out.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // ranks)))
    return out


def relaunch(ranks: int, rtrl_args: list[str]) -> None:
    """Replace this process with torchrun running `rtrl RTRL_ARGS` on `ranks` ranks (does not return)."""
    sys.stdout.flush()
    sys.stderr.flush()
    argv = launch_argv(ranks, rtrl_args)
    os.execve(argv[0], argv, launch_env(ranks))
