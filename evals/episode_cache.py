"""Episodes of a checkpoint kept for later gates (`gate.reuse_episodes`).

Each cycle's gate runs the champion on the same tasks with the same seeds, and the champion was the previous
gate's candidate: its episodes are already measured. With the cache on, a gate stores its arms' episodes (when none
was an infrastructure failure) and a later gate reads the champion's instead of running them again, so only the
candidate's arm runs. The pairing the gate needs, (task, sample) with the same seed for both arms, is kept; what
can differ from a rerun is floating-point noise of batching, as between two reruns.

A checkpoint is named by its content digest (the registry's `rtrl.content_sha256` tag), not its version number,
and the cache lives with the suite (`<suite>/.episode-cache/`), which outlives a state dir: so a checkpoint
registered again elsewhere with the same bytes (every `rtrl demo` registers the same cached v0) is measured once
per suite, and two registries' version 2 never share episodes. A version without the tag is not cached.

The key covers what decides an episode besides the weights: the suite folder, the kept task ids, samples per task,
the sampling seed and serving's temperature, completion budget and context length, and the Episode record's fields
(a field added later would read as its default from an older entry, so such entries are not reused). Anything else
that changes episodes (the harness or grading code) needs a new suite folder or `gate.reuse_episodes = false`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path

from evals.records import Episode


def cache_key(suite_dir: Path, task_ids: list[str], samples: int, seed: int, serving) -> str:
    parts = {"suite": str(Path(suite_dir).resolve()), "tasks": sorted(task_ids), "samples": samples, "seed": seed,
             "temperature": serving.temperature, "max_tokens": serving.max_tokens,
             "max_model_len": serving.max_model_len, "episode_fields": [f.name for f in dataclasses.fields(Episode)]}
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


CACHE_DIR = ".episode-cache"


def cache_root(suite_dir: Path) -> Path:
    """Where a suite's gates keep checkpoints' episodes."""
    return Path(suite_dir) / CACHE_DIR


class EpisodeCache:
    """`<root>/<digest>-<key>.jsonl`: one checkpoint's episodes under one key."""

    def __init__(self, root: Path, key: str):
        self.root, self.key = Path(root), key

    def path(self, digest: str) -> Path:
        return self.root / f"{digest[:32]}-{self.key}.jsonl"

    def load(self, digest: str, arm: str) -> list[Episode] | None:
        """The checkpoint's stored episodes relabelled as `arm`, or None when there are none under this key."""
        p = self.path(digest)
        if not p.exists():
            return None
        episodes = []
        for line in p.read_text(encoding="utf-8").splitlines():
            e = Episode.from_dict(json.loads(line))
            e.arm = arm
            e.notes = {**e.notes, "reused_from": str(p)}
            episodes.append(e)
        return episodes or None

    def store(self, digest: str, episodes: list[Episode]) -> Path | None:
        """Keep the checkpoint's episodes (atomically); not when one was an infrastructure failure. The path or
        None."""
        if not episodes or any(not e.valid for e in episodes):
            return None
        self.root.mkdir(parents=True, exist_ok=True)
        p = self.path(digest)
        tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            for e in episodes:
                f.write(json.dumps(e.to_dict(), default=str) + "\n")
        os.replace(tmp, p)
        return p
