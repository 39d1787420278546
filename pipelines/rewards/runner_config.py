"""`[beam]`: the Beam pipeline options of the reward jobs, from config (the command line adds to them).

    [beam]
    options = ["--runner=DaskRunner", "--dask_client_address=tcp://scheduler:8786"]   # every job
    cycle = []                                                                       # rtrl rewards --cycle
    replay = []                                                                      # rtrl replay
    stream = ["--runner=FlinkRunner", "--flink_master=flink:8081"]                  # rtrl rewards-stream

A job's options are `options`, then its own list, then what follows `--` on its command line (a later option of
the same name wins). No runner anywhere: the DirectRunner. `DaskRunner` is accepted as a short name for Beam's
`apache_beam.runners.dask.dask_runner.DaskRunner`. The bounded jobs (cycle, replay) run on any runner
(pipelines/rewards/bounded.py); the stream job needs a portable runner with state and timers (Flink, Dataflow).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

RUNNER_ALIASES = {"DaskRunner": "apache_beam.runners.dask.dask_runner.DaskRunner"}
Job = Literal["cycle", "replay", "stream"]


class BeamConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    options: list[str] = Field(default_factory=list, description="Beam pipeline options for every reward job, "
                               "e.g. [\"--runner=DaskRunner\", \"--dask_client_address=tcp://HOST:8786\"].")
    cycle: list[str] = Field(default_factory=list, description="More options for `rtrl rewards --cycle`.")
    replay: list[str] = Field(default_factory=list, description="More options for `rtrl replay`.")
    stream: list[str] = Field(default_factory=list, description="More options for `rtrl rewards-stream`.")

    def for_job(self, job: Job, extra: list[str] | None = None) -> list[str]:
        """The job's pipeline options: config, then the command line's; the DirectRunner when none names one."""
        args = [*self.options, *getattr(self, job), *(extra or [])]
        return with_runner_alias(args) if any(a.startswith("--runner") for a in args) else \
            ["--runner=DirectRunner", *args]


def with_runner_alias(args: list[str]) -> list[str]:
    """`--runner=DaskRunner` (or `--runner DaskRunner`) spelled as the class Beam can load."""
    out, it = [], iter(args)
    for a in it:
        if a.startswith("--runner="):
            name = a.split("=", 1)[1]
            out.append(f"--runner={RUNNER_ALIASES.get(name, name)}")
        elif a == "--runner":
            name = next(it, "")
            out += ["--runner", RUNNER_ALIASES.get(name, name)]
        else:
            out.append(a)
    return out
