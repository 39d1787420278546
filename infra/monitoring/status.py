"""`rtrl status`: the health of the whole deployment from the same metrics Prometheus scrapes and the registry.

    gather(cfg) -> dict       what `rtrl status --json` prints
    render(status) -> str     the same for a person

Every process's /metrics is read once (monitoring.status_timeout_s each); a process that does not answer is down.
The cycle's metrics come from the exporter (`rtrl metrics`) when it runs, else from the same collector in this
process (they read the ledger either way). Champion and control per arm come from the registry's aliases and from
what serving reports it serves. Firing alerts come from the Prometheus at monitoring.prometheus_url, if set."""

from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path

from infra.monitoring.targets import targets

ARM_METRICS = ("edit_persistence", "dissatisfied_followup")


def scrape(url: str, timeout_s: float, ca_file: str = "") -> dict:
    """{(name, labels): value} of one /metrics; raises OSError (or httpx.HTTPError) when it does not answer."""
    import httpx

    from schemas.prometheus import parse_samples

    verify = ca_file if ca_file else True
    r = httpx.get(url, timeout=timeout_s, verify=verify)
    r.raise_for_status()
    return parse_samples(r.text)


def _values(samples: dict, name: str) -> list[tuple[dict, float]]:
    return [(dict(labels), v) for (n, labels), v in samples.items() if n == name]


def _one(samples: dict, name: str) -> float | None:
    vals = _values(samples, name)
    return vals[0][1] if vals else None


def cycle_samples(cfg, scraped: dict) -> tuple[dict, str]:
    """The cycle's metrics: the exporter's scrape, else the same collector here. (samples, where from)."""
    if "rtrl-cycle" in scraped:
        return scraped["rtrl-cycle"], "exporter"
    from prometheus_client import generate_latest

    from infra.monitoring.exporter import registry_for
    from schemas.prometheus import parse_samples

    return parse_samples(generate_latest(registry_for(cfg)).decode()), "ledger"


def _cycle(s: dict, now: float) -> dict | None:
    info = _values(s, "rtrl_cycle_info")
    if not info:
        return None
    labels = info[0][0]
    started = _one(s, "rtrl_cycle_started_timestamp_seconds")
    done = _one(s, "rtrl_cycle_last_done_timestamp_seconds") or None
    steps: dict[str, dict] = defaultdict(dict)
    for lab, _ in _values(s, "rtrl_cycle_step_state"):
        steps[lab["step"]]["state"] = lab["state"]
    for lab, v in _values(s, "rtrl_cycle_step_seconds"):
        steps[lab["step"]]["seconds"] = round(v, 2)
    decision = _values(s, "rtrl_gate_decision_info")
    return {"cycle": labels["cycle"], "status": labels["status"], "started": started,
            "last_done": done, "since_last_done_s": round(now - done, 1) if done else None,
            "cadence_s": _one(s, "rtrl_cycle_cadence_seconds"), "steps": dict(steps),
            "failures_in_a_row": int(_one(s, "rtrl_cycle_failures_in_a_row") or 0),
            "reward_rows": _one(s, "rtrl_cycle_reward_rows"),
            "gate": {"decision": decision[0][0]["decision"] if decision else None,
                     "keeps_in_a_row": _one(s, "rtrl_gate_keeps_in_a_row")}}


def _ab(s: dict) -> dict:
    rates: dict[str, dict] = defaultdict(dict)
    for lab, v in _values(s, "rtrl_ab_rate"):
        rates[lab["metric"]][lab["arm"]] = v
    monitors: dict[str, dict] = defaultdict(dict)
    for lab, v in _values(s, "rtrl_ab_monitor_rate"):
        monitors[lab["metric"]][lab["arm"]] = v
    for lab, v in _values(s, "rtrl_ab_monitor_change"):
        monitors[lab["metric"]]["change"] = v
    for lab, v in _values(s, "rtrl_ab_monitor_red"):
        monitors[lab["metric"]]["red"] = bool(v)
    return {"rates": dict(rates), "monitors": dict(monitors),
            "srm_flagged": bool(_one(s, "rtrl_ab_srm_flagged")), "aa_failed": bool(_one(s, "rtrl_ab_aa_failed"))}


def _arms(cfg, serving: dict | None) -> dict:
    """Per arm: its alias, the version the alias names in the registry, and the version serving says it serves."""
    served = {lab["arm"]: lab.get("version") for lab, _ in _values(serving or {}, "rtrl_serving_arm_info")}
    out, registry_error = {}, None
    uri = cfg.mlflow_tracking_uri()
    if uri.startswith("sqlite:///") and not Path(uri[len("sqlite:///"):]).exists():
        return {"arms": {a.name: {"alias": a.alias, "registry_version": None, "serving_version": served.get(a.name)}
                         for a in cfg.serving.arms}, "registry_error": f"no registry yet ({uri}): `rtrl bootstrap`"}
    try:
        from registry.client import Registry

        registry = Registry.from_config(cfg)
        aliases = {a.alias: registry.version_of(a.alias) for a in cfg.serving.arms}
    except Exception as e:  # noqa: BLE001 -- the registry down is part of the status, not a crash
        aliases, registry_error = {}, f"{type(e).__name__}: {e}"[:300]
    for arm in cfg.serving.arms:
        out[arm.name] = {"alias": arm.alias, "registry_version": aliases.get(arm.alias),
                         "serving_version": served.get(arm.name)}
    return {"arms": out, "registry_error": registry_error}


