"""The rtrl dashboard (Streamlit): A/B experiment, trends, reward-hacking monitors, pipeline health, lineage.

Run by `rtrl dashboard` (which sets RTRL_DASHBOARD_CONFIG / RTRL_DASHBOARD_SET to the rtrl config file and its
--set overrides). Reads only the state dir and the MLflow registry (infra/dashboard/data.py), and of the per-cycle
files only the last `dashboard.max_cycles` cycles' (the sidebar's "Load older cycles" reads as many again per
press). A page can be opened directly with ?page=experiment|trends|monitors|health|lineage.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import altair as alt
import pandas as pd
import polars as pl
import streamlit as st

from infra.config import load_config
from infra.dashboard import data
from pipelines.archive.layout import archive_root
from pipelines.metrics.catalog import BY_NAME, METRICS
from pipelines.metrics.report import fmt_change, fmt_value, org_rows, table_rows, version_rows
from pipelines.metrics.store import MetricsStore

PAGES = {"experiment": "Experiment", "trends": "Trends", "monitors": "Reward hacking", "health": "Pipeline health",
         "lineage": "Lineage"}
RED, GREEN, GREY, BLUE = "#d62728", "#2ca02c", "#9e9e9e", "#1f77b4"


@st.cache_resource
def _config(config_path: str, overrides: str):
    return load_config(config_path or None, json.loads(overrides or "[]"))


def config():
    return _config(os.environ.get("RTRL_DASHBOARD_CONFIG", ""), os.environ.get("RTRL_DASHBOARD_SET", "[]"))


CFG = config()
STATE = CFG.state_path
TTL = CFG.dashboard.refresh_s


def window() -> int:
    """How many recent cycles the pages read: dashboard.max_cycles, and as many again per "Load older cycles"."""
    return st.session_state.get("window", CFG.dashboard.max_cycles)


@st.cache_data(ttl=TTL, show_spinner=False)
def ab_history(state: str, last: int) -> pl.DataFrame:
    return MetricsStore.for_state_dir(state).history(last=last)


@st.cache_data(ttl=TTL, show_spinner=False)
def ab_cycles(state: str) -> list[str]:
    return MetricsStore.for_state_dir(state).cycles()


@st.cache_data(ttl=TTL, show_spinner=False)
def ab_result(state: str, cycle: str):
    return MetricsStore.for_state_dir(state).read(cycle)


def _mlflow_ui(cfg) -> str:
    return cfg.dashboard.mlflow_ui_url or f"http://{cfg.mlflow.ui_host}:{cfg.mlflow.ui_port}"


@st.cache_data(ttl=TTL, show_spinner=False)
def lineage(_cfg, key: str) -> data.Lineage:
    return data.registry_lineage(_cfg, _mlflow_ui(_cfg))


@st.cache_data(ttl=TTL, show_spinner=False)
def org_lineages(_cfg, key: str) -> dict[str, data.Lineage]:
    return data.org_lineages(_cfg, _mlflow_ui(_cfg))


def empty_state() -> None:
    st.info("No data yet: run `rtrl demo` (the whole loop, a few cycles), or `rtrl ab compute --cycle ID` after a "
            f"reward cycle. This dashboard reads {STATE}.")
    hint = data.demo_state_hint(STATE)
    if hint:
        st.markdown(f"A demo left its results in `{hint}`: open them with "
                    f"`rtrl --set state_dir={hint} dashboard`.")


def _pdf(frame: pl.DataFrame) -> pd.DataFrame:
    return frame.to_pandas()


# --- Experiment ----------------------------------------------------------------------------------------------------

def _table_style(df: pd.DataFrame, verdicts: list[str]):
    colors = {"better": "background-color: #e6f4ea", "worse": "background-color: #fdecea"}
    return df.style.apply(lambda row: [colors.get(verdicts[row.name], "")] * len(row), axis=1)


def forest_chart(rows: list[dict], scale_label: str, title: str) -> alt.Chart:
    """Point = change, bar = interval, one row per metric; zero line."""
    df = pd.DataFrame(rows)
    base = alt.Chart(df).encode(y=alt.Y("label:N", sort=None, title=None, axis=alt.Axis(labelOverlap=False, labelLimit=240)))
    bars = base.mark_rule(strokeWidth=3).encode(x=alt.X("low:Q", title=scale_label, axis=alt.Axis(format="+%")),
                                                x2="high:Q", color=alt.Color("verdict:N", scale=alt.Scale(
                                                    domain=["better", "worse", "changed", "inconclusive"],
                                                    range=[GREEN, RED, BLUE, GREY]), legend=None))
    points = base.mark_point(filled=True, size=70, color="black").encode(
        x="change:Q", tooltip=["label", alt.Tooltip("change:Q", format="+.2%"),
                               alt.Tooltip("low:Q", format="+.2%"), alt.Tooltip("high:Q", format="+.2%")])
    zero = alt.Chart(pd.DataFrame({"x": [0.0]})).mark_rule(strokeDash=[4, 4], color="#555").encode(x="x:Q")
    return (bars + points + zero).properties(title=title, height=alt.Step(26))


def page_experiment() -> None:
    cycles = ab_cycles(str(STATE))
    st.header("A/B experiment")
    if not cycles:
        empty_state()
        return
    cycle = st.selectbox("Cycle", cycles[::-1][:window()], index=0, key="cycle")
    r = ab_result(str(STATE), cycle)
    c = r.counts
    cols = st.columns(4)
    cols[0].metric("Rows used", f"{c['rows_used']:,}", help=f"of {c['rows']:,} rows of the cycle")
    cols[1].metric("Users (control / treatment)", " / ".join(f"{n:,}" for n in c["users_by_arm"].values()))
    cols[2].metric("Unknown labels (excluded)", " / ".join(
        "n/a" if v is None else f"{v:.1%}" for v in c["unknown_label_share"].values()),
        help="share of edit-persistence labels still unknown (no snapshot yet): excluded from edit persistence")
    cols[3].metric("Treatment checkpoint", ", ".join(f"v{v}" for v in r.versions.get(r.treatment_arm, [])) or "-")
    if r.srm.get("flagged"):
        st.error(f"Sample-ratio mismatch: users {r.srm['observed']} vs expected {r.srm['expected']} "
                 f"(p = {r.srm['p_value']:.2g} < {r.srm['threshold']}). Do not trust this cycle's results.")
    else:
        st.success(f"Sample ratio ok: users {r.srm['observed']} (chi-square p = {r.srm['p_value']:.3g}).")
    st.caption(f"Control `{r.control_arm}` (v{', v'.join(r.versions.get(r.control_arm, []))}) vs treatment "
               f"`{r.treatment_arm}`; as of {r.as_of or 'every row'}; immature rows excluded: "
               f"{c['immature_rows_excluded']:,}; cumulative over {len(r.cumulative_cycles)} cycle(s).")
    rows = table_rows(r)
    st.subheader("Experiment table")
    st.table(_table_style(pd.DataFrame(rows), [m.verdict for m in r.metrics]), hide_index=True)
    st.caption("Change: treatment / control − 1 (mean reward: treatment − control). Interval: this cycle, delta "
               "method with users as the unit (latency: bucket bootstrap). Always-valid: every cycle so far, an "
               "mSPRT confidence sequence, safe to look at after every cycle.")
    rel = [{"label": m.label, "change": m.change, "low": m.low, "high": m.high, "verdict": m.verdict}
           for m in r.metrics if m.scale == "relative" and m.change is not None and m.low is not None]
    if rel:
        st.altair_chart(forest_chart(rel, "relative change (this cycle)", f"Cycle {cycle}: change and interval"),
                        width="stretch")
    cuped = [m for m in r.metrics if m.cuped_change is not None]
    if cuped:
        st.subheader("CUPED (pre-experiment covariate)")
        st.table(pd.DataFrame([{"metric": m.label, "change": fmt_change(m.change, m.scale),
                                "CUPED change": fmt_change(m.cuped_change, m.scale),
                                "variance removed": fmt_value(m.cuped_variance_reduction, "rate")} for m in cuped]),
                 hide_index=True)
    st.subheader("Per checkpoint")
    st.dataframe(pd.DataFrame(version_rows(r)), hide_index=True)
    st.subheader("Per org")
    metric = st.selectbox("Metric", [m for m in ("edit_persistence_rate", "dissatisfied_followup_rate",
                                                   "broken_tool_call_rate", "edit_rate", "clarification_rate",
                                                   "tokens_per_response")],
                          format_func=lambda m: BY_NAME[m].label, key="org_metric")
    orgs = [o for o in r.by_org if o["metric"] == metric and o["change"] is not None and o["low"] is not None]
    if orgs:
        st.altair_chart(forest_chart([{"label": o["org_id"], "change": o["change"], "low": o["low"],
                                       "high": o["high"], "verdict": "inconclusive" if o["low"] <= 0 <= o["high"]
                                       else "changed"} for o in orgs], "relative change",
                                     f"{BY_NAME[metric].label} by org"), width="stretch")
    st.dataframe(pd.DataFrame(org_rows(r, (metric,))), hide_index=True)


# --- Trends --------------------------------------------------------------------------------------------------------

def change_chart(h: pl.DataFrame, title: str, thresholds: list[float] | None = None) -> alt.LayerChart:
    """Per cycle: this cycle's change with its interval (band), the cumulative always-valid interval (dashed)."""
    df = _pdf(h.select("seq", "cycle_id", "change", "low", "high", "cum_change", "seq_low", "seq_high", "scale"))
    fmt = "+%" if (h["scale"] == "relative").all() else "+.3f"
    x = alt.X("seq:O", title="cycle #")
    band = alt.Chart(df).mark_area(opacity=0.25, color=BLUE).encode(x=x, y=alt.Y("low:Q", axis=alt.Axis(
        format=fmt), title="change vs control"), y2="high:Q")
    line = alt.Chart(df).mark_line(point=True, color=BLUE).encode(x=x, y="change:Q",
                                                                  tooltip=["cycle_id", "change", "low", "high"])
    seq = alt.Chart(df).mark_line(strokeDash=[5, 3], color="#ff7f0e").encode(x=x, y="seq_low:Q") + \
        alt.Chart(df).mark_line(strokeDash=[5, 3], color="#ff7f0e").encode(x=x, y="seq_high:Q")
    layers = [band, line, seq, alt.Chart(pd.DataFrame({"y": [0.0]})).mark_rule(color="#555").encode(y="y:Q")]
    for t in thresholds or []:
        layers.append(alt.Chart(pd.DataFrame({"y": [t]})).mark_rule(color=RED, strokeWidth=2).encode(y="y:Q"))
    return alt.layer(*layers).properties(title=title, height=220)


