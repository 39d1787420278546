"""The DeepSpeed engine around the policy: ZeRO stage from config, explicit accumulation boundaries, resumable
checkpoints. On this machine it runs on the CPU accelerator (gloo), in one process or one per rank; on GPUs the same
code runs one rank per GPU. `rtrl train` starts the ranks itself (`trainer.ranks`, `--ranks`: trainer/launch.py).

Accumulation: the trainer calls `backward(loss, boundary)` once per micro-batch; the loss is already normalized
by the step's constant (Dr. GRPO aggregation), so DeepSpeed must not divide it again (`scale_wrt_gas=False`), and
the optimizer steps exactly at the boundary the trainer says, whatever the micro-batch count of that step.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch


def ops_cache_env() -> None:
    """DeepSpeed compiles its CPU ops (the shared-memory collectives) on first use into TORCH_EXTENSIONS_DIR,
    ~/.cache/torch_extensions by default: one folder for every checkout on the machine, so two venvs rebuild over
    each other (minutes each time). Keep them with the venv instead (setup builds them: `prebuild_ops`)."""
    os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(Path(sys.prefix) / "torch_extensions"))


def prebuild_ops() -> None:
    """Compile the ops DeepSpeed would build at the first `deepspeed.initialize` (infra/setup.sh runs this)."""
    _single_process_env()
    from deepspeed.comm.torch import build_shm_op

    build_shm_op()


def set_rank_device() -> None:
    """On GPUs, this rank's own GPU (cuda:LOCAL_RANK) as the current device, before any model or tensor is placed:
    otherwise every rank's `.cuda()` lands on cuda:0. Nothing on the CPU."""
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))


WORLD_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
OWN_WORLD = "RTRL_OWN_WORLD_PID"   # the process that set WORLD_VARS for a world of one itself (no launcher did)


def _single_process_env() -> None:
    """A launcher's (torchrun, deepspeed) RANK, LOCAL_RANK, WORLD_SIZE and MASTER_* are kept (setdefault); alone, the
    values of a world of one on a free port. Values a parent process set for its own world of one (a cycle step that
    trained in the orchestrator's process, then started a process that trains) are not a launcher's: the child
    picks a port of its own instead of the parent's, which the parent's process group still holds."""
    ops_cache_env()
    if not torch.cuda.is_available():
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    if os.environ.get(OWN_WORLD, str(os.getpid())) != str(os.getpid()):
        for k in (*WORLD_VARS, OWN_WORLD):
            os.environ.pop(k, None)
    for k, v in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_ADDR", "127.0.0.1")):
        os.environ.setdefault(k, v)
    if "MASTER_PORT" in os.environ:
        return
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        os.environ["MASTER_PORT"] = str(s.getsockname()[1])
    os.environ[OWN_WORLD] = str(os.getpid())


class Engine:
    def __init__(self, model: torch.nn.Module, lr: float, weight_decay: float, max_grad_norm: float,
                 zero_stage: int, micro_batch: int, accumulation: int, precision: str = "fp32"):
        _single_process_env()
        import deepspeed

        from trainer.modes import deepspeed_sections

        trainable = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(trainable, lr=lr, weight_decay=weight_decay)
        config = {"train_micro_batch_size_per_gpu": micro_batch, "gradient_accumulation_steps": accumulation,
                  "gradient_clipping": max_grad_norm, "zero_optimization": {"stage": zero_stage},
                  "steps_per_print": 10**9, "wall_clock_breakdown": False} | deepspeed_sections(precision)
        self.engine, self.optimizer, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)

    def close(self) -> None:
        """Release the engine: DeepSpeed's `destroy` removes the gradient hooks ZeRO put on each parameter's
        gradient accumulator. Those hooks hold the optimizer through C++ references that Python's collector
        cannot see, so without it every engine (its model, masters and optimizer state) outlives its training in
        a process that trains again (the in-process executor: about one model's worth of memory a cycle)."""
        engine = self.__dict__.pop("engine", None)
        self.__dict__.pop("optimizer", None)
        if engine is not None:
            engine.destroy()

    @property
    def module(self) -> torch.nn.Module:
        return self.engine.module

    @property
    def rank(self) -> int:
        return int(self.engine.global_rank)

    @property
    def local_rank(self) -> int:
        """This rank's index on its machine: local rank 0 tidies the machine's step checkpoints."""
        return int(os.environ.get("LOCAL_RANK", "0"))

    @property
    def world_size(self) -> int:
        return int(self.engine.world_size)

    @property
    def device(self) -> torch.device:
        return self.engine.device

    def forward(self, **kw):
        return self.engine(**kw)

    def backward(self, loss: torch.Tensor, boundary: bool) -> float | None:
        """Accumulate this micro-batch's gradient; at the step's boundary clip and step. Returns the grad norm
        (before clipping) at a boundary."""
        self.engine.set_gradient_accumulation_boundary(boundary)
        self.engine.backward(loss, scale_wrt_gas=False)
        # The trainer runs the module itself (its decoder and head apart), not `engine.forward`, which is where
        # DeepSpeed ends a micro-step: at ZeRO-3 each micro-batch's gradient would then overwrite the last one's
        # (micro_step_id stays 0: "copy, don't accumulate"). End it here, as the next `engine.forward` would.
        end_micro_step = getattr(self.engine.optimizer, "clear_backward_seen_flag", None)
        if end_micro_step is not None:
            end_micro_step()
        self.engine.step()
        if boundary:
            norm = self.engine.get_global_grad_norm()
            return None if norm is None else float(norm)
        return None

    def state_dict_for_save(self) -> dict | None:
        """The whole model's weights for a Hugging Face save. At ZeRO-3 each rank holds a shard of every parameter
        (the module's own tensors are empty placeholders), so they are gathered, a layer at a time, onto rank 0's
        CPU memory in the parameters' own dtype (DeepSpeed's "16-bit" consolidated state dict: fp32 when the model
        is fp32, as on the CPU here); other ranks get None. Collective: every rank must call it. Below ZeRO-3 every
        rank holds the whole model: None, and `save_pretrained` takes the module's own state dict."""
        if self.engine.zero_optimization_partition_weights():
            return self.engine._zero3_consolidated_16bit_state_dict()
        return None

    def all_reduce_sum(self, values: list[float]) -> list[float]:
        """`values` summed over the ranks (the step's metrics of every rank's micro-batches); as is with one rank."""
        if self.world_size == 1:
            return list(values)
        from deepspeed import comm

        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        comm.all_reduce(t)
        return t.tolist()

    def save(self, directory: Path, tag: str, client_state: dict) -> None:
        """A resumable checkpoint under `directory/tag`. Collective: every rank calls it, and when it returns every
        rank has written its part (a barrier ends it) and `directory/latest` names `tag`."""
        self.engine.save_checkpoint(str(directory), tag=tag, client_state=client_state)

    def load(self, directory: Path) -> dict | None:
        """Load the latest checkpoint under `directory`; its client state, or None when there is none."""
        if not (directory / "latest").is_file():
            return None
        _, client_state = self.engine.load_checkpoint(str(directory))
        return client_state