def _lag(archiver: dict | None, cycle: dict, now: float) -> dict:
    out: dict = {}
    if archiver:
        out["consumer_lag_records"] = {lab["topic"]: int(v) for lab, v in
                                       _values(archiver, "rtrl_archive_consumer_lag_records")}
        last = _one(archiver, "rtrl_archive_last_commit_timestamp_seconds")
        out["archive_last_commit_age_s"] = round(now - last, 1) if last else None
    as_of = _one(cycle, "rtrl_reward_as_of_timestamp_seconds")
    out["reward_lag_s"] = round(now - as_of, 1) if as_of else None
    return out


def alerts(url: str, timeout_s: float) -> dict:
    """The firing alerts of the Prometheus at `url`: {"source", "firing": [...], "error"}."""
    if not url:
        return {"source": None, "firing": [], "error": "no Prometheus configured (monitoring.prometheus_url)"}
    import httpx

    try:
        r = httpx.get(url.rstrip("/") + "/api/v1/alerts", timeout=timeout_s)
        r.raise_for_status()
        found = r.json()["data"]["alerts"]
    except (httpx.HTTPError, KeyError, ValueError) as e:
        return {"source": url, "firing": [], "error": f"{type(e).__name__}: {e}"[:300]}
    firing = [{"alert": a["labels"].get("alertname"), "severity": a["labels"].get("severity"),
               "summary": (a.get("annotations") or {}).get("summary", ""), "since": a.get("activeAt")}
              for a in found if a.get("state") == "firing"]
    return {"source": url, "firing": sorted(firing, key=lambda a: a["alert"] or ""), "error": None}


def gather(cfg, stack_status: dict | None = None) -> dict:
    from infra.stack.process import ManagedProcess

    now = time.time()
    timeout = cfg.monitoring.status_timeout_s
    processes, scraped = {}, {}
    for t in targets(cfg):
        running = ManagedProcess(t.process, cfg.state_path).is_running()
        entry = {"job": t.job, "url": t.url, "running": running, "metrics": "down", "error": None}
        try:
            scraped[t.job] = scrape(t.url, timeout, t.ca_file)
            entry["metrics"] = "up"
        except Exception as e:  # noqa: BLE001 -- refused, timed out, bad TLS: the process is down for its scraper
            entry["error"] = f"{type(e).__name__}: {e}"[:200]
        processes[t.process] = entry
    cycle, source = cycle_samples(cfg, scraped)
    out = {"time": now, "processes": processes, **_arms(cfg, scraped.get("rtrl-serving")),
           "cycle": _cycle(cycle, now), "cycle_metrics_from": source, "ab": _ab(cycle),
           "lag": _lag(scraped.get("rtrl-archiver"), cycle, now),
           "alerts": alerts(cfg.monitoring.prometheus_url, timeout)}
    if stack_status is not None:
        out["stack"] = stack_status
    return out


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def render(st: dict) -> str:
    lines = ["processes:"]
    stack = (st.get("stack") or {}).get("services", {})
    for name, info in stack.items():
        if name not in st["processes"] and info.get("running"):
            lines.append(f"  {name:<12} up (pid {info['pid']})")
    for name, p in st["processes"].items():
        state = "up" if p["metrics"] == "up" else ("running, /metrics not answering" if p["running"] else "down")
        lines.append(f"  {name:<12} {state:<10} {p['url']}" + (f"  ({p['error']})" if p["error"] and
                                                                     p["running"] else ""))
    lines.append("arms:")
    for arm, a in st["arms"].items():
        served = a["serving_version"] or "—"
        lines.append(f"  {arm:<12} alias {a['alias']} -> v{a['registry_version'] or '—'}; serving v{served}")
    if st.get("registry_error"):
        lines.append(f"  registry: {st['registry_error']}")
    c = st["cycle"]
    if c is None:
        lines.append("cycle: none yet")
    else:
        lines.append(f"cycle: {c['cycle']} {c['status']}; last done {_age(c['since_last_done_s'])} ago "
                     f"(cadence {_age(c['cadence_s'])}); failures in a row {c['failures_in_a_row']}; gate "
                     f"{c['gate']['decision'] or '—'} (keeps in a row {c['gate']['keeps_in_a_row'] or 0:.0f})")
        lines.append("  steps: " + ", ".join(
            f"{k} {v.get('state', '?')}" + (f" {v['seconds']:.1f}s" if "seconds" in v else "")
            for k, v in c["steps"].items()))
    lag = st["lag"]
    lines.append("lag: consumer " + (", ".join(f"{t} {n}" for t, n in lag.get("consumer_lag_records", {}).items())
                                     or "—") + f"; archive commit {_age(lag.get('archive_last_commit_age_s'))} "
                 f"ago; rewards reach {_age(lag.get('reward_lag_s'))} ago")
    ab = st["ab"]
    if ab["monitors"]:
        lines.append("monitors (treatment vs control):")
        for m, v in sorted(ab["monitors"].items()):
            lines.append(f"  {m:<24} control {v.get('control', float('nan')):.4g}  treatment "
                         f"{v.get('treatment', float('nan')):.4g}  {'RED' if v.get('red') else 'ok'}")
    flags = [n for n, on in (("SRM", ab["srm_flagged"]), ("A/A failed", ab["aa_failed"])) if on]
    if flags:
        lines.append("A/B checks: " + ", ".join(flags))
    al = st["alerts"]
    if al["error"]:
        lines.append(f"alerts: unknown ({al['error']})")
    elif not al["firing"]:
        lines.append(f"alerts: none firing ({al['source']})")
    else:
        lines.append(f"alerts firing ({al['source']}):")
        lines += [f"  {a['alert']} [{a['severity']}] {a['summary']}" for a in al["firing"]]
    return "\n".join(lines)