def values_chart(h: pl.DataFrame, unit: str, title: str) -> alt.Chart:
    long = h.select("seq", "cycle_id", "control", "treatment").unpivot(
        index=["seq", "cycle_id"], on=["control", "treatment"], variable_name="arm", value_name="value")
    axis = alt.Axis(format="%") if unit == "rate" else alt.Axis()
    return alt.Chart(_pdf(long)).mark_line(point=True).encode(
        x=alt.X("seq:O", title="cycle #"), y=alt.Y("value:Q", axis=axis, title=unit, scale=alt.Scale(zero=False)),
        color=alt.Color("arm:N", scale=alt.Scale(domain=["control", "treatment"], range=[GREY, BLUE])),
        tooltip=["cycle_id", "arm", "value"]).properties(title=title, height=220)


def page_trends() -> None:
    st.header("Trends per cycle")
    h = ab_history(str(STATE), window())
    if h.is_empty():
        empty_state()
        return
    chosen = st.multiselect("Metrics", [m.name for m in METRICS], default=["edit_persistence_rate",
                            "dissatisfied_followup_rate", "latency_p50"], format_func=lambda m: BY_NAME[m].label,
                            key="trend_metrics")
    st.caption("Blue: this cycle's change and its interval; orange dashed: the always-valid interval of every "
               "cycle so far.")
    for name in chosen:
        info, sub = BY_NAME[name], h.filter(pl.col("metric") == name).sort("seq")
        left, right = st.columns(2)
        left.altair_chart(values_chart(sub, info.unit, f"{info.label}: control and treatment"), width="stretch")
        right.altair_chart(change_chart(sub, f"{info.label}: change"), width="stretch")
    flagged = h.filter(pl.col("srm_flagged")).select("cycle_id").unique()
    if flagged.height:
        st.error(f"Sample-ratio mismatch in cycle(s) {', '.join(flagged['cycle_id'].to_list())}.")


