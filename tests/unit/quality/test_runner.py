"""The GX runner: expectations as data in, per-rule results (observed, examples) out, in declaration order."""

from __future__ import annotations

import time

import polars as pl
import pytest

from pipelines.quality.expectations import (between, conform, holds, in_set, not_null, row_count_between,
                                            schema, unique)
from pipelines.quality.runner import run_suite

FRAME = pl.DataFrame({"id": ["a", "b", "c", "c", None], "x": [1.0, 2.0, 3.0, 99.0, float("nan")],
                      "y": [1.0, 2.0, 3.0, 4.0, 5.0], "kind": ["p", "q", "p", "z", "p"]})


def test_results_follow_declaration_order_with_counts_and_keyed_examples():
    exps = [not_null("id"), unique("id"), between("x", 0, 10, rule="x_small"), in_set("kind", ["p", "q"]),
            holds("x_equals_y", pl.col("x") == pl.col("y"), ("x", "y"), "x == y"), row_count_between(1, 3)]
    t0 = time.perf_counter()
    result = run_suite("demo", FRAME, exps, key="id", examples=3)
    wall = time.perf_counter() - t0
    assert [r.rule for r in result.results] == ["id_not_null", "id_unique", "x_small", "kind_in_known_set",
                                                "x_equals_y", "row_count"]
    assert not result.success and result.row_count == 5
    assert 0 < result.seconds <= wall + 1e-4  # timed within the call (rounded to 0.1 ms)
    r = {x.rule: x for x in result.results}
    assert r["id_not_null"].unexpected_count == 1
    assert r["id_unique"].unexpected_count == 2 and {e["id"] for e in r["id_unique"].unexpected_examples} == {"c"}
    assert r["x_small"].unexpected_examples == [{"id": "c", "x": 99.0, "row": 3}]
    assert r["kind_in_known_set"].unexpected_examples == [{"id": "c", "kind": "z", "row": 3}]
    # NaN == 5.0 is False, so the last row fails the computed rule too; the rule's inputs are shown
    assert r["x_equals_y"].unexpected_count == 2
    assert r["x_equals_y"].unexpected_examples[0] == {"id": "c", "x": 99.0, "y": 4.0, "row": 3}
    assert r["x_equals_y"].expectation == "expect_column_values_to_be_in_set"
    assert not r["row_count"].success and r["row_count"].observed == "5 rows"


def test_a_passing_suite_reports_no_examples():
    result = run_suite("ok", FRAME.head(3), [unique("id"), between("y", 0, 3)], key="id")
    assert result.success and all(r.unexpected_examples == [] for r in result.results)
    assert result.rule("id_unique").observed == "0 of 3 rows"


def test_a_null_in_a_computed_rule_counts_as_a_failure():
    frame = pl.DataFrame({"a": [1, None]})
    result = run_suite("nulls", frame, [holds("a_positive", pl.col("a") > 0, ("a",), "a > 0")])
    assert result.rule("a_positive").unexpected_count == 1


def test_a_rule_whose_input_is_missing_fails_as_not_evaluated():
    result = run_suite("gap", FRAME, [holds("z_positive", pl.col("z") > 0, ("z",), "z > 0"), not_null("w")])
    assert not result.success
    assert [r.status for r in result.results] == ["error", "error"]
    assert "missing input column(s) z" in result.rule("z_positive").observed


def test_an_empty_frame_passes_column_rules_and_fails_a_row_minimum():
    result = run_suite("empty", FRAME.head(0), [not_null("id"), unique("id"), row_count_between(1)])
    assert result.failed_rules == ["row_count"]


def test_rule_names_must_be_unique_and_not_shadow_columns():
    with pytest.raises(ValueError, match="unique"):
        run_suite("dup", FRAME, [not_null("id"), not_null("id")])
    with pytest.raises(ValueError, match="also columns"):
        run_suite("shadow", FRAME, [holds("x", pl.col("x") > 0, ("x",), "")])


def test_conform_casts_what_it_can_and_reports_the_rest():
    import pyarrow as pa

    frame = pl.DataFrame({"a": pl.Series([1, 2], dtype=pl.Int32), "b": ["1.5", "x"]})
    want = pa.schema([pa.field("a", pa.int64()), pa.field("b", pa.float64()), pa.field("c", pa.string())])
    out, problems = conform(frame, want)
    assert out.schema["a"] == pl.Int64 and "b" not in out.columns
    assert problems == {"b": "type String cannot be read as Float64", "c": "missing"}
    result = run_suite("schema", out, [schema(problems)])
    assert result.failed_rules == ["matches_schema"] and "c: missing" in result.rule("matches_schema").observed
