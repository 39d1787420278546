"""The cycle's Prometheus metrics, read from the ledger (infra/orchestrator/ledger.py) at each scrape.

    registry = CollectorRegistry(); registry.register(CycleCollector(Ledger.for_config(cfg)))

The latest cycle, and up to `walk_back` cycles before it (one pointer and a few records per scrape, whatever the
ledger's length):

    rtrl_cycle_info{cycle, status}                 1 for the latest cycle
    rtrl_cycle_started_timestamp_seconds           when the latest cycle started (wall clock, epoch seconds)
    rtrl_cycle_last_done_timestamp_seconds         when the newest done cycle finished (0: none in the window)
    rtrl_cycle_step_seconds{step}                  the latest cycle's steps that finished
    rtrl_cycle_step_state{step, state}             1 per step of the latest cycle: done | running | failed | pending
    rtrl_cycle_failures_in_a_row                   the latest cycle's failures since its last finished step
    rtrl_cycle_reward_rows, rtrl_cycle_reward_late_events, rtrl_cycle_reward_duplicates_dropped
                                                   the newest done cycle's reward job (distill step)
    rtrl_gate_decision_info{decision}              1 for the newest gate decision in the window
    rtrl_gate_keeps_in_a_row                       gate decisions keep_champion since the last promote (in the window)
    rtrl_ab_rate{arm, metric}                      the newest measure step's rates: edit_persistence,
                                                   dissatisfied_followup
    rtrl_ab_srm_flagged                            1 when that step's sample-ratio check flagged the split
    rtrl_ab_aa_cycle, rtrl_ab_aa_failed            1 when both arms served the same versions; 1 when such a cycle's
                                                   headline difference excluded zero
    rtrl_ab_monitor_rate{arm, metric}              the reward-hacking monitors per arm: edit_rate,
                                                   clarification_rate, broken_tool_call_rate, tokens_per_response
    rtrl_ab_monitor_change{metric}                 treatment against control (relative or absolute, as configured)
    rtrl_ab_monitor_red{metric}                    1 when the monitor is past its `[ab.monitors]` threshold
    rtrl_champion_info{arm, version}               1 per arm following the champion alias: the version the newest
                                                   done deploy put on it

With a configuration (`for_config`), also:

    rtrl_cycle_cadence_seconds                     orchestrator.interval_s
    rtrl_reward_as_of_timestamp_seconds            the event time the newest done cycle's rewards reach (its as_of)
    rtrl_disk_free_bytes, rtrl_disk_size_bytes     the state dir's file system
    rtrl_registry_cache_bytes                      the checkpoint cache after the newest retention run
    rtrl_registry_cache_max_bytes                  retention.cache_max_bytes
"""

from __future__ import annotations

import shutil
from datetime import datetime

from prometheus_client.core import GaugeMetricFamily

from infra.orchestrator.ledger import DONE, FAILED, RUNNING
from schemas.prometheus import gauge, gauge_by

STEPS = ("collect", "distill", "validate", "measure", "train", "evaluate", "promote", "specialize", "deploy")
WALK_BACK = 10
AB_RATES = ("edit_persistence", "dissatisfied_followup")


def recent_cycles(ledger, walk_back: int = WALK_BACK) -> list:
    """The latest cycle and up to `walk_back` before it (by sequence number: ids c<seq>), newest first."""
    latest = ledger.latest()
    if latest is None:
        return []
    out = [latest]
    for seq in range(latest.seq - 1, max(0, latest.seq - 1 - walk_back), -1):
        rec = ledger.load(f"c{seq}")
        if rec is not None:
            out.append(rec)
    return out


def step_state(rec, step: str) -> str:
    s = rec.steps.get(step, {}).get("status")
    if s == DONE:
        return "done"
    if (rec.current or {}).get("step") == step and rec.status == RUNNING:
        return "running"
    if s == FAILED or (rec.status == FAILED and rec.failures and rec.failures[-1].get("step") == step):
        return "failed"
    return "pending"


def epoch(iso: str | None) -> float | None:
    if not iso:
        return None
    try:
        return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


