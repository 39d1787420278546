"""A champion scored against v0 on one seed's fixed simulated users (`rtrl bench learning`'s points).

    scorer = Scorer(cfg, seed=0)
    v0 = scorer.score(v0_folder, "1")            # the first call is the baseline
    later = scorer.score(folder, "4")            # {"summary": {...}, "vs_v0": {metric: {diff, ci_low, ci_high}}}

Every checkpoint of a seed serves the same users (population `learning.score_seed` + seed) with the same sampling
seed, as `rtrl offline-ab` does; the differences pair each user's rows under the two checkpoints
(`infra.offline_ab.paired_units_difference`), so the users' own ease or difficulty cancels. With background tasks
on (`simulator.background_rate` > 0) each run drains until every task started has its outcome, and the long loop's
acceptance rate (LONG_LOOP) is a point too: a closed cohort, judged alike under every checkpoint.
"""

from __future__ import annotations

from typing import Callable

import polars as pl

# the curve's metrics: the A/B table's rates (pipelines.metrics.rates)
CURVE_METRICS = ("edit_persistence_rate", "dissatisfied_followup_rate", "broken_tool_call_rate", "edit_rate",
                 "clarification_rate")
SAMPLING_SEED = 7
# the long loop's metric, with background tasks on (`simulator.background_rate` > 0): of the background tasks judged,
# the share accepted or merged (pipelines.metrics.long_loop), from the per-user counts `with_long_loop` adds
LONG_LOOP = "background_acceptance_rate"
ACCEPTED, JUDGED = "background_accepted", "background_judged"


class Scorer:
    def __init__(self, cfg, seed: int, log: Callable[[str], None] = lambda m: None, alpha: float = 0.05,
                 workers=None):
        lc = cfg.learning
        self.sim = cfg.simulator.model_copy(update={"users": lc.score_users, "seed": lc.score_seed + seed})
        self.spec, self.hours, self.alpha, self.log = cfg.rewards, lc.score_hours, alpha, log
        self.jobs = workers or lc.serving_jobs()      # a count, or `ServingWorkers` shared with the loop
        self.sampling = sampling_of(cfg)              # serving's max tokens and temperature
        self.units: dict[str, pl.DataFrame] = {}      # label -> unit sums; the first scored is the baseline

    def score(self, folder, label: str) -> dict:
        """Checkpoint `folder` (rows labelled `label`) on the users; the summary has the simulator's grades of its
        answers (`outcomes`) too."""
        return self.score_parts(label, [(folder, None)])

    def score_parts(self, label: str, parts: list[tuple], served: pl.DataFrame | None = None) -> dict:
        """One policy made of several checkpoints, each serving some of the users: `parts` = [(folder, users),
        ...] (users: a range of user indexes, None = all), e.g. each org's users served by the org's adapter.
        `served`: unit sums of the other users, taken from a run already scored (a user's story does not depend on
        who runs beside it: `infra.offline_cycle.serve`); the summary's `outcomes` count the parts' answers alone.
        The parts' and `served`'s users should not overlap and should cover the users, to be paired with the other
        policies."""
        from collections import Counter

        units, grades = [] if served is None or served.is_empty() else [served], Counter()
        for folder, only in parts:
            u, g = served_units(folder, label, self.sim, self.spec, self.hours, self.jobs, only=only, **self.sampling)
            units.append(u)
            grades.update(g)
        out = self._add(label, concat_units(units))
        out["summary"]["outcomes"] = dict(grades)
        return out

    def score_scripted(self, name: str, errors) -> dict:
        """A scripted policy (`infra.learning.headroom`) on the same users."""
        from infra.learning.headroom import score_scripted

        return self._add(name, score_scripted(self.sim, self.spec, self.hours, errors))

    def _add(self, label: str, units: pl.DataFrame) -> dict:
        first = next(iter(self.units.values()), None)
        self.units[label] = units
        out = {"summary": summary(units)}
        if first is not None:
            out["vs_v0"] = differences(first, units, self.alpha)
        return out

    def compare(self, base: str, other: str) -> dict:
        """Scored checkpoint `other` - scored checkpoint `base` on every curve metric, paired by user."""
        return differences(self.units[base], self.units[other], self.alpha)


