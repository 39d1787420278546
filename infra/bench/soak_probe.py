"""What `rtrl bench soak` measures after each cycle: the state's bytes and files by part, the embedded broker's Kafka
log, and the resident memory of each long-lived process (the broker and, over storage "s3", its object store among
them). Plain reads of the state folder, of the object store and of /proc; nothing here changes anything."""

from __future__ import annotations

import os
from pathlib import Path

# the state's parts (relative to the loop's state folder), each named once; what no part names is "other"
PARTS: dict[str, tuple[str, ...]] = {
    "registry_artifacts": ("mlflow-artifacts",),
    "caches": ("checkpoints",),
    "archive": ("archive",),
    "reward_tables": ("rewards/table", "rewards/cycles"),
    "carry": ("rewards/carry",),
    "logs": ("logs", "orchestrator/logs"),
    "trainer_scratch": ("train",),
    "gate": ("gate",),
    "ab": ("ab",),
    "dagster": ("dagster",),
}


def tree_usage(root: Path) -> tuple[int, int]:
    """(bytes, files) under `root`; (0, 0) when it does not exist. Files that vanish while walked are skipped."""
    size = files = 0
    for dirpath, _, names in os.walk(root):
        for name in names:
            try:
                size += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                continue
            files += 1
    return size, files


def state_usage(state: Path) -> dict[str, dict[str, int]]:
    """{part: {"bytes", "files"}} for every part of `PARTS`, plus "other" (the rest of the state) and "total"."""
    out: dict[str, dict[str, int]] = {}
    for part, rels in PARTS.items():
        b = f = 0
        for rel in rels:
            pb, pf = tree_usage(state / rel)
            b, f = b + pb, f + pf
        out[part] = {"bytes": b, "files": f}
    total_b, total_f = tree_usage(state)
    named_b = sum(v["bytes"] for v in out.values())
    named_f = sum(v["files"] for v in out.values())
    out["other"] = {"bytes": total_b - named_b, "files": total_f - named_f}
    out["total"] = {"bytes": total_b, "files": total_f}
    return out


def kafka_log_usage(kafka) -> dict:
    """The embedded broker's Kafka log (`kafka` is a KafkaConfig): over storage "s3", the bytes and count of its record
    batches in the object store ({"engine", "bytes", "batches", "objects"}: what broker-watch's retention bounds);
    over "memory" the log is inside the broker, where only its resident memory shows it ("bytes" None); on a Kafka
    cluster (kafka.bootstrap_servers) nothing is measured here."""
    if kafka.bootstrap_servers:
        return {"engine": "cluster", "bytes": None}
    if kafka.storage_engine != "s3":
        return {"engine": kafka.storage_engine, "bytes": None}
    from botocore.exceptions import BotoCoreError, ClientError

    from infra.stack.broker import ObjectStore
    from infra.stack.log_retention import log_usage

    try:
        return {"engine": "s3", **log_usage(ObjectStore.url_for(kafka))}
    except (BotoCoreError, ClientError) as e:
        return {"engine": "s3", "bytes": None, "error": f"{type(e).__name__}: {e}"[:300]}


def rss_bytes(pid: int, proc: Path = Path("/proc")) -> int | None:
    """The resident set of `pid` in bytes (VmRSS), or None when it is gone."""
    try:
        for line in (proc / str(pid) / "status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return 0   # a kernel thread or a zombie: no resident set


def children(pid: int, proc: Path = Path("/proc")) -> list[int]:
    """The direct children of `pid`, by scanning /proc/*/stat (ppid is the 4th field after the command)."""
    kids = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 1 and fields[1] == str(pid):
            kids.append(int(entry.name))
    return sorted(kids)


def tree_rss(pid: int, proc: Path = Path("/proc"), skip: frozenset[int] = frozenset()) -> dict[str, int]:
    """{"self": the process's RSS, "children": the sum over its descendants} in bytes; {} when it is gone. The
    subtrees of the pids in `skip` (processes measured on their own) are left out. Shared pages count in each
    process that maps them (vLLM's engines share their parent's), so the sums are upper bounds."""
    own = rss_bytes(pid, proc)
    if own is None:
        return {}
    total, todo, seen = 0, children(pid, proc), {pid}
    while todo:
        kid = todo.pop()
        if kid in seen or kid in skip:
            continue
        seen.add(kid)
        total += rss_bytes(kid, proc) or 0
        todo.extend(children(kid, proc))
    return {"self": own, "children": total}


def process_rss(pids: dict[str, int], proc: Path = Path("/proc")) -> dict[str, dict[str, int]]:
    """{name: tree_rss} for each named long-lived process that is still running; a named process started by
    another (serving, started by the orchestrator) counts under its own name only."""
    named = frozenset(pids.values())
    return {name: r for name, pid in sorted(pids.items()) if (r := tree_rss(pid, proc, named - {pid}))}
