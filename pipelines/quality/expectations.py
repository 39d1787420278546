"""Expectations as data: what a suite asserts, in a small vocabulary that does not mention Great Expectations.

A suite is a list of `Expectation`s built with the helpers below. Built-in checks name a column of the frame
(`not_null`, `unique`, `in_set`, `between`, `row_count_between`). A cross-column rule that GX has no expectation
for is `holds(rule, expr, inputs)`: a polars boolean expression computed as a column named after the rule (True =
the row is fine; a null counts as False) and then expected to be all True, so the report names the rule. `schema`
carries the result of `conform` (missing or mistyped columns), judged before GX runs.

Only `pipelines.quality.runner` turns these into GX expectations.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

import polars as pl
import pyarrow as pa

KINDS = ("not_null", "unique", "in_set", "between", "row_count_between", "holds", "schema")


@dataclass(frozen=True, eq=False)
class Expectation:
    rule: str                       # the name in the report; unique within a suite
    kind: str                       # one of KINDS
    column: str | None = None       # the column judged (for `holds`: the computed column, named `rule`)
    params: Mapping[str, Any] = field(default_factory=dict)
    inputs: tuple[str, ...] = ()    # columns the rule reads: shown beside failing rows; missing -> not evaluated
    description: str = ""
    expr: pl.Expr | None = None     # `holds` only: True where the row satisfies the rule

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"unknown expectation kind {self.kind!r}; known: {KINDS}")
        if self.kind == "holds" and self.expr is None:
            raise ValueError(f"rule {self.rule!r}: `holds` needs an expression")

    @property
    def reads(self) -> tuple[str, ...]:
        """The frame columns that must exist for the rule to be evaluated."""
        if self.kind == "holds":
            return self.inputs
        return (self.column,) if self.column else ()


def not_null(column: str, rule: str | None = None, description: str = "") -> Expectation:
    return Expectation(rule or f"{column}_not_null", "not_null", column, inputs=(column,),
                       description=description or f"{column} is never null (NaN counts as null)")


def unique(column: str, rule: str | None = None, description: str = "") -> Expectation:
    return Expectation(rule or f"{column}_unique", "unique", column, inputs=(column,),
                       description=description or f"no two rows share a {column}")


def in_set(column: str, values: Iterable[Any], rule: str | None = None, description: str = "") -> Expectation:
    values = sorted(values)
    return Expectation(rule or f"{column}_in_known_set", "in_set", column, {"values": values}, inputs=(column,),
                       description=description or f"{column} is one of {values} (nulls are judged by not_null)")


def between(column: str, min_value: float | None = None, max_value: float | None = None, rule: str | None = None,
            description: str = "") -> Expectation:
    lo = "-inf" if min_value is None else min_value
    hi = "inf" if max_value is None else max_value
    return Expectation(rule or f"{column}_between_{lo}_and_{hi}", "between", column,
                       {"min_value": min_value, "max_value": max_value}, inputs=(column,),
                       description=description or f"{lo} <= {column} <= {hi} (nulls are judged by not_null)")


def row_count_between(min_value: int | None = None, max_value: int | None = None, rule: str = "row_count",
                      description: str = "") -> Expectation:
    return Expectation(rule, "row_count_between", None, {"min_value": min_value, "max_value": max_value},
                       description=description or f"the frame has between {min_value} and {max_value} rows")


def holds(rule: str, expr: pl.Expr, inputs: Iterable[str], description: str) -> Expectation:
    return Expectation(rule, "holds", rule, inputs=tuple(inputs), description=description, expr=expr)


def schema(problems: Mapping[str, str], rule: str = "matches_schema", description: str = "") -> Expectation:
    return Expectation(rule, "schema", None, {"problems": dict(problems)},
                       description=description or "every required column is present with its Arrow type")


def conform(frame: pl.DataFrame, required: pa.Schema, optional: pa.Schema | None = None
            ) -> tuple[pl.DataFrame, dict[str, str]]:
    """Cast the frame's columns to the expected Arrow types where that is lossless.

    Returns the frame and the problems by column: a required column that is missing, or any expected column whose
    type cannot be cast (that column is dropped, so the rules reading it report it instead of crashing). Columns
    not in either schema are kept as they are.
    """
    problems: dict[str, str] = {}
    casts: list[pl.Expr] = []
    drop: list[str] = []
    fields = [(f, True) for f in required] + [(f, False) for f in (optional or [])]
    for f, is_required in fields:
        if f.name not in frame.columns:
            if is_required:
                problems[f.name] = "missing"
            continue
        want = pl.from_arrow(pa.schema([f]).empty_table()).schema[f.name]
        have = frame.schema[f.name]
        if have == want:
            continue
        if have == pl.Null:  # an all-null column (e.g. from a diagonal concat): any type fits
            casts.append(pl.col(f.name).cast(want))
            continue
        try:
            cast = frame.get_column(f.name).cast(want, strict=True)
        except (pl.exceptions.InvalidOperationError, pl.exceptions.ComputeError, pl.exceptions.SchemaError):
            cast = None
        if cast is None or cast.null_count() != frame.get_column(f.name).null_count():
            problems[f.name] = f"type {have} cannot be read as {want}"
            drop.append(f.name)
        else:
            casts.append(pl.col(f.name).cast(want))
    if casts:
        frame = frame.with_columns(casts)
    return frame.drop(drop), problems


def prepare(frame: pl.DataFrame, expectations: list[Expectation]) -> tuple[pl.DataFrame, dict[str, list[str]]]:
    """Compute the `holds` rule columns whose inputs exist (nulls -> False). Returns the frame and, per rule that
    cannot be evaluated, the input columns it lacks."""
    missing: dict[str, list[str]] = {}
    exprs = []
    for e in expectations:
        lacking = [c for c in e.reads if c not in frame.columns]
        if lacking:
            missing[e.rule] = lacking
        elif e.kind == "holds":
            exprs.append(e.expr.fill_null(False).alias(e.rule))
    return (frame.with_columns(exprs) if exprs else frame), missing