# --- Reward hacking ------------------------------------------------------------------------------------------------

def page_monitors() -> None:
    st.header("Reward-hacking monitors")
    cycles = ab_cycles(str(STATE))
    if not cycles:
        empty_state()
        return
    latest = ab_result(str(STATE), cycles[-1])
    h = ab_history(str(STATE), window())
    st.caption(f"Treatment vs control in cycle {latest.cycle_id}; thresholds from [ab.monitors] in rtrl.toml "
               "(red lines in the charts).")
    for m in latest.monitors:
        info = BY_NAME[m["metric"]]
        rel = m["relative"]
        change = fmt_change(m["change"], "relative") if rel else (
            "n/a" if m["change"] is None else f"{m['change'] * (100 if info.unit == 'rate' else 1):+.2f}"
            f"{' pp' if info.unit == 'rate' else ''}")
        text = (f"**{info.label}**: control {fmt_value(m['control'], info.unit)}, treatment "
                f"{fmt_value(m['treatment'], info.unit)}, change {change}. {m['reason']}.")
        if m["status"] == "red":
            st.error(text)
        elif m["status"] == "ok":
            st.success(text)
        else:
            st.warning(text)
        sub = h.filter(pl.col("metric") == m["metric"]).sort("seq")
        if rel:
            th = [t for t in (m["max_increase"], -m["max_decrease"] if m["max_decrease"] else None) if t is not None]
            left, right = st.columns(2)
            left.altair_chart(values_chart(sub, info.unit, info.label), width="stretch")
            right.altair_chart(change_chart(sub, f"{info.label}: relative change", th), width="stretch")
        else:
            st.altair_chart(values_chart(sub, info.unit, info.label), width="stretch")
    reds = [(r["cycle_id"], r["metric"]) for r in _monitor_history(cycles)]
    if reds:
        st.subheader("Red monitors by cycle")
        st.table(pd.DataFrame(reds, columns=["cycle", "monitor"]), hide_index=True)


