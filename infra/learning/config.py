"""`[learning]`: the sizes of `rtrl bench learning` (the loop in one process, champions scored against v0).

The loop's own steps take their settings from the other sections as production does: `[trainer]`, `[rewards]`,
`[gate]` and `[simulator]` (the users' behaviour). These keys say how much traffic a cycle has and on how many fixed
users each champion is scored."""

from __future__ import annotations

import os

from pydantic import BaseModel, ConfigDict, Field


class LearningConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    train_users: int = Field(default=96, ge=1, le=10_000, description="Simulated users serving one cycle's "
                             "traffic: a new population each cycle (a cycle's traffic is new users' new tasks).")
    cycle_hours: float = Field(default=2.0, gt=0, le=48, description="Simulated hours of traffic per cycle.")
    score_users: int = Field(default=128, ge=2, le=10_000, description="The fixed users every champion of a seed "
                             "is scored on, against v0 (paired by user).")
    score_hours: float = Field(default=2.0, gt=0, le=48, description="Simulated hours of each scoring run.")
    score_seed: int = Field(default=500_000, ge=0, description="Population seed of the scoring users (seed k of "
                            "the bench adds k): never a training population's.")
    traffic_seed: int = Field(default=100_000, ge=0, description="Population seed of cycle c of seed k's "
                              "traffic: this + 1000 k + c.")
    score_v0: bool = Field(default=True, description="Score v0 on the scoring users before the first cycle: the "
                           "baseline of each champion's `vs_v0`. false: the first champion scored is the baseline "
                           "(`rtrl bench specialize`, which compares the specialized policy with the shared champion).")
    suite_samples: int = Field(default=1, ge=0, le=100, description="Samples per task when each new champion (and "
                               "v0) runs the held-out gate suite in this process (its resolved rate per cycle); "
                               "0 = not run.")
    jobs: int = Field(default=0, ge=0, le=256, description="Processes that share a population's users when a "
                      "checkpoint serves them, each on one torch thread (0 = one per CPU core).")
    threads: int = Field(default=0, ge=0, le=1024, description="torch CPU threads of the training step (0 = all "
                         "cores).")

    def serving_jobs(self) -> int:
        return self.jobs or os.cpu_count() or 1