def sampling_of(cfg) -> dict:
    """Serving's sampling settings, as `infra.offline_cycle.serve` takes them: every in-process sample is drawn as
    serving draws it."""
    return {"max_tokens": cfg.serving.max_tokens, "temperature": cfg.serving.temperature}


def served_units(folder, label: str, sim, spec, hours: float, jobs, only: range | None = None,
                 max_tokens: int = 192, temperature: float = 1.0) -> tuple[pl.DataFrame, dict]:
    """A checkpoint's unit sums (`infra.offline_ab.unit_sums`, with the long loop's per-user counts when the users
    hand tasks to the background: `with_long_loop`) on the population `sim` (its users `only`: default all), and
    the simulator's grades of its answers (outcome -> count)."""
    from infra.offline_ab import unit_sums
    from infra.offline_cycle import rewards_and_outcomes, serve

    served = serve(folder, label, sim, hours, SAMPLING_SEED, jobs=jobs, only=only, max_tokens=max_tokens,
                   temperature=temperature)
    rows, outcomes = rewards_and_outcomes(served.events, spec)
    return with_long_loop(unit_sums(rows), outcomes), served.outcomes


def with_long_loop(units: pl.DataFrame, outcomes: pl.DataFrame) -> pl.DataFrame:
    """`units` plus, per user with judged background tasks (`outcomes`: task-outcome rows), a row of its tasks
    accepted (ACCEPTED) and judged (JUDGED), every other sum 0 (and those columns 0 on the reward rows' units), so
    that per-user sums of either kind stay what they were. `units` as it is when no background task was judged."""
    from pipelines.metrics.long_loop import per_user, task_units

    tasks = task_units(outcomes).filter(pl.col("known"))
    if tasks.is_empty():
        return units
    return concat_units([units, per_user(tasks).rename({"Y": ACCEPTED, "N": JUDGED})])


def concat_units(frames: list[pl.DataFrame]) -> pl.DataFrame:
    """Unit-sum frames stacked (users' rows of several runs, or of two kinds): a sum one frame lacks is 0 there."""
    if len(frames) == 1:
        return frames[0]
    both = pl.concat(frames, how="diagonal_relaxed")
    return both.with_columns(pl.col([c for c, t in both.schema.items() if t.is_numeric()]).fill_null(0))


def summary(units: pl.DataFrame) -> dict:
    """Rows, users and each curve metric's rate over one checkpoint's unit sums; with background tasks judged, their
    count and acceptance rate (LONG_LOOP)."""
    from pipelines.metrics.rates import den_col, num_col

    out = {"rows": int(units["n"].sum()), "users": units["user_id"].n_unique()}
    for m in CURVE_METRICS:
        den = float(units[den_col(m)].sum())
        out[m] = round(float(units[num_col(m)].sum()) / den, 4) if den else None
    judged = float(units[JUDGED].sum()) if JUDGED in units.columns else 0.0
    if judged:
        out |= {"background_tasks": int(judged), LONG_LOOP: round(float(units[ACCEPTED].sum()) / judged, 4)}
    return out


def differences(base: pl.DataFrame, other: pl.DataFrame, alpha: float) -> dict:
    """`other` - `base` on every curve metric, with paired (1 - alpha) intervals; and on LONG_LOOP when both judged
    background tasks."""
    from infra.offline_ab import paired_columns_difference, paired_units_difference

    out = {m: paired_units_difference(base, other, m, alpha) for m in CURVE_METRICS}
    if JUDGED in base.columns and JUDGED in other.columns:
        out[LONG_LOOP] = paired_columns_difference(base, other, ACCEPTED, JUDGED, alpha)
    return out