def _monitor_history(cycles: list[str]) -> list[dict]:
    out = []
    for c in cycles[-window():]:
        for m in ab_result(str(STATE), c).monitors:
            if m["status"] == "red":
                out.append({"cycle_id": c, "metric": BY_NAME[m["metric"]].label})
    return out


# --- Pipeline health -----------------------------------------------------------------------------------------------

@st.cache_data(ttl=TTL, show_spinner=False)
def reward_cycles(state: str, last: int) -> list[dict]:
    return data.reward_cycles(Path(state), last)


def page_health() -> None:
    st.header("Pipeline health")
    cycles = reward_cycles(str(STATE), window())
    quality = data.quality_runs(STATE)
    if not cycles and not quality:
        empty_state()
        return
    if cycles:
        hf = data.health_frame(cycles)
        last = cycles[-1]
        lag = data.consumer_lag(archive_root(CFG), cycles)
        cols = st.columns(4)
        cols[0].metric("Reward-job lag (records)", "n/a" if lag is None else f"{lag['total']:,}",
                       help="records the archiver has committed that no reward cycle has read yet")
        cols[1].metric("Dead letters (last cycle)", f"{sum(last['dead_letters'].values()):,}")
        cols[2].metric("Duplicates dropped (last cycle)", f"{last['duplicates_dropped']:,}")
        jc = hf["join_completeness"][-1]
        cols[3].metric("Join completeness (last cycle)", "n/a" if jc is None else f"{jc:.1%}",
                       help="emitted rows whose edit-persistence label is not unknown")
        dl = data.dead_letters_frame(cycles)
        if dl.height:
            st.altair_chart(alt.Chart(_pdf(dl)).mark_bar().encode(
                x=alt.X("seq:O", title="cycle #"), y=alt.Y("count:Q", title="dead letters"), color="reason:N",
                tooltip=["cycle_id", "reason", "count"]).properties(title="Dead letters by reason", height=220),
                width="stretch")
        long = hf.select("seq", "cycle_id", "join_completeness", "unknown_label_share", "duplicate_share").unpivot(
            index=["seq", "cycle_id"], variable_name="measure", value_name="share")
        st.altair_chart(alt.Chart(_pdf(long)).mark_line(point=True).encode(
            x=alt.X("seq:O", title="cycle #"), y=alt.Y("share:Q", axis=alt.Axis(format="%")), color="measure:N",
            tooltip=["cycle_id", "measure", alt.Tooltip("share:Q", format=".2%")]).properties(
            title="Join completeness, unknown labels, duplicates", height=220), width="stretch")
        st.subheader("Reward cycles")
        st.dataframe(_pdf(hf.drop("seq")), hide_index=True)
    st.subheader("Data quality")
    if not quality:
        st.info("No data-quality report yet (`rtrl quality`).")
    for q in quality[:20]:
        failed = [f"{s['suite']}: {', '.join(s['failed_rules'])}" for s in q["suites"] if not s["success"]]
        if q["success"]:
            st.success(f"{q['run']}: every suite passed ({', '.join(s['suite'] for s in q['suites'])})")
        else:
            st.error(f"{q['run']}: FAILED, training blocked: {'; '.join(failed)}")


