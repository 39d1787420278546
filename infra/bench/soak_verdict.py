"""`rtrl bench soak`'s checks, as pure functions of the per-cycle records it took (infra/bench/soak.py):

- time: each step's median seconds over the last 6 cycles within `time_ratio` of its median over cycles 4-9 (a
  step's difference under `time_floor_s` seconds passes: sub-second steps are all noise);
- traffic: the median of the Kafka records each cycle's range held over the last 6 cycles within `ratio` (either
  way) of its median over cycles 4-9: the time check compares like with like only when each cycle read as much
  (a cycle that overruns the cadence leaves the next one a longer range);
- memory: each long-lived process's resident memory (its own and its children's) at the end within `rss_ratio` of
  its memory after cycle 4;
- disk: once the retention window has filled, registry artifact bytes and cache bytes stay within `disk_ratio` of
  their level over the first cycles after it filled, and at most K versions besides the aliased ones hold
  artifacts;
- archive: the archive's file count grows no faster than its bytes (from cycle 4 to the end);
- every cycle done.

Each check returns {"ok": bool, ...the figures it compared}. A run shorter than a window compares what it has and
says so ("short": true); it never passes a check it could not make.
"""

from __future__ import annotations

from statistics import median


def _cycles(records: list[dict], first: int, last: int) -> list[dict]:
    """Records of cycles `first`..`last` (1-based, inclusive)."""
    return records[first - 1:last]


def check_time(records: list[dict], ratio: float = 1.25, floor_s: float = 1.0) -> dict:
    base, tail = _cycles(records, 4, 9), records[-6:]
    short = len(records) < 15      # the windows overlap below 15 cycles
    if len(records) < 5:
        return {"ok": False, "short": True, "reason": f"{len(records)} cycles: need at least 5"}
    steps = sorted({s for r in records for s in r["seconds"]})
    per_step, ok = {}, True
    for step in steps:
        b = [r["seconds"][step] for r in base if r["seconds"].get(step) is not None]
        t = [r["seconds"][step] for r in tail if r["seconds"].get(step) is not None]
        if not b or not t:
            continue
        mb, mt = median(b), median(t)
        step_ok = mt <= ratio * mb or mt - mb < floor_s
        ok &= step_ok
        per_step[step] = {"cycles_4_9_s": round(mb, 2), "last_6_s": round(mt, 2),
                          "ratio": round(mt / mb, 3) if mb > 0 else None, "ok": step_ok}
    return {"ok": ok, "short": short, "ratio_max": ratio, "steps": per_step}


def check_traffic(records: list[dict], ratio: float = 1.25) -> dict:
    if len(records) < 5:
        return {"ok": False, "short": True, "reason": f"{len(records)} cycles: need at least 5"}
    b = [r["records"] for r in _cycles(records, 4, 9) if r.get("records") is not None]
    t = [r["records"] for r in records[-6:] if r.get("records") is not None]
    if not b or not t:
        return {"ok": False, "reason": "no cycle recorded its range's records"}
    mb, mt = median(b), median(t)
    r = mt / mb if mb else None
    return {"ok": r is not None and 1 / ratio <= r <= ratio, "short": len(records) < 15, "ratio_max": ratio,
            "cycles_4_9_records": mb, "last_6_records": mt, "ratio": round(r, 3) if r is not None else None}


def check_memory(records: list[dict], ratio: float = 1.3) -> dict:
    if len(records) < 4:
        return {"ok": False, "short": True, "reason": f"{len(records)} cycles: need at least 4"}
    at4, end = records[3]["rss"], records[-1]["rss"]
    per, ok = {}, True
    for name in sorted(at4):
        if name not in end:
            per[name] = {"ok": False, "reason": "not running at the end"}
            ok = False
            continue
        a = at4[name]["self"] + at4[name].get("children", 0)
        e = end[name]["self"] + end[name].get("children", 0)
        per[name] = {"after_cycle_4_mib": round(a / 2**20, 1), "end_mib": round(e / 2**20, 1),
                     "ratio": round(e / a, 3) if a else None, "ok": e <= ratio * a}
        ok &= per[name]["ok"]
    return {"ok": ok, "ratio_max": ratio, "processes": per}


def check_disk(records: list[dict], keep: int, ratio: float = 1.1, window: int = 6) -> dict:
    """The window fills at cycle K + 2: v0 and K + 1 promoted versions exist (the champion and its K rollbacks),
    and from then on every cycle must delete as much as it adds. A version's size is a large share of the total at
    this size, and the count held moves by one with the gate's decision (a kept candidate stays loaded in a serving
    engine until the next gate replaces it), so the level is the largest of the `window` cycles from the fill on,
    and every later cycle must stay within `ratio` of it."""
    fill = keep + 2
    if len(records) <= fill:
        return {"ok": False, "short": True, "reason": f"{len(records)} cycles: the window fills at cycle {fill}"}
    first = records[fill - 1:fill - 1 + window]
    later = records[fill - 1 + window:]
    out, ok = {"fills_at_cycle": fill, "short": not later}, True
    for part in ("registry_artifacts", "caches"):
        level = max(r["state"][part]["bytes"] for r in first)
        top = max((r["state"][part]["bytes"] for r in later), default=level)
        part_ok = top <= ratio * max(level, 1)
        out[part] = {"level_after_fill": level, "max_later": top, "ok": part_ok}
        ok &= part_ok
    worst = max(len(set(r["with_artifacts"]) - set(r["aliased"])) for r in records)
    out["versions"] = {"max_unaliased_with_artifacts": worst, "keep": keep, "ok": worst <= keep}
    ok &= worst <= keep
    return {"ok": ok, "ratio_max": ratio, **out}


def check_archive(records: list[dict]) -> dict:
    if len(records) < 5:
        return {"ok": False, "short": True, "reason": f"{len(records)} cycles: need at least 5"}
    a, e = records[3]["state"]["archive"], records[-1]["state"]["archive"]
    files = e["files"] / max(a["files"], 1)
    size = e["bytes"] / max(a["bytes"], 1)
    return {"ok": files <= size * 1.05, "files_growth": round(files, 3), "bytes_growth": round(size, 3),
            "files_end": e["files"], "bytes_end": e["bytes"]}


def check_done(records: list[dict], cycles: int) -> dict:
    undone = [r["cycle"] for r in records if r["status"] != "done"]
    return {"ok": len(records) == cycles and not undone, "cycles": len(records), "not_done": undone}


def verdict(records: list[dict], cycles: int, keep: int) -> dict:
    checks = {"time": check_time(records), "traffic": check_traffic(records), "memory": check_memory(records),
              "disk": check_disk(records, keep), "archive": check_archive(records), "done": check_done(records, cycles)}
    return {"ok": all(c["ok"] for c in checks.values()), **checks}
