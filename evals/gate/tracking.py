"""Record a gate in MLflow: one run in the gate experiment (params, metrics, the report as artifacts) and the
decision as tags on the candidate's model version, which `rtrl promote` reads (registry/promotion.py):

    gate.decision          promote | keep_champion
    gate.reasons           comma-separated reasons ('' when promote)
    gate.run_id            the MLflow run holding the report
    gate.champion_version  the version the candidate was compared against: promotion's compare-and-swap expects
                           alias `champion` to still point there
    gate.interval          two-sided interval of resolved rate, candidate − champion, e.g. "[-0.0312, +0.0417]"
    gate.difference        its point estimate
    gate.time              when the gate was recorded (UTC, ISO 8601)
"""

from __future__ import annotations

import re
import time
from datetime import datetime, timezone
from pathlib import Path

from evals.gate.decision import GateResult

TAG_PREFIX = "gate."


def _key(text: str) -> str:
    """An MLflow-safe metric/param key (letters, digits, _ - . / and space)."""
    return re.sub(r"[^A-Za-z0-9_\-./ ]", "_", text)[:250]


def _metrics(result: GateResult) -> dict[str, float]:
    c = result.counts
    m = {"valid_pairs": c.valid_pairs, "tasks": c.tasks, "dropped_rate": c.dropped_rate,
         "promote": 1.0 if result.promote else 0.0}
    if result.primary is not None:
        p = result.primary
        m |= {"resolved.candidate": p.candidate_rate, "resolved.champion": p.champion_rate,
              "resolved.difference": p.difference, "resolved.lower": p.lower, "resolved.upper": p.upper,
              "resolved.p_noninferior": p.p_noninferior, "resolved.mcnemar_p": p.mcnemar_p}
    for g in result.guardrails:
        for field in ("candidate", "champion", "difference", "lower", "upper", "p_worse"):
            m[f"guardrail.{g.name}.{field}"] = getattr(g, field)
        m[f"guardrail.{g.name}.passed"] = 1.0 if g.passed else 0.0
    for cat in result.categories:
        m[_key(f"category.{cat.category or 'none'}.candidate")] = cat.candidate_rate
        m[_key(f"category.{cat.category or 'none'}.champion")] = cat.champion_rate
    if result.design is not None:
        m["design.power_at_equal"] = result.design.power_at_equal
        m["design.icc"] = result.design.icc
    return {k: float(v) for k, v in m.items() if v is not None and v == v}


def version_tags(result: GateResult, run_id: str, champion_version: str, now: datetime | None = None
                 ) -> dict[str, str]:
    p = result.primary
    return {"gate.decision": result.decision, "gate.reasons": ",".join(result.reasons), "gate.run_id": run_id,
            "gate.champion_version": str(champion_version),
            "gate.interval": "n/a" if p is None else f"[{p.lower:+.4f}, {p.upper:+.4f}]",
            "gate.difference": "n/a" if p is None else f"{p.difference:+.4f}",
            "gate.anchor_version": ",".join(result.anchor_versions),
            "gate.anchor_interval": ("n/a" if result.anchor is None
                                     else f"[{result.anchor.lower:+.4f}, {result.anchor.upper:+.4f}]"),
            "gate.time": (now or datetime.now(timezone.utc)).isoformat(timespec="seconds")}


def log_to_mlflow(result: GateResult, report_dir: str | Path, registry, candidate_version: str,
                  champion_version: str, now: datetime | None = None, experiment: str = "rtrl-gate") -> str:
    """Log the gate run (in `experiment`, gate.experiment) and tag the candidate version; returns the
    run id. `registry` is an `registry.client.Registry` (its tracking store, artifact root and registered model).
    Refuses versions that contradict the episodes' own `policy_version`s: the tag `gate.champion_version` must
    name the checkpoint the candidate was really compared with."""
    for label, given, seen in (("candidate", candidate_version, result.candidate_versions),
                               ("champion", champion_version, result.champion_versions)):
        if seen and seen != [str(given)]:
            raise ValueError(f"{label} version {given!r} does not match the episodes' policy_version {seen}")
    from mlflow.entities import Metric, Param

    client = registry.client
    exp = registry.experiment_id(experiment)
    run = client.create_run(exp, run_name=f"gate v{candidate_version} vs v{champion_version}",
                            tags={"gate.decision": result.decision, "gate.reasons": ",".join(result.reasons),
                                  "candidate_version": str(candidate_version),
                                  "champion_version": str(champion_version)})
    run_id = run.info.run_id
    try:
        params = {"candidate_version": candidate_version, "champion_version": champion_version}
        params |= {k: v for k, v in result.config.items() if not isinstance(v, dict)}
        params |= {f"guardrails.{k}": v for k, v in result.config.get("guardrails", {}).items()}
        stamp = int(time.time() * 1000)
        client.log_batch(run_id, params=[Param(_key(k), str(v)) for k, v in params.items()],
                         metrics=[Metric(k, v, stamp, 0) for k, v in _metrics(result).items()])
        if Path(report_dir).is_dir():
            client.log_artifacts(run_id, str(report_dir), "report")
    except BaseException:
        client.set_terminated(run_id, "FAILED")
        raise
    client.set_terminated(run_id, "FINISHED")
    registry.set_version_tags(candidate_version, version_tags(result, run_id, champion_version, now))
    return run_id
