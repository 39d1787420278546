"""What the ranks of one training job do together: rank 0 decides and writes, the others are told.

    ranks = Ranks.start()                    # the process group (gloo on CPU, NCCL on GPUs), this rank's device
    parent = ranks.share(lookup() if ranks.main else None)   # rank 0's value on every rank
    ranks.same(fingerprint, "selected rows")                 # refuse to train when the ranks disagree
    ranks.close(ok)                                          # end the group (after a barrier when ok)

With one rank (no launcher) nothing is started and every call is a plain return. The group is DeepSpeed's: its
`init_distributed` is what `deepspeed.initialize` would call later, so the engine reuses it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Ranks:
    rank: int = 0
    world: int = 1

    @property
    def main(self) -> bool:
        return self.rank == 0

    @property
    def local_main(self) -> bool:
        """Rank 0 of its machine (LOCAL_RANK 0; the only rank with one rank): it tidies the machine's run folders."""
        return self.world == 1 or os.environ.get("LOCAL_RANK", "0") == "0"

    @classmethod
    def start(cls) -> "Ranks":
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if world == 1:
            return cls()
        from trainer.engine import _single_process_env, set_rank_device

        set_rank_device()
        _single_process_env()        # keeps the launcher's variables; DS_ACCELERATOR=cpu without a GPU
        import deepspeed
        import torch.distributed as dist

        if not dist.is_initialized():
            deepspeed.init_distributed()      # the accelerator's backend: gloo on the CPU (no oneCCL), NCCL on GPUs
        return cls(dist.get_rank(), dist.get_world_size())

    def share(self, value):
        """Rank 0's `value` on every rank (pickled)."""
        if self.world == 1:
            return value
        import torch.distributed as dist

        box = [value]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def same(self, value, what: str) -> None:
        """Raise on every rank when the ranks' `value`s differ (e.g. a fingerprint of the rows each one read)."""
        if self.world == 1:
            return
        import torch.distributed as dist

        values = [None] * self.world
        dist.all_gather_object(values, value)
        if any(v != values[0] for v in values):
            raise RuntimeError(f"the ranks disagree on {what}: {values}")

    def barrier(self) -> None:
        if self.world > 1:
            import torch.distributed as dist

            dist.barrier()

    def close(self, ok: bool = True) -> None:
        """End the process group before the interpreter does: a group left to the exit handlers can abort a rank
        ("terminate called without an active exception") after its work is done. After success the ranks meet
        first, so none tears down the group while another still uses it; after a failure they do not wait."""
        if self.world == 1:
            return
        import torch.distributed as dist

        if dist.is_initialized():
            if ok:
                dist.barrier()
            dist.destroy_process_group()
