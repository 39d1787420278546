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
"""

from __future__ import annotations

from prometheus_client.core import GaugeMetricFamily

from infra.orchestrator.ledger import DONE, FAILED, RUNNING
from schemas.prometheus import gauge

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


class CycleCollector:
    def __init__(self, ledger, walk_back: int = WALK_BACK):
        self.ledger, self.walk_back = ledger, walk_back

    def collect(self):
        recent = recent_cycles(self.ledger, self.walk_back)
        if not recent:
            return
        latest = recent[0]
        yield gauge("rtrl_cycle_info", "1 for the latest cycle, with its status", 1.0,
                    {"cycle": latest.cycle_id, "status": latest.status})
        yield gauge("rtrl_cycle_started_timestamp_seconds", "When the latest cycle started (epoch seconds)",
                     latest.started_wall)
        done = next((r for r in recent if r.status == DONE), None)
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
