"""The demo summary's A/B window: since the first promotion, both arms are compared from the first request the
treatment arm served with another checkpoint than control (treatment requests still served by v0 before the
swap would dilute the comparison); the last-cycle window takes the last cycle whole."""

from __future__ import annotations

import polars as pl

from infra.config import load_config
from infra.orchestrator.ledger import DONE, CycleRecord
from infra.orchestrator.summary import ab_object, cycle_summary, render_table
from pipelines.metrics.demo import demo_rows, write_demo_table


def _record(cid: str, seq: int, rows: pl.DataFrame) -> CycleRecord:
    versions = {arm: sorted(set(rows.filter(pl.col("arm") == arm)["policy_version"].to_list()))
                for arm in ("control", "treatment")}
    as_of = rows["mature_time"].max().isoformat()
    return CycleRecord(cid, seq, as_of, 0.0, status=DONE, steps={
        "collect": {"status": DONE, "result": {"as_of": as_of}},
        "measure": {"status": DONE, "result": {"measured": True, "versions": versions}},
        "train": {"status": DONE, "result": {"counts": {"kept_on_policy": 90, "kept_stale": 10,
                                                        "dropped_over_max_rows": 40}}}})


def test_since_first_promotion_compares_both_arms_from_the_first_request_of_the_new_checkpoint(tmp_path):
    cfg = load_config(None, [f'state_dir="{tmp_path}"'])
    table = tmp_path / "rewards" / "table"
    c1 = demo_rows(3000, cycle=0, treatment_version="1")                  # both arms on v1
    c2 = demo_rows(6000, cycle=1, treatment_version="2")
    swap = c2["request_time"].sort()[2000]
    c2 = c2.with_columns(policy_version=pl.when((pl.col("arm") == "treatment") & (pl.col("request_time") < swap))
                         .then(pl.lit("1")).otherwise(pl.col("policy_version")))    # v1 until the swap
    write_demo_table(table, "c1", c1)
    write_demo_table(table, "c2", c2)
    records = [_record("c1", 1, c1), _record("c2", 2, c2)]

    first = c2.filter((pl.col("arm") == "treatment") & (pl.col("policy_version") == "2"))["request_time"].min()
    ab = ab_object(cfg, records, "since_first_promotion")
    assert ab["cycles"] == ["c2"] and ab["since"] == first.isoformat()
    after = c2.filter(pl.col("request_time") >= first)
    assert sum(ab["rows"].values()) == after.height < c2.height
    assert ab["versions"]["treatment"] == ["2"] and ab["versions"]["control"] == ["1"]
    for key in ("edit_persistence", "dissatisfied_followup"):
        m = ab[key]
        assert m["ci_low"] < m["diff"] < m["ci_high"]
        assert abs(m["diff"] - (m["treatment"] - m["control"])) < 1e-12

    last = ab_object(cfg, records, "last_cycle")
    assert last["since"] is None and sum(last["rows"].values()) == c2.height

    summary = cycle_summary(cfg, records, "since_first_promotion")
    assert [c["rows_trained"] for c in summary["cycles"]] == [60, 60]    # kept minus those over max_rows
    assert "A/B, treatment − control" in render_table(summary)


def test_a_tail_measured_after_the_last_cycle_adds_its_rows_to_the_ab_but_not_to_the_cycles(tmp_path):
    cfg = load_config(None, [f'state_dir="{tmp_path}"'])
    table = tmp_path / "rewards" / "table"
    c1, c2 = demo_rows(3000, cycle=0, treatment_version="1"), demo_rows(3000, cycle=1, treatment_version="2")
    c3 = demo_rows(3000, cycle=2, treatment_version="3")
    for cid, rows in (("c1", c1), ("c2", c2), ("c3", c3)):
        write_demo_table(table, cid, rows)
    records = [_record("c1", 1, c1), _record("c2", 2, c2)]
    tail = _record("c3", 3, c3)
    tail.status = "running"                          # only its first steps ran: it trains when the loop goes on
    del tail.steps["train"]

    without = cycle_summary(cfg, records, "since_first_promotion")
    summary = cycle_summary(cfg, records, "since_first_promotion", tail=tail)
    assert [c["cycle_id"] for c in summary["cycles"]] == ["c1", "c2"]
    ab = summary["ab"]
    assert ab["cycles"] == ["c2", "c3"] and ab["tail"] == "c3" and "tail" not in without["ab"]
    assert sum(ab["rows"].values()) == sum(without["ab"]["rows"].values()) + c3.height
    assert ab["versions"]["treatment"] == ["2", "3"]
    assert "measured as c3's first steps" in render_table(summary)


