"""What a version ships to serving: its served weights (registry/served.py), stored as an anchor or as a verified
delta against its parent's (registry/delta.py, registry/delta_chain.py), beside its float32 master.

    ship(registry, version, policy)     # after `register`: the version's `served/` artifacts and its served.* tags
    folder = served_folder(registry, version)   # its served weights on this host, rebuilt and verified if a delta

A version's artifacts are then `checkpoint/` (the master, as registered) and `served/`, which holds the non-weight
files of the checkpoint (config, tokenizer) and either the served weights whole (an anchor: model.safetensors or
shards) or `delta.json` + `delta.bin` against the parent's served weights. The tags say which (`served.kind`), the
parent (`served.parent`), how many deltas lie between it and its anchor (`served.since_anchor`), the bytes shipped
(`served.bytes`) against the whole (`served.full_bytes`), and the precision.

`served_folder` keeps each rebuilt version in the registry's cache (`<cache>/<model>/served-v<N>`), so a delta is
applied to the parent's cached copy; it builds into a temporary folder and renames it in, so a reader never sees
a half-built one. Any digest mismatch raises DeltaMismatch: nothing unverified is ever returned.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from registry.cache import SERVED_PREFIX
from registry.delta import DeltaMismatch, apply, digest, encode, read_delta, write_delta
from registry.delta_chain import ANCHOR, DELTA, Stored, choose_kind, to_build
from registry.served import in_precision, weight_files, weights_of, write_weights

SERVED_DIR = "served"
KIND_TAG, PARENT_TAG, SINCE_TAG = "served.kind", "served.parent", "served.since_anchor"
BYTES_TAG, FULL_TAG, PRECISION_TAG = "served.bytes", "served.full_bytes", "served.precision"
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt")
DIGESTS = "tensors.sha256.json"    # an anchor's per-tensor SHA-256 (a delta's are in its delta.json)


@dataclass(frozen=True)
class ShipPolicy:
    precision: str = "fp32"          # the serving precision: "bf16" on the GPU profiles, float32 on the CPU default
    anchor_every: int = 8            # a whole copy at least every N versions of a lineage
    max_delta_share: float = 0.5     # and whenever a delta would exceed this share of the whole
    shard_bytes: int = 2**30


def stored(registry, version: str) -> Stored:
    """How `version`'s served weights are stored (LookupError when it has none)."""
    tags = registry.info(version).tags
    if KIND_TAG not in tags:
        raise LookupError(f"version {version} ships no served weights")
    return Stored(str(version), tags.get(PARENT_TAG) or None, tags[KIND_TAG])


def _copy_non_weights(src: Path, dst: Path) -> None:
    dst.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if (f.is_file() and not f.name.endswith(WEIGHT_SUFFIXES) and not f.name.endswith(".index.json")
                and f.name not in (DIGESTS, "delta.json", "delta.bin")):
            shutil.copy2(f, dst / f.name)


TORCH_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def _declare_precision(folder: Path, precision: str) -> None:
    """config.json names the served precision, so a loader at dtype "auto" (vLLM, transformers) loads it as is."""
    path = Path(folder) / "config.json"
    config = json.loads(path.read_text())
    for key in ("torch_dtype", "dtype"):
        if key in config or key == "torch_dtype":
            config[key] = TORCH_DTYPES[precision]
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def ship(registry, version: str, policy: ShipPolicy, log=print, master: Path | None = None) -> dict:
    """Store `version`'s served weights (an anchor or a delta against its parent's, as `choose_kind` says) as its
    `served/` artifacts and tag it; returns the tags set. `master`: the version's checkpoint folder when this host
    has it (else it is downloaded). A version that ships already is left as it is."""
    info = registry.info(version)
    if KIND_TAG in info.tags:
        return {k: v for k, v in info.tags.items() if k.startswith("served.")}
    master = Path(master) if master is not None else registry.local_path(version)
    served = in_precision(weights_of(master), policy.precision)
    full = sum(len(t.data) for t in served.values())
    parent = info.tags.get("parent") or None
    delta, since = None, 0
    if parent is not None:
        try:      # a parent that ships nothing (registered before), in another precision, or unreadable: an anchor
            parent_tags = registry.info(parent).tags
            if KIND_TAG in parent_tags and parent_tags.get(PRECISION_TAG) == policy.precision:
                delta = encode(weights_of(served_folder(registry, parent)), served)
                since = 0 if parent_tags[KIND_TAG] == ANCHOR else int(parent_tags.get(SINCE_TAG, "0"))
        except Exception as e:  # noqa: BLE001 -- an anchor is always a correct (larger) choice
            log(f"[ship] version {version}: no delta against version {parent} ({type(e).__name__}: {e}); "
                "storing it whole")
            delta = None
    kind = choose_kind(since, policy.anchor_every, delta.stored_bytes if delta else None, full,
                       policy.max_delta_share)
    scratch = registry.cache_dir / registry.model     # beside the cache (a leftover is swept as a partial one)
    scratch.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".ship-v{version}-", dir=scratch) as tmp:
        out = Path(tmp) / SERVED_DIR
        _copy_non_weights(master, out)
        _declare_precision(out, policy.precision)
        if kind == DELTA:
            write_delta(out, delta)
            shipped = delta.stored_bytes
        else:
            write_weights(out, served, policy.shard_bytes)
            write_digests(out, served)
            shipped = sum(p.stat().st_size for p in weight_files(out))
        registry.client.log_artifacts(info.run_id, str(out), SERVED_DIR)
    tags = {KIND_TAG: kind, PARENT_TAG: parent if kind == DELTA else "",
            SINCE_TAG: str(since + 1 if kind == DELTA else 0), BYTES_TAG: str(shipped), FULL_TAG: str(full),
            PRECISION_TAG: policy.precision}
    registry.set_version_tags(version, tags)
    log(f"[ship] version {version}: {kind}, {shipped:,} bytes of {full:,} ({shipped / max(full, 1):.1%})"
        + (f" against version {parent}" if kind == DELTA else ""))
    return tags