# --- Lineage -------------------------------------------------------------------------------------------------------

def page_lineage() -> None:
    st.header("Checkpoint lineage")
    lin = lineage(CFG, str(STATE))
    gates = data.gate_reports(STATE, window())
    if lin.error:
        st.info(lin.error)
    if lin.versions:
        st.caption("Green: passed its gate (promoted); red: kept the champion; thick border: champion.")
        st.graphviz_chart(data.lineage_dot(lin), width="stretch")
        st.dataframe(pd.DataFrame(lin.versions).drop(columns=["created"]), hide_index=True, column_config={
            "run": st.column_config.LinkColumn("MLflow run", display_text="run"),
            "train_run": st.column_config.LinkColumn("train run", display_text="train"),
            "gate_run": st.column_config.LinkColumn("gate run", display_text="gate")})
        st.caption("Aliases: " + ", ".join(f"{a} → v{v}" for a, v in sorted(lin.aliases.items())))
    orgs = org_lineages(CFG, str(STATE))
    if orgs:
        st.subheader("Specialized lineages (one adapter lineage per org)")
        st.caption("Each org's adapters, the shared version each is over, and both gates: the held-out suite "
                   "(gate) and the org's own suite (org_suite); its champion is what the org's users get on the "
                   "specialized arm.")
        for org, olin in orgs.items():
            champion = olin.aliases.get("champion")
            st.markdown(f"**{org}**: champion " + (f"v{champion}@{org}" if champion else "none yet (the shared "
                                                   "champion serves it)"))
            if olin.versions:
                st.dataframe(pd.DataFrame(olin.versions)[["version", "cycle", "over", "parent", "rows", "gate",
                                                          "gate_interval", "org_suite", "org_suite_interval",
                                                          "gate_reasons", "promoted", "aliases"]],
                             hide_index=True, key=f"org-lineage-{org}")
    st.subheader("Gate decisions")
    if not gates:
        st.info("No gate report yet (`rtrl gate VERSION`).")
        return
    gdf = pd.DataFrame([{**g, "difference": fmt_change(g["difference"], "absolute") if g["difference"] is not None
                         else "n/a", "interval": "n/a" if g["lower"] is None else
                         f"[{g['lower']:+.3f}, {g['upper']:+.3f}]"} for g in gates]).drop(
        columns=["mtime", "lower", "upper", "candidate_rate", "champion_rate"])
    st.table(gdf.style.apply(lambda row: ["background-color: #e6f4ea" if row["decision"] == "promote"
                                          else "background-color: #fdecea"] * len(row), axis=1), hide_index=True)


def main() -> None:
    st.set_page_config(page_title="rtrl dashboard", layout="wide")
    st.sidebar.title("rtrl")
    keys = list(PAGES)
    wanted = st.query_params.get("page", "experiment")
    page = st.sidebar.radio("Page", keys, index=keys.index(wanted) if wanted in keys else 0,
                            format_func=PAGES.get, key="page")
    st.sidebar.caption(f"state dir: {STATE}")
    if st.sidebar.button("Load older cycles", key="older",
                         help=f"Read {CFG.dashboard.max_cycles} more cycles of history (dashboard.max_cycles)"):
        st.session_state["window"] = window() + CFG.dashboard.max_cycles
    st.sidebar.caption(f"reading the last {window():,} cycles")
    if st.sidebar.button("Refresh"):
        st.cache_data.clear()
    {"experiment": page_experiment, "trends": page_trends, "monitors": page_monitors, "health": page_health,
     "lineage": page_lineage}[page]()


main()
