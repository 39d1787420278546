"""Write a demo-like state dir for the dashboard's tests: what `rtrl demo` leaves behind, without running it.

Several cycles of two arms (control frozen at v1, treatment a new checkpoint each cycle): the reward table
partitions (pipelines/metrics/demo.py rows), the A/B results computed and stored by the real
`compute_cycle_metrics` / `MetricsStore`, reward-cycle manifests (counters, dead letters by reason, offset ranges),
archiver manifests (for the consumer lag), data-quality reports (pipelines/quality's `SuiteResult`s through its
own JSON writer), gate reports in the gate report's JSON shape, and, with `registry=True`, a local MLflow
registry whose versions carry the lineage, gate and promotion tags the real components write (their checkpoint
folders hold only a config.json: nothing loads them).
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

from pipelines.metrics.config import AbConfig
from pipelines.metrics.cycle import compute_cycle_metrics, scan_cycle
from pipelines.metrics.demo import CYCLE_HOURS, T0, DemoSpec, Effects, demo_rows, write_demo_table
from pipelines.metrics.store import MetricsStore

TOPICS = ("telemetry.trajectory", "telemetry.edit", "telemetry.snapshot", "telemetry.followup")


def _json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, default=str), encoding="utf-8")


def _reward_manifest(state: Path, cycle_id: str, seq: int, rows: int, prev: str | None, stop: dict) -> None:
    as_of = T0 + timedelta(hours=CYCLE_HOURS * seq)
    _json(state / "rewards" / "cycles" / f"{cycle_id}.json", {
        "cycle_id": cycle_id, "seq": seq, "status": "done", "previous": prev,
        "range": {"start": {}, "stop": stop, "newest": {}, "records": rows * 6, "cluster_id": "demo-cluster"},
        "after": (as_of - timedelta(hours=CYCLE_HOURS)).isoformat(), "as_of": as_of.isoformat(),
        "spec_version": "demo", "partitions": [[f"policy_version=x/window={cycle_id}/part-0.parquet", rows]],
        "counters": {"events_read": rows * 6, "duplicates_dropped": 11 * seq, "rows_emitted": rows,
                     "requests_pending": rows // 20, "unknown_labels": rows // 25, "late_requests": seq,
                     "late_events": 3 * seq, "dead_letter_invalid_json": 2 + seq,
                     "dead_letter_schema_violation": 5 * seq, "dead_letter_unknown_event_type": 1}})


def _archive_manifests(archive: Path, stop: dict, lag: int) -> None:
    d = archive / "_manifests" / "demo-cluster"
    d.mkdir(parents=True, exist_ok=True)
    for key, end in stop.items():
        topic, part = key.rsplit("/", 1)
        (d / f"{topic}-{part}-0-{end + lag - 1}.json").write_text("{}", encoding="utf-8")


def _quality_report(state: Path, cycle_id: str, ok: bool, rows: int) -> None:
    from pipelines.quality.report import to_json
    from pipelines.quality.result import RuleResult, SuiteResult

    rules = [RuleResult("request_id unique", "expect_column_values_to_be_unique", "request_id", True,
                        element_count=rows, unexpected_count=0, observed="0 duplicates"),
             RuleResult("reward = clipped sum of components", "expect_column_pair_values_to_be_equal", "reward", ok,
                        element_count=rows, unexpected_count=0 if ok else 17,
                        observed="all rows" if ok else "17 rows differ")]
    suite = SuiteResult("rewards", ok, rules, rows, 0.12)
    p = state / "quality" / cycle_id / "report.json"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(to_json([suite], {"rewards": str(state / "rewards" / "table"), "window": cycle_id}),
                 encoding="utf-8")


def _gate_report(state: Path, candidate: str, champion: str, promote: bool, k: int) -> None:
    diff = 0.02 if promote else -0.08
    _json(state / "gate" / f"v{candidate}-vs-v{champion}-20261101T{k:02d}0000Z" / "report.json", {
        "candidate_version": candidate, "champion_version": champion, "tasks": 60, "samples_per_task": 4,
        "decision": "promote" if promote else "keep_champion",
        "reasons": [] if promote else ["primary_inferior"],
        "counts": {"keys": 240, "valid_pairs": 236, "tasks": 60, "dropped_infra": 4, "unpaired": 0,
                   "dropped_rate": 4 / 240},
        "primary": {"metric": "resolved_rate", "candidate_rate": 0.61 + diff, "champion_rate": 0.61,
                    "difference": diff, "lower": diff - 0.04, "upper": diff + 0.04, "interval_level": 0.9,
                    "confidence": 0.95, "margin": 0.05, "verdict": "non_inferior" if promote else "inferior"},
        "guardrails": [], "categories": [], "regressions": [], "design": None,
        "candidate_versions": [candidate], "champion_versions": [champion], "config": {}})


def _registry(cfg, cycles: list[str], promoted: dict[str, bool], tmp: Path) -> None:
    from registry.client import Registry

    reg = Registry.from_config(cfg)
    folder = tmp / "ckpt"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text('{"model_type": "demo"}', encoding="utf-8")
    v1 = reg.register(folder, tags={"kind": "bootstrap", "parent": ""}, run_name="demo-v1")
    reg.set_alias("control", v1)
    champion = v1
    for cycle in cycles:
        v = reg.register(folder, tags={"candidate": "true", "parent": champion, "cycle": cycle,
                                       "reward_mean": "-0.1", "rows": "4000"}, run_name=f"candidate-{cycle}")
        ok = promoted[cycle]
        reg.set_version_tags(v, {"gate.decision": "promote" if ok else "keep_champion",
                                 "gate.reasons": "" if ok else "primary_inferior",
                                 "gate.champion_version": champion,
                                 "gate.interval": "[-0.0200, +0.0600]" if ok else "[-0.1200, -0.0400]"})
        if ok:
            reg.set_version_tags(v, {"promotion.time": "2026-11-01T00:00:00+00:00",
                                     "promotion.previous_version": champion})
            reg.set_alias("previous", champion)
            champion = v
    reg.set_alias("champion", champion)
    adapter = tmp / "adapter"
    adapter.mkdir(parents=True, exist_ok=True)
    (adapter / "adapter_config.json").write_text('{"r": 8}', encoding="utf-8")
    for org, passed in (("o0", True), ("o1", False)):   # an org's adapter over the champion; o1's fails its own suite
        oreg = reg.for_org(org)
        v = oreg.register(adapter, tags={"candidate": "true", "adapter": "true", "org": org, "lora_base": champion,
                                         "parent": champion, "cycle": cycles[-1], "rows": "180"},
                          run_name=f"candidate-{cycles[-1]}-{org}")
        oreg.set_version_tags(v, {"gate.decision": "promote" if passed else "keep_champion",
                                  "gate.interval": "[-0.0100, +0.0400]",
                                  "gate.org_suite.decision": "promote" if passed else "keep_champion",
                                  "gate.org_suite.interval": "[+0.0200, +0.1500]" if passed else "[-0.1100, -0.0300]",
                                  "gate.reasons": "" if passed else f"org {org}'s own suite: primary_inferior"})
        if passed:
            oreg.set_alias("champion", v)


def write_demo_state(state: str | Path, cycles: int = 6, rows_per_cycle: int = 20_000, users: int = 800,
                     registry_cfg=None, hacking: bool = False, seed: int = 0) -> dict:
    """Populate `state` (a fresh state dir); returns what was written. `hacking` makes the treatment ask far
    more questions and edit less in the later cycles (a red reward-hacking monitor). `registry_cfg`: an
    RtrlConfig whose MLflow store gets the demo lineage (None: no registry)."""
    state = Path(state)
    table = state / "rewards" / "table"
    store = MetricsStore.for_state_dir(state)
    cfg = AbConfig()
    ids = [f"c{k + 1}" for k in range(cycles)]
    promoted = {c: k % 3 != 2 for k, c in enumerate(ids)}    # every third candidate fails its gate
    champion = "1"                                               # v1 is also control: cycle 1 is an A/A cycle
    for k, cycle_id in enumerate(ids):
        late = hacking and k >= cycles // 2
        effects = Effects(clarification=0.6 if late else 0.0, tokens=0.25 if late else 0.0) \
            if champion != "1" else Effects(persistence=0.0, dissatisfied=0.0, latency=0.0)
        rows = demo_rows(rows_per_cycle, cycle=k, seed=seed, spec=DemoSpec(users=users, effects=effects),
                         treatment_version=champion)
        write_demo_table(table, cycle_id, rows)
        stop = {f"{t}/0": rows_per_cycle * (k + 1) * (i + 1) for i, t in enumerate(TOPICS)}
        _reward_manifest(state, cycle_id, k + 1, rows_per_cycle, ids[k - 1] if k else None, stop)
        as_of = T0 + timedelta(hours=CYCLE_HOURS * (k + 1))
        res = compute_cycle_metrics(scan_cycle(table, cycle_id), cycle_id, as_of=as_of, config=cfg, store=store)
        store.write(cycle_id, res)
        _quality_report(state, cycle_id, ok=k != 1, rows=rows_per_cycle)
        candidate = str(k + 2)                                   # the registry numbers versions in this order
        _gate_report(state, candidate, champion, promoted[cycle_id], k)
        if promoted[cycle_id]:
            champion = candidate
        if k == cycles - 1:
            _archive_manifests(state / "archive", stop, lag=137)
    if registry_cfg is not None:
        _registry(registry_cfg, ids, promoted, state / "tmp-demo")
    return {"cycles": ids, "table": str(table), "ab": str(store.root)}