def write_digests(folder: Path, tensors: dict) -> None:
    """The per-tensor SHA-256 of served weights, beside them (an anchor's, and every rebuilt copy's)."""
    (Path(folder) / DIGESTS).write_text(json.dumps({n: digest(t.data) for n, t in sorted(tensors.items())},
                                                   indent=1))


def tensor_digests(folder: Path) -> dict[str, str] | None:
    """{tensor: SHA-256} of a served copy's weights (None for a folder without them, e.g. a master)."""
    try:
        return json.loads((Path(folder) / DIGESTS).read_text())
    except (OSError, ValueError):
        return None


def shipped_of(tags: dict[str, str]) -> dict | None:
    """What a version's tags say it shipped: {kind, bytes, full_bytes, share, precision, parent}; None when it
    ships no served weights (an adapter, or shipping off)."""
    if KIND_TAG not in tags:
        return None
    shipped, full = int(tags.get(BYTES_TAG, 0)), int(tags.get(FULL_TAG, 0))
    return {"kind": tags[KIND_TAG], "bytes": shipped, "full_bytes": full,
            "share": round(shipped / full, 4) if full else None, "precision": tags.get(PRECISION_TAG),
            "parent": tags.get(PARENT_TAG) or None}


def verify_anchor(folder: Path, version: str) -> None:
    """Every tensor of an anchor's served weights against the digests shipped with it (DeltaMismatch if not)."""
    try:
        expected = json.loads((Path(folder) / DIGESTS).read_text())
    except (OSError, ValueError) as e:
        raise DeltaMismatch(f"version {version}: its served weights carry no readable {DIGESTS} ({e})") from None
    tensors = weights_of(folder)
    if sorted(tensors) != sorted(expected):
        raise DeltaMismatch(f"version {version}: its served weights hold other tensors than its digests list")
    for name, t in tensors.items():
        if digest(t.data) != expected[name]:
            raise DeltaMismatch(f"version {version}: tensor {name} does not match its recorded SHA-256")


def _download(registry, version: str, dest: Path) -> Path:
    import mlflow.artifacts

    info = registry._loadable(version, master=False)
    return Path(mlflow.artifacts.download_artifacts(run_id=info.run_id, artifact_path=SERVED_DIR, dst_path=str(dest),
                                                    tracking_uri=registry.tracking_uri))


def _cached(registry, version: str) -> Path:
    return registry.cache_dir / registry.model / f"{SERVED_PREFIX}v{version}"


def served_folder(registry, version: str) -> Path:
    """`version`'s served weights as a checkpoint folder on this host, cached: downloaded and verified (an anchor),
    or rebuilt from the newest cached (else the anchor's) copy on its chain, each delta applied and verified."""
    for rec in to_build(version, lambda v: stored(registry, v),
                        lambda v: (_cached(registry, v) / "config.json").is_file()):
        _build(registry, rec)
    return _cached(registry, version)


def _build(registry, rec: Stored) -> None:
    """Put `rec`'s served weights in the cache (a delta's parent is there already), verified."""
    dest = _cached(registry, rec.version)
    dest.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".served-v{rec.version}-", dir=dest.parent))
    try:
        got = _download(registry, rec.version, work / "download")
        if rec.kind == DELTA:
            try:
                child = apply(weights_of(_cached(registry, rec.parent)), read_delta(got))
            except DeltaMismatch as e:
                raise DeltaMismatch(f"version {rec.version} (delta against {rec.parent}): {e}") from None
            built = work / "built"
            _copy_non_weights(got, built)
            write_weights(built, child, ShipPolicy().shard_bytes)
            write_digests(built, child)
            got = built
        else:
            verify_anchor(got, rec.version)
        try:
            os.replace(got, dest)
        except OSError:
            if not (dest / "config.json").is_file():   # not a concurrent build that won the race
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
