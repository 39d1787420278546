"""Episodes of a checkpoint kept for later gates (`gate.tasks.reuse_episodes`).

Each cycle's gate runs the champion on the same tasks with the same seeds, and the champion was the previous
gate's candidate: its episodes are already measured. With the cache on, a gate stores its arms' episodes (when none
was an infrastructure failure) and a later gate reads the champion's instead of running them again, so only the
candidate's arm runs. The pairing the gate needs, (task, sample) with the same seed for both arms, is kept; what
can differ from a rerun is floating-point noise of batching, as between two reruns.

A checkpoint is named by its content digest (the registry's `rtrl.content_sha256` tag), not its version number,
and the cache lives with the suite (`<suite>/.episode-cache/`), which outlives a state dir: so a checkpoint
registered again elsewhere with the same bytes (every `rtrl demo` registers the same cached v0) is measured once
per suite, and two registries' version 2 never share episodes. A version without the tag is not cached.

The key covers what decides an episode besides the weights: the suite folder, the sampling seed and serving's
temperature, completion budget and context length, and the Episode record's fields (a field added later would read
as its default from an older entry, so such entries are not reused). Entries are per (task, sample), so a gate on a
part of the suite (an org's candidates run the first `gate.tasks.org_max_tasks` tasks) reads the part it needs
from a file
a whole-suite gate wrote. Anything else that changes episodes (the harness or grading code, a task's content under
the same id) needs a new suite folder or `gate.tasks.reuse_episodes = false`.

Retention (`gate.keep_cached_versions`, after each orchestrated cycle): each suite's cache keeps the files of the
checkpoints most recently used; a file is used when written or reused (`load` touches it), so the champion's and
the anchor's, which every gate reads, stay. An evicted checkpoint's arm is run again when a gate next needs it.

Samples per task are not in the key: sample k of a task has the same seeds whatever the count (`harness.turn_seed`),
so a file of 4 samples per task serves a gate of 2 (its samples 0 and 1), and a gate that runs more samples adds
them to the file. A gate reuses a file only when it holds every (task, sample) it needs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path

from evals.records import Episode


def cache_key(suite_dir: Path, seed: int, serving) -> str:
    parts = {"suite": str(Path(suite_dir).resolve()), "seed": seed,
             "temperature": serving.temperature, "max_tokens": serving.max_tokens,
             "max_model_len": serving.max_model_len, "episode_fields": [f.name for f in dataclasses.fields(Episode)]}
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


CACHE_DIR = ".episode-cache"


def cache_root(suite_dir: Path) -> Path:
    """Where a suite's gates keep checkpoints' episodes."""
    return Path(suite_dir) / CACHE_DIR


def touch(path: Path) -> None:
    """Mark a kept file used now: retention evicts the least recently used first (infra/retention/stores.py)."""
    try:
        os.utime(path)
    except OSError:
        pass       # removed meanwhile: the gate already holds its episodes


class EpisodeCache:
    """`<root>/<digest>-<key>.jsonl`: one checkpoint's episodes under one key; `task_ids`: the tasks a gate wants."""

    def __init__(self, root: Path, key: str, task_ids: list[str]):
        self.root, self.key, self.task_ids = Path(root), key, list(task_ids)

    def path(self, digest: str) -> Path:
        return self.root / f"{digest[:32]}-{self.key}.jsonl"

    def _read(self, digest: str) -> list[Episode]:
        p = self.path(digest)
        if not p.exists():
            return []
        return [Episode.from_dict(json.loads(line)) for line in p.read_text(encoding="utf-8").splitlines()]

    def _wanted(self, samples: int) -> set[tuple[str, int]]:
        return {(t, k) for t in self.task_ids for k in range(samples)}

    def load(self, digest: str, arm: str, samples: int) -> list[Episode] | None:
        """The checkpoint's stored samples 0..samples-1 of every task, relabelled as `arm` (task, sample order), or
        None unless all of them are stored."""
        wanted = self._wanted(samples)
        episodes = {(e.task_id, e.sample): e for e in self._read(digest) if (e.task_id, e.sample) in wanted}
        if not wanted or len(episodes) < len(wanted):
            return None
        for e in episodes.values():
            e.arm = arm
            e.notes = {**e.notes, "reused_from": str(self.path(digest))}
        touch(self.path(digest))
        return [episodes[k] for k in sorted(episodes)]

    def covers(self, digest: str, samples: int) -> bool:
        """Whether every task's samples 0..samples-1 of the checkpoint are stored."""
        return self._wanted(samples) <= {(e.task_id, e.sample) for e in self._read(digest)}

    def store(self, digest: str, episodes: list[Episode]) -> Path | None:
        """Keep the checkpoint's episodes (atomically) beside those already stored (a stored (task, sample) stays
        as it was: earlier gates compared with it); not when one was an infrastructure failure. The path or
        None."""
        if not episodes or any(not e.valid for e in episodes):
            return None
        kept = {(e.task_id, e.sample): e for e in self._read(digest)}
        for e in episodes:
            kept.setdefault((e.task_id, e.sample), e)
        self.root.mkdir(parents=True, exist_ok=True)
        p = self.path(digest)
        tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            for k in sorted(kept):
                f.write(json.dumps(kept[k].to_dict(), default=str) + "\n")
        os.replace(tmp, p)
        return p
