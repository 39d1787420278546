"""The local checkpoint cache, bounded in bytes.

`Registry.local_path` downloads a version once into `<cache_dir>/<registered model>/v<N>` (through a temporary
`.v<N>-*` folder renamed into place), and `registry.shipping.served_folder` its served weights into
`served-v<N>` (the same version: held and evicted by the same rules). Every host that loads versions has one
(the orchestrator's, the gate's, serving's). `choose_evictions` decides what goes, from injected sizes, times and
the versions held:

  1. cached copies of versions whose artifacts retention deleted (nothing can download them again anyway);
  2. hidden folders (`.v<N>-*` downloads that never finished, `.evict-*` leftovers) older than `partial_age_s`;
  3. then, while the cache is over `max_bytes`, the least recently downloaded version that nothing holds.

A held version (`protected`: what an alias points to, what serving holds, a cycle's candidate in flight) is never
evicted, even when the held ones alone exceed `max_bytes`. `evict` renames the folder away before removing it, so a
concurrent `local_path` sees a whole checkpoint or none and downloads it again.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from pathlib import Path

PARTIAL_AGE_S = 3600.0
SERVED_PREFIX = "served-"   # `<model>/served-v<N>`: a version's served weights, rebuilt (registry/shipping.py)


@dataclass(frozen=True)
class CacheEntry:
    model: str                # the registered model (the folder under the cache root)
    version: str | None       # None: a hidden folder (an unfinished download, an eviction's leftover)
    path: Path
    bytes: int
    mtime: float              # when it was downloaded (the folder's mtime, epoch seconds)


def folder_stat(path: Path) -> tuple[int, float]:
    """(bytes of its files, the latest mtime of the folder and its files)."""
    total, latest = 0, path.stat().st_mtime
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                st = os.lstat(os.path.join(root, name))
            except FileNotFoundError:   # removed while we walked
                continue
            total, latest = total + st.st_size, max(latest, st.st_mtime)
    return total, latest


def scan(cache_dir: str | Path) -> list[CacheEntry]:
    """Every cached version (and hidden leftover folder) under the cache root, with its bytes and mtime."""
    root = Path(cache_dir)
    out = []
    for model_dir in sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []:
        for d in sorted(p for p in model_dir.iterdir() if p.is_dir()):
            name = d.name.removeprefix(SERVED_PREFIX)     # a version's served weights (registry/shipping.py)
            version = name[1:] if name.startswith("v") and name[1:].isdigit() else None
            if version is None and not d.name.startswith("."):
                continue     # not ours
            try:
                mtime = d.stat().st_mtime
                size, latest = folder_stat(d)
            except FileNotFoundError:            # evicted meanwhile
                continue
            # a hidden folder may be a download in progress: its latest file says when it last moved
            out.append(CacheEntry(model_dir.name, version, d, size, latest if version is None else mtime))
    return out


def choose_evictions(entries: Iterable[CacheEntry], *, max_bytes: int, protected: Collection[tuple[str, str]],
                     gone: Collection[tuple[str, str]] = (), now_s: float,
                     partial_age_s: float = PARTIAL_AGE_S) -> list[tuple[CacheEntry, str]]:
    """(entry, reason) for each folder to remove (the module docstring says which); `protected` and `gone` are
    (registered model, version) pairs."""
    entries = list(entries)
    out: list[tuple[CacheEntry, str]] = []
    rest: list[CacheEntry] = []
    for e in entries:
        key = (e.model, e.version)
        if e.version is None:
            if now_s - e.mtime >= partial_age_s:
                out.append((e, "unfinished download or eviction"))
            else:
                rest.append(e)
        elif key in protected:
            rest.append(e)
        elif key in gone:
            out.append((e, "artifacts deleted by retention"))
        else:
            rest.append(e)
    total = sum(e.bytes for e in rest)
    for e in sorted((e for e in rest if e.version is not None and (e.model, e.version) not in protected),
                    key=lambda e: (e.mtime, e.model, int(e.version))):
        if total <= max_bytes:
            break
        out.append((e, f"cache over cache_max_bytes ({max_bytes})"))
        total -= e.bytes
    return out


def evict(entry: CacheEntry) -> None:
    """Remove a cached folder: renamed to a hidden name first (atomic), then deleted."""
    path = entry.path
    if not path.name.startswith("."):
        away = path.with_name(f".evict-{path.name}-{uuid.uuid4().hex[:8]}")
        try:
            os.replace(path, away)
        except FileNotFoundError:
            return
        path = away
    shutil.rmtree(path, ignore_errors=True)


def prune(cache_dir: str | Path, *, max_bytes: int, protected: Collection[tuple[str, str]],
          gone: Collection[tuple[str, str]] = (), now_s: float, dry_run: bool = False) -> dict:
    """Bound the cache at `cache_dir`: evict what `choose_evictions` picks. A summary: bytes before and after, and
    each eviction (`model`, `version`, `bytes`, `reason`)."""
    entries = scan(cache_dir)
    chosen = choose_evictions(entries, max_bytes=max_bytes, protected=protected, gone=gone, now_s=now_s)
    if not dry_run:
        for e, _ in chosen:
            evict(e)
    before = sum(e.bytes for e in entries)
    freed = sum(e.bytes for e, _ in chosen)
    return {"bytes_before": before, "bytes_after": before - freed, "max_bytes": max_bytes, "dry_run": dry_run,
            "evicted": [{"model": e.model, "version": e.version, "bytes": e.bytes, "reason": why}
                        for e, why in chosen]}