class CycleCollector:
    def __init__(self, ledger, walk_back: int = WALK_BACK, cfg=None):
        self.ledger, self.walk_back, self.cfg = ledger, walk_back, cfg

    @classmethod
    def for_config(cls, cfg, walk_back: int = WALK_BACK) -> "CycleCollector":
        from infra.orchestrator.ledger import Ledger

        return cls(Ledger.for_config(cfg), walk_back, cfg)

    def collect(self):
        recent = recent_cycles(self.ledger, self.walk_back)
        done = next((r for r in recent if r.status == DONE), None)
        if self.cfg is not None:
            yield from self._config(recent, done)
        if not recent:
            return
        latest = recent[0]
        yield gauge("rtrl_cycle_info", "1 for the latest cycle, with its status", 1.0,
                    {"cycle": latest.cycle_id, "status": latest.status})
        yield gauge("rtrl_cycle_started_timestamp_seconds", "When the latest cycle started (epoch seconds)",
                     latest.started_wall)
        yield gauge("rtrl_cycle_last_done_timestamp_seconds", "When the newest done cycle finished (epoch "
                     "seconds; 0: none among the recent cycles)",
                     (done.finished_wall or done.started_wall) if done else 0.0)
        seconds = GaugeMetricFamily("rtrl_cycle_step_seconds", "Seconds each finished step of the latest cycle took",
                                    labels=["step"])
        states = GaugeMetricFamily("rtrl_cycle_step_state", "1 per step of the latest cycle, labelled with its "
                                   "state: done, running, failed or pending", labels=["step", "state"])
        for step in STEPS:
            entry = latest.steps.get(step, {})
            if entry.get("status") == DONE and entry.get("seconds") is not None:
                seconds.add_metric([step], float(entry["seconds"]))
            states.add_metric([step, step_state(latest, step)], 1.0)
        yield seconds
        yield states
        yield gauge("rtrl_cycle_failures_in_a_row", "The latest cycle's failures since its last finished step",
                     len(latest.failures))
        if done is not None:
            distill = done.result("distill")
            for key, name, help_ in (("rows", "rtrl_cycle_reward_rows", "Reward rows the newest done cycle emitted"),
                                     ("late_events", "rtrl_cycle_reward_late_events",
                                      "Events the newest done cycle's reward job saw after their window"),
                                     ("duplicates_dropped", "rtrl_cycle_reward_duplicates_dropped",
                                      "Duplicate events the newest done cycle's reward job dropped")):
                yield gauge(name, help_, distill.get(key, 0))
        yield from self._gate(recent)
        yield from self._ab(recent)
        yield from self._deploy(recent)

    def _config(self, recent: list, done):
        cfg = self.cfg
        yield gauge("rtrl_cycle_cadence_seconds", "The cycle's cadence (orchestrator.interval_s)",
                    cfg.orchestrator.interval_s)
        as_of = epoch(done.result("collect").get("as_of")) if done is not None else None
        if as_of is not None:
            yield gauge("rtrl_reward_as_of_timestamp_seconds", "The event time the newest done cycle's rewards "
                        "reach (its as_of, epoch seconds)", as_of)
        try:
            usage = shutil.disk_usage(cfg.state_path)
        except OSError:
            usage = None
        if usage is not None:
            yield gauge("rtrl_disk_free_bytes", "Free bytes on the state dir's file system", usage.free)
            yield gauge("rtrl_disk_size_bytes", "Size of the state dir's file system", usage.total)
        yield gauge("rtrl_registry_cache_max_bytes", "The checkpoint cache's bound (retention.cache_max_bytes)",
                    cfg.retention.cache_max_bytes)
        caches = ((r.result("deploy").get("retention") or {}).get("cache_bytes") for r in recent if r.done("deploy"))
        cache = next((c for c in caches if c is not None), None)
        if cache is not None:
            yield gauge("rtrl_registry_cache_bytes", "The checkpoint cache's bytes after the newest retention run",
                        cache)

    def _deploy(self, recent: list):
        arms = next((r.result("deploy").get("arms") for r in recent if r.done("deploy")
                     and r.result("deploy").get("arms")), None)
        if not arms:
            return
        info = GaugeMetricFamily("rtrl_champion_info", "1 per arm: the version the newest done deploy put on it",
                                 labels=["arm", "version"])
        for arm, version in sorted(arms.items()):
            info.add_metric([arm, str(version)], 1.0)
        yield info

    def _gate(self, recent: list):
        decisions = [r.result("evaluate").get("decision") for r in recent if r.done("evaluate")]
        decisions = [d for d in decisions if d]
        if not decisions:
            return
        yield gauge("rtrl_gate_decision_info", "1 for the newest gate decision", 1.0, {"decision": decisions[0]})
        keeps = 0
        for d in decisions:
            if d != "keep_champion":
                break
            keeps += 1
        yield gauge("rtrl_gate_keeps_in_a_row", "Gate decisions keep_champion since the last promote (among the "
                     "recent cycles)", keeps)

    def _ab(self, recent: list):
        measured = next((r.result("measure") for r in recent if r.done("measure")
                         and r.result("measure").get("measured")), None)
        if measured is None:
            return
        rates = GaugeMetricFamily("rtrl_ab_rate", "The newest measure step's rates per arm", labels=["arm", "metric"])
        for metric in AB_RATES:
            for arm, v in sorted((measured.get(f"{metric}_rate") or {}).items()):
                if v is not None:
                    rates.add_metric([arm, metric], float(v))
        yield rates
        yield gauge("rtrl_ab_srm_flagged", "1 when the newest measure step's sample-ratio check flagged the split",
                     1.0 if measured.get("srm_flagged") else 0.0)
        yield gauge("rtrl_ab_aa_cycle", "1 when both arms served the same versions in the newest measured cycle",
                    1.0 if measured.get("aa") else 0.0)
        yield gauge("rtrl_ab_aa_failed", "1 when the newest measured cycle was A/A and its headline difference "
                    "excluded zero", 1.0 if measured.get("aa_failed") else 0.0)
        monitors = measured.get("monitors") or []
        if not monitors:
            return
        rate = GaugeMetricFamily("rtrl_ab_monitor_rate", "The newest measure step's reward-hacking monitors per arm",
                                 labels=["arm", "metric"])
        for m in monitors:
            for arm in ("control", "treatment"):
                if m.get(arm) is not None:
                    rate.add_metric([arm, m["metric"]], float(m[arm]))
        yield rate
        yield gauge_by("rtrl_ab_monitor_change", "Each monitor's treatment against control (relative or absolute, as "
                       "[ab.monitors] says)", "metric", {m["metric"]: m["change"] for m in monitors
                                                        if m.get("change") is not None})
        yield gauge_by("rtrl_ab_monitor_red", "1 when the monitor is red: past its [ab.monitors] threshold "
                       "against control, and significantly", "metric", {m["metric"]: 1.0 if m.get("status") == "red" else 0.0
                                             for m in monitors})
