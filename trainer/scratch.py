"""What a training run leaves on disk, and when it goes.

A cycle's run folder, `<run root>/<cycle>` (the run root: `<state>/train` for the shared lineage,
`<state>/train/org-<org>` for an org's adapters), holds:

    steps/        DeepSpeed's step checkpoints, what a killed run resumes from. Only the newest is kept: once a save
                  has completed (DeepSpeed's `latest` file names the new tag), the tags before it are removed
                  (`stale_step_checkpoints`). A save killed half-way leaves `latest` on the previous tag, which is
                  still there.
    checkpoint/   the candidate's Hugging Face folder, written for the registry.

The whole run folder is removed once the candidate is registered: the registry holds the candidate from then on.
A run folder of another cycle is stale when a run of a different cycle starts in the same run root
(`stale_runs`): the orchestrator runs a lineage's cycles one after another and resumes a failed cycle before it
starts a new one, so by the time another cycle trains, the old one is done or given up (a cycle resumed after that
trains again from its first step). One training at a time per run root is therefore assumed; two cycles trained
at once in one state dir by hand would remove each other's resume points.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from pathlib import Path

STEPS = "steps"            # the step checkpoints' folder in a run folder
LATEST = "latest"          # DeepSpeed's pointer to the newest complete step checkpoint, written after its files
ORG_ROOT_PREFIX = "org-"   # an org lineage's run root inside the shared lineage's run root, not a cycle


def stale_step_checkpoints(steps_dir: Path) -> list[Path]:
    """The step checkpoints under `steps_dir` that the newest one makes useless: every tag folder but the one its
    `latest` file names. [] when there is no `latest`, or it names no folder: then nothing is known to be
    complete, and nothing is removed."""
    try:
        latest = (steps_dir / LATEST).read_text().strip()
    except OSError:
        return []
    if not latest or not (steps_dir / latest).is_dir():
        return []
    return sorted(p for p in steps_dir.iterdir() if p.is_dir() and p.name != latest)


def stale_runs(run_root: Path, cycle: str) -> list[Path]:
    """The run folders under `run_root` of cycles other than `cycle`: left by runs that failed for good (a finished
    run removes its own). Not the org lineages' run roots (`org-*`) inside the shared one."""
    if not run_root.is_dir():
        return []
    return sorted(p for p in run_root.iterdir()
                  if p.is_dir() and p.name != cycle and not p.name.startswith(ORG_ROOT_PREFIX))


def remove(paths: Iterable[Path]) -> None:
    """Remove each folder (whatever is already gone is fine: several ranks on one file system may race here)."""
    for path in paths:
        shutil.rmtree(path, ignore_errors=True)
