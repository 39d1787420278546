"""Run a suite of `Expectation`s over a polars frame with Great Expectations 1.24: the only module that imports GX.

How: an ephemeral GX context (in memory, no files, no analytics, no progress bars), a pandas datasource with a
whole-dataframe batch. Only the columns the GX expectations judge go to pandas, as NumPy-backed columns: list
columns (token ids, log-probs) never leave polars — rules over them are `holds` columns computed there.
Measured on 100,000 rows x 7 expectations: NumPy-backed pandas validates in about 0.2 s, the same frame with
pyarrow-backed pandas columns in about 3.1 s (GX's pandas engine falls back to slow paths for Arrow dtypes).

Failing rows are identified by GX's `partial_unexpected_index_list` (row positions; the pandas frame keeps the
polars row order), from which the key column and the rule's inputs are read back from the polars frame.
"""

from __future__ import annotations

import math
import time
from datetime import date, datetime
from typing import Any, Sequence

import polars as pl

from pipelines.quality.expectations import Expectation, prepare
from pipelines.quality.result import RuleResult, SuiteResult

MAX_LIST_ITEMS = 8     # list values in examples are cut to this many items
MAX_TEXT = 120         # and strings to this many characters

_GX_TYPES = {
    "not_null": "expect_column_values_to_not_be_null",
    "unique": "expect_column_values_to_be_unique",
    "in_set": "expect_column_values_to_be_in_set",
    "between": "expect_column_values_to_be_between",
    "row_count_between": "expect_table_row_count_to_be_between",
    "holds": "expect_column_values_to_be_in_set",  # value_set=[True] over the rule column
}


def _context():
    import great_expectations as gx
    from great_expectations.data_context.types.base import (DataContextConfig, InMemoryStoreBackendDefaults,
                                                             ProgressBarsConfig)

    config = DataContextConfig(store_backend_defaults=InMemoryStoreBackendDefaults(),
                               progress_bars=ProgressBarsConfig(globally=False, metric_calculations=False),
                               analytics_enabled=False)
    return gx.get_context(mode="ephemeral", project_config=config)


def _gx_expectation(e: Expectation, index: int):
    import great_expectations.expectations as gxe

    meta = {"rtrl_index": index, "rtrl_rule": e.rule}
    p = e.params
    if e.kind == "not_null":
        return gxe.ExpectColumnValuesToNotBeNull(column=e.column, meta=meta)
    if e.kind == "unique":
        return gxe.ExpectColumnValuesToBeUnique(column=e.column, meta=meta)
    if e.kind == "in_set":
        return gxe.ExpectColumnValuesToBeInSet(column=e.column, value_set=list(p["values"]), meta=meta)
    if e.kind == "holds":
        return gxe.ExpectColumnValuesToBeInSet(column=e.column, value_set=[True], meta=meta)
    if e.kind == "between":
        return gxe.ExpectColumnValuesToBeBetween(column=e.column, min_value=p.get("min_value"),
                                                 max_value=p.get("max_value"), meta=meta)
    if e.kind == "row_count_between":
        return gxe.ExpectTableRowCountToBeBetween(min_value=p.get("min_value"), max_value=p.get("max_value"),
                                                  meta=meta)
    raise ValueError(f"no GX expectation for kind {e.kind!r}")


def _jsonable(v: Any) -> Any:
    """A value for a report: JSON-ready, lists and strings shortened."""
    if isinstance(v, pl.Series):
        v = v.to_list()
    if isinstance(v, (list, tuple)):
        head = [_jsonable(x) for x in v[:MAX_LIST_ITEMS]]
        return head + [f"... ({len(v)} items)"] if len(v) > MAX_LIST_ITEMS else head
    if isinstance(v, str):
        return v if len(v) <= MAX_TEXT else v[:MAX_TEXT] + f"... ({len(v)} chars)"
    if isinstance(v, (datetime, date)):
        return v.isoformat()
    if isinstance(v, float) and not math.isfinite(v):
        return repr(v)
    if hasattr(v, "item"):  # numpy scalars
        return _jsonable(v.item())
    return v


def _examples(frame: pl.DataFrame, e: Expectation, key: str | None, indices: list[int], values: list[Any]
              ) -> list[dict[str, Any]]:
    cols = [c for c in dict.fromkeys(([key] if key else []) + list(e.reads)) if c in frame.columns]
    out = []
    for i, idx in enumerate(indices):
        row = {c: _jsonable(frame.get_column(c)[int(idx)]) for c in cols} if cols else {}
        row["row"] = int(idx)
        if e.kind != "holds" and e.column and e.column not in row and i < len(values):
            row[e.column] = _jsonable(values[i])
        out.append(row)
    if not indices:  # no positions (should not happen with pandas): the values GX saw
        out = [{e.column or "value": _jsonable(v)} for v in values]
    return out


