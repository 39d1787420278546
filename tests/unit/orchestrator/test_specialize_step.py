"""The cycle's specialize step (infra/orchestrator/steps.py) over a real registry and stand-ins for the training and
the gate it calls (`train_cycle`, `gate_version`): per org, train, gate and the compare-and-swap of champion@org; an
org with too few rows is skipped; a resumed cycle reuses the gate result; off by default."""

from __future__ import annotations

import pytest

from infra.orchestrator import steps
from infra.orchestrator.ledger import CycleRecord
from trainer.selection import SelectionError
from registry.client import Registry
from tests.conftest import make_config

pytestmark = pytest.mark.slow   # an MLflow store


class Commands:
    """Training an org registers an adapter version in the org's lineage; gating `V@ORG` tags it."""

    def __init__(self, registry: Registry, tmp_path, decisions: dict[str, str], too_few: set[str]):
        self.registry, self.tmp, self.decisions, self.too_few = registry, tmp_path, decisions, too_few
        self.calls: list[tuple] = []
        self.trained: dict[str, str] = {}

    def train(self, cfg, cycle_id, *, window=None, as_of=None, org=None, log=None, **_):
        self.calls.append(("train", org))
        if org in self.too_few:
            raise SelectionError("only 3 usable reward row(s)")
        if org not in self.trained:     # a cycle's candidate is registered once (training finds it again)
            d = self.tmp / f"adapter-{org}"
            d.mkdir()
            (d / "adapter_config.json").write_text("{}")
            self.trained[org] = self.registry.for_org(org).register(
                d, tags={"lora_base": self.registry.version_of("champion")})
        return {"candidate": self.trained[org], "parent": self.registry.version_of("champion"), "counts": {}}

    def gate(self, cfg, label, champion=None, *, log=None, **_):
        self.calls.append(("gate", label))
        org = label.partition("@")[2]
        decision = self.decisions[org]
        self.registry.set_version_tags(label, {"gate.decision": decision, "gate.org_suite.decision": decision,
                                               "gate.champion_version": self.registry.version_of("champion"),
                                               "gate.suites": ",".join(cfg.gate.suites)})
        return {"decision": decision, "interval": "[+0.01, +0.04]"}

    def install(self, monkeypatch):
        import infra.commands.gate
        import infra.commands.train

        monkeypatch.setattr(infra.commands.train, "train_cycle", self.train)
        monkeypatch.setattr(infra.commands.gate, "gate_version", self.gate)
        return self


def _ctx(tmp_path, **specialize):
    cfg = make_config(tmp_path / "state", *(f"specialize.{k}={v}" for k, v in specialize.items()))
    rec = CycleRecord("c1", 1, "2026-11-01T00:00:00+00:00", 0.0)
    rec.steps["collect"] = {"status": "done", "result": {"champion": "1"}}
    return steps.CycleContext(cfg, rec, log=lambda m: None)


def test_each_org_gets_its_adapter_trained_gated_and_promoted_and_a_small_org_waits(tmp_path, monkeypatch):
    reg = Registry.from_config(make_config(tmp_path / "state"))
    d = tmp_path / "v1"
    d.mkdir()
    (d / "config.json").write_text("{}")
    reg.set_alias("champion", reg.register(d))
    commands = Commands(reg, tmp_path, {"o0": "promote", "o1": "keep_champion"}, too_few={"o2"}).install(monkeypatch)
    ctx = _ctx(tmp_path, enabled="true", orgs='["o0", "o1", "o2"]')
    out = steps.specialize(ctx).record()
    assert out["orgs"]["o0"] == out["orgs"]["o0"] | {"trained": True, "candidate": "1@o0", "gate": "promote",
                                                      "promoted": True, "champion": "1@o0"}
    assert out["orgs"]["o1"]["promoted"] is False and out["orgs"]["o1"]["champion"] is None
    assert out["orgs"]["o2"]["trained"] is False and "usable reward row" in out["orgs"]["o2"]["reason"]
    assert reg.version_of("champion@o0") == "1@o0" and reg.version_of("champion@o1") is None
    # the step again (a resumed cycle): the gate result is read back, not run again
    gates = sum(1 for c in commands.calls if c[0] == "gate")
    steps.specialize(ctx)
    assert sum(1 for c in commands.calls if c[0] == "gate") == gates
    assert "o0: 1@o0 promote promoted" in steps._brief("specialize", out)


def test_the_step_is_off_by_default(tmp_path):
    assert steps.specialize(_ctx(tmp_path)).record() == {"enabled": False, "orgs": {}}