def test_the_rows_before_the_first_promotion_are_an_aa_check_with_both_arms_on_controls_checkpoint(tmp_path):
    cfg = load_config(None, [f'state_dir="{tmp_path}"'])
    table = tmp_path / "rewards" / "table"
    c1 = demo_rows(3000, cycle=0, treatment_version="1")                  # both arms on v1: measured, not chosen
    c2 = demo_rows(6000, cycle=1, treatment_version="2")
    swap = c2["request_time"].sort()[2000]
    c2 = c2.with_columns(policy_version=pl.when((pl.col("arm") == "treatment") & (pl.col("request_time") < swap))
                         .then(pl.lit("1")).otherwise(pl.col("policy_version")))
    write_demo_table(table, "c1", c1)
    write_demo_table(table, "c2", c2)
    records = [_record("c1", 1, c1), _record("c2", 2, c2)]

    ab = ab_object(cfg, records, "since_first_promotion")
    aa = ab["before_promotion"]
    first = c2.filter((pl.col("arm") == "treatment") & (pl.col("policy_version") == "2"))["request_time"].min()
    before = pl.concat([c1, c2]).filter(pl.col("request_time") < first)
    assert aa["cycles"] == ["c1", "c2"] and aa["until"] == ab["since"] == first.isoformat()
    assert sum(aa["rows"].values()) == before.height
    assert sum(aa["rows"].values()) + sum(ab["rows"].values()) == c1.height + c2.height
    assert aa["versions"] == {"control": ["1"], "treatment": ["1"]}
    # the demo rows give treatment users an effect whatever they are served: the A/A check shows it too
    m = aa["edit_persistence"]
    assert m["ci_low"] < m["diff"] < m["ci_high"] and abs(m["diff"] - (m["treatment"] - m["control"])) < 1e-12
    assert "A/A check before the first promotion" in render_table(cycle_summary(cfg, records, "since_first_promotion"))

    assert "before_promotion" not in ab_object(cfg, records, "last_cycle")


def test_a_measured_cycle_whose_window_retention_removed_is_left_out_and_named(tmp_path):
    import shutil

    cfg = load_config(None, [f'state_dir="{tmp_path}"'])
    table = tmp_path / "rewards" / "table"
    cycles = [demo_rows(2000, cycle=k, treatment_version=str(k + 2)) for k in range(3)]
    for k, rows in enumerate(cycles):
        write_demo_table(table, f"c{k + 1}", rows)
    records = [_record(f"c{k + 1}", k + 1, rows) for k, rows in enumerate(cycles)]
    for d in table.glob("policy_version=*/window=c1"):          # as rewards.retention_s removes a window
        shutil.rmtree(d)
    ab = ab_object(cfg, records, "since_first_promotion")
    assert ab["cycles"] == ["c2", "c3"] and ab["cycles_removed_by_retention"] == ["c1"]
    assert "cycles_removed_by_retention" not in ab_object(cfg, records[1:], "last_cycle")


def test_the_table_shows_the_bytes_each_cycles_candidate_shipped():
    from infra.orchestrator.summary import _cycle_row

    shipped = {"kind": "delta", "bytes": 2_100_000, "full_bytes": 8_000_000, "share": 0.2625, "precision": "fp32",
               "parent": "1"}
    from infra.orchestrator.results import TrainStepResult

    result = TrainStepResult.model_validate({"candidate": "2", "shipped": shipped}).model_dump()   # as the step
    rec = CycleRecord("c2", 2, "2026-01-01T00:00:00+00:00", 0.0, status=DONE, steps={     # records it
        "train": {"status": DONE, "result": result}})
    row = _cycle_row(rec)
    assert row["shipped"] == shipped
    text = render_table({"cycles": [row, dict(row, cycle_id="c3", shipped={**shipped, "kind": "anchor",
                                                                            "bytes": 8_000_000}),
                                    dict(row, cycle_id="c4", shipped=None)], "ab": {"reason": "none"}})
    lines = text.splitlines()
    assert "shipped" in lines[0]
    assert lines[1].endswith("delta 2.1 MB (26%)") and lines[2].endswith("anchor 8.0 MB") and lines[3].endswith("—")