def _observed(e: Expectation, count: int | None, total: int | None, observed_value: Any) -> str:
    if e.kind == "row_count_between":
        return f"{observed_value} rows"
    if count is None:
        return "" if observed_value is None else str(_jsonable(observed_value))
    if not total:
        return "0 rows"
    return f"{count} of {total} rows ({100 * count / total:.3g}%)" if count else f"0 of {total} rows"


def _not_evaluated(e: Expectation, error: str) -> RuleResult:
    return RuleResult(rule=e.rule, expectation=_GX_TYPES.get(e.kind, f"rtrl_{e.kind}"), column=e.column,
                      success=False, description=e.description, evaluated=False, observed=f"not evaluated: {error}",
                      error=error)


def _schema_result(e: Expectation) -> RuleResult:
    problems = dict(e.params.get("problems", {}))
    observed = "; ".join(f"{c}: {why}" for c, why in problems.items()) or "all required columns present and typed"
    return RuleResult(rule=e.rule, expectation="rtrl_schema", column=None, success=not problems,
                      description=e.description, observed_value=problems, observed=observed)


def run_suite(name: str, frame: pl.DataFrame, expectations: Sequence[Expectation], key: str | None = None,
              examples: int = 5) -> SuiteResult:
    """Validate `frame` against `expectations` and say, per rule, what failed and on which rows.

    `key` (e.g. request_id) is shown in every unexpected example; `examples` is how many failing rows each rule
    reports. Results come in the order of `expectations`. `seconds` is preparation plus validation (GX's first
    import, a few seconds, is not counted).
    """
    import great_expectations  # noqa: F401  (imported once, seconds; not counted in the suite's time)

    t0 = time.perf_counter()
    expectations = list(expectations)
    names = [e.rule for e in expectations]
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise ValueError(f"suite {name!r}: rule names must be unique, got {twice} more than once")
    clash = [e.rule for e in expectations if e.kind == "holds" and e.rule in frame.columns]
    if clash:
        raise ValueError(f"suite {name!r}: rule names {clash} are also columns of the frame")
    prepared, missing = prepare(frame, expectations)

    by_index: dict[int, RuleResult] = {}
    to_gx: list[tuple[int, Expectation]] = []
    for i, e in enumerate(expectations):
        if e.kind == "schema":
            by_index[i] = _schema_result(e)
        elif e.rule in missing:
            by_index[i] = _not_evaluated(e, "missing input column(s) " + ", ".join(missing[e.rule]))
        else:
            to_gx.append((i, e))

    if to_gx:
        by_index.update(_validate(name, prepared, to_gx, key, examples))
    results = [by_index[i] for i in range(len(expectations))]
    return SuiteResult(name=name, success=all(r.success for r in results), results=results,
                       row_count=frame.height, seconds=round(time.perf_counter() - t0, 4))


def _validate(name: str, prepared: pl.DataFrame, to_gx: list[tuple[int, Expectation]], key: str | None,
              examples: int) -> dict[int, RuleResult]:
    import great_expectations as gx

    columns = list(dict.fromkeys(e.column for _, e in to_gx if e.column))
    pdf = prepared.select(columns).to_pandas() if columns else prepared.select(pl.lit(0).alias("_")).to_pandas()
    context = _context()
    batch = (context.data_sources.add_pandas(name).add_dataframe_asset("frame")
             .add_batch_definition_whole_dataframe("whole").get_batch(batch_parameters={"dataframe": pdf}))
    suite = gx.ExpectationSuite(name=name)
    for i, e in to_gx:
        suite.add_expectation(_gx_expectation(e, i))
    validation = batch.validate(suite, result_format={"result_format": "SUMMARY",
                                                      "partial_unexpected_count": examples})
    out: dict[int, RuleResult] = {}
    declared = dict(to_gx)
    for r in validation.results:
        cfg = r.expectation_config
        i = int(cfg.meta["rtrl_index"])
        e = declared[i]
        info = r.exception_info or {}
        if info.get("raised_exception"):
            out[i] = _not_evaluated(e, f"GX raised: {info.get('exception_message')}")
            continue
        res = dict(r.result or {})
        count = res.get("unexpected_count")
        total = res.get("element_count")
        observed_value = res.get("observed_value")
        pct = res.get("unexpected_percent")
        out[i] = RuleResult(
            rule=e.rule, expectation=cfg.type, column=e.column, success=bool(r.success), description=e.description,
            element_count=total, unexpected_count=count,
            unexpected_percent=None if pct is None else round(float(pct), 6),
            observed_value=_jsonable(observed_value), observed=_observed(e, count, total, observed_value),
            unexpected_examples=[] if r.success else _examples(
                prepared, e, key, list(res.get("partial_unexpected_index_list") or [])[:examples],
                list(res.get("partial_unexpected_list") or [])[:examples]))
    missing = set(declared) - set(out)
    for i in missing:  # GX returned no result for it: fail closed
        out[i] = _not_evaluated(declared[i], "GX returned no result")
    return out
