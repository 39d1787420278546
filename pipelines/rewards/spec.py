"""The reward spec (`[rewards]` in rtrl.toml; docs/rewards.md): every window, weight and clip of the reward is
configuration.

Per served request r (request time t = the trajectory's event_time), all in event time:
  broken tool calls   b = #trajectory tool calls whose status is not ok
                        + #tool_call_result events of r within `followup_window_s` whose error_kind is
                          model-caused (`model_caused_tool_errors`);
                      r_broken_tool = -w.broken_tool if b > 0 else 0.            (the sample is kept, never dropped)
  edit persistence    the edits of r applied within `apply_window_s` of t; for each, its inserted/changed line
                      fingerprints L and the latest snapshot S of (workspace, file) with
                      applied_time <= S.time <= applied_time + horizon_s;
                      p = (sum over edits of |{l in L : l in S}|) / (sum of |L|) over edits with such an S;
                      no such S for every edit -> label unknown (excluded, counted).
                      A rejected edit (or one shown and never applied in the window) persists 0 of its lines
                      (the lines its suggestion_shown hunks show; one when unknown), beside the applied ones:
                      p = present / (known applied lines + rejected lines) (rules 2).
                      r_persistence = w.persistence * (2p - 1)  (kept +w, reverted -w); 0 when unknown / no edit.
  follow-up           the first followup_message with previous_request_id = r within followup_window_s,
                      classified by `classifier`; r_followup = -w.followup if dissatisfied else 0.
  clarification       a question-only response q inherits the next turn's edit outcome: the next trajectory in
  deferral            the same session within followup_window_s; r_deferral = deferral_discount * its
                      r_persistence, minus w.unnecessary_question when q's follow-up says the question was
                      unnecessary. When that next turn is privacy-mode its outcome is unknown: no deferral (0),
                      and never the turn after it (rules 2).
  length              x = completion_tokens / length_token_budget, y = tool_calls / length_tool_budget;
                      r_length = -w.length * ((x ** length_exponent) + (y ** length_exponent)) / 2
                      (about 0 for short answers, growing fast past the budget).
  reward              clip(sum of the r_* terms, -clip, +clip); every component is stored beside it.
Task outcomes (long loops; pipelines/rewards/outcomes.py, one outcome row per request of a background task):
                      a request r with task_id k gets the first task_outcome o of k (same org and workspace, by
                      event time then event id) with t <= o.time <= t + long_horizon_s;
                      r_outcome = clip(w.outcome * outcome_values[o.outcome] + w.rating * (o.rating - 3) / 2,
                      -clip, +clip) (the rating term only when o has one); no such o -> outcome unknown, r_outcome 0.
                      Every request of the task before o shares o's reward (the chain).
                      Outcome maturity: o.time + outcome_lateness_s when known, else t + long_horizon_s +
                      outcome_lateness_s; never before r's reward row matures (below). A task_outcome is late
                      like any other event (behind the cut-off, allowed_lateness_s; pipelines/rewards/lateness.py):
                      outcome_lateness_s delays the rows, it does not admit later outcomes.
Maturity: mature_time = t + max(followup_window_s, apply_window_s + horizon_s)
                        (+ followup_window_s again for question responses, whose next turn must mature)
                        + allowed_lateness_s. A row is emitted once the watermark passes mature_time.
"""

from __future__ import annotations

import hashlib
import json

from pydantic import BaseModel, ConfigDict, Field, model_validator


RULES = 2
"""The version of the reward rules this code computes, part of `RewardSpec.version()`. 2: a question whose next
turn is privacy-mode defers to nothing (1 skipped to the next non-private turn, an outcome not its own); a
request's persistence counts every edit it suggested, a rejected one persisting 0 of its lines (1 ignored a
rejected edit beside an applied one: an edit the user threw away did not persist)."""


NOT_IN_VERSION = {"retention_s"}
"""Settings of `[rewards]` that change no row, so are not part of `RewardSpec.version()`."""


class RewardWeights(BaseModel):
    model_config = ConfigDict(extra="forbid")

    persistence: float = Field(default=1.0, ge=0, le=100, description="Weight of (2p - 1).")
    followup: float = Field(default=0.5, ge=0, le=100, description="Penalty for a dissatisfied follow-up.")
    broken_tool: float = Field(default=1.0, ge=0, le=100, description="Penalty for any broken tool call.")
    unnecessary_question: float = Field(default=1.0, ge=0, le=100, description="Penalty for a needless question: "
                                        "as large as a broken call's, so that a needless question scores below a "
                                        "typical row (a smaller penalty can leave it above the mean, and training "
                                        "then reinforces it).")
    length: float = Field(default=0.2, ge=0, le=100, description="Scale of the nonlinear length penalty.")
    outcome: float = Field(default=1.0, ge=0, le=100, description="Weight of a task outcome's value "
                           "(outcome_values) in r_outcome.")
    rating: float = Field(default=0.25, ge=0, le=100, description="Weight of a task outcome's rating in r_outcome: "
                          "w.rating * (rating - 3) / 2, so 1 and 5 give -w and +w.")


class OutcomeValues(BaseModel):
    """The value of each task outcome before weighting (r_outcome = w.outcome * value + the rating term)."""

    model_config = ConfigDict(extra="forbid")

    accepted: float = Field(default=1.0, ge=-1, le=1, description="The user accepted the task's result (kept "
                            "the changes).")
    merged: float = Field(default=1.0, ge=-1, le=1, description="The result was merged (e.g. its pull request).")
    reverted: float = Field(default=-1.0, ge=-1, le=1, description="The result was undone.")
    abandoned: float = Field(default=-0.5, ge=-1, le=1, description="The user dropped the task without using its "
                             "result.")


class RewardSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    horizon_s: float = Field(default=1800, gt=0, le=7 * 86400, description="Persistence horizon H after apply.")
    apply_window_s: float = Field(default=600, ge=0, le=86400, description="Edits applied later than this after "
                                  "the request are not the request's outcome.")
    followup_window_s: float = Field(default=600, gt=0, le=86400, description="Follow-up / next-turn window W.")
    allowed_lateness_s: float = Field(default=300, ge=0, le=86400, description="How late an event may arrive "
                                      "(behind the watermark) and still count; later ones are counted as dropped.")
    weights: RewardWeights = Field(default_factory=RewardWeights, description="Weights of the reward's terms; "
                                   "each penalty is subtracted at its weight.")
    deferral_discount: float = Field(default=0.8, ge=0, le=1, description="A question-only response inherits "
                                     "this fraction of the next turn's edit outcome (r_deferral).")
    length_token_budget: int = Field(default=384, ge=1, description="Completion tokens at which x = 1.")
    length_tool_budget: int = Field(default=8, ge=1, description="Tool calls at which y = 1.")
    length_exponent: float = Field(default=3.0, ge=1, le=8, description="Growth of the length penalty.")
    clip: float = Field(default=2.0, gt=0, le=100, description="The scalar reward is clipped to [-clip, clip].")
    model_caused_tool_errors: list[str] = Field(
        default_factory=lambda: ["parse_error", "validation_error", "tool_error"],
        description="tool_call_result error kinds that count as broken (the model's fault).")
    classifier: str = Field(default="keywords", description="Follow-up classifier name (see "
                            "pipelines.rewards.classifiers).")
    long_horizon_s: float = Field(default=8 * 3600, gt=0, le=30 * 86400, description="How long after a request "
                                  "of a background task its task_outcome may arrive and still be the request's "
                                  "outcome; none by then: the outcome is unknown.")
    outcome_lateness_s: float = Field(default=600, ge=0, le=86400, description="How long an outcome row waits "
                                      "after its outcome (or after the long horizon, when none came) before it is "
                                      "emitted. It does not let a task_outcome arrive later than any other event: a "
                                      "task_outcome is late by the one cut-off rule of every event "
                                      "(allowed_lateness_s, pipelines/rewards/lateness.py).")
    outcome_values: OutcomeValues = Field(default_factory=OutcomeValues)
    retention_s: float = Field(default=30 * 86400.0, ge=0, le=3650 * 86400.0,
                               description="Reward table retention (pipelines/rewards/table_retention.py): after a "
                               "cycle ends, the windows (every version's partition of a cycle's rows and outcome "
                               "rows) of finished cycles whose cut (as_of) lies this long or more before the "
                               "earliest cut a cycle still to train reads back from are deleted, with those cycles' "
                               "dead letters (<rewards>/dead_letter). Measured in the "
                               "cycles' event time, so a loop that stops deletes nothing more. At least "
                               "long_horizon_s + the longer of outcome_lateness_s and the question maturity delay "
                               "(how far back a cycle's training looks up its chains' reward rows); 0 keeps every "
                               "window. Not part of the spec's version: it changes no row.")

    @model_validator(mode="after")
    def _retention_covers_the_chains(self) -> "RewardSpec":
        if 0 < self.retention_s < self.outcome_keep_s():
            raise ValueError(f"retention_s {self.retention_s:g} is shorter than {self.outcome_keep_s():g} s "
                             "(long_horizon_s + the longer of outcome_lateness_s and the question maturity delay): a "
                             "cycle's training looks up its chains' reward rows that far back. Raise it, or set 0 to "
                             "keep every window")
        return self

    def version(self) -> str:
        """A short stable hash of everything that changes the rows (the settings and the rules' version): stored
        in every row. Retention changes no row and is left out."""
        settings = self.model_dump(mode="json", exclude=NOT_IN_VERSION)
        blob = json.dumps({**settings, "_rules": RULES}, sort_keys=True).encode()
        return "rs-" + hashlib.sha256(blob).hexdigest()[:12]

    def outcome_keep_s(self) -> float:
        """How long the join keeps a background task's trajectories and outcomes: until every outcome row that can
        need them has been emitted. A request r' of a task counts in the chain of every request r its outcome o
        decides (t' >= o - long_horizon_s), and r's row matures by max(o + outcome_lateness_s, r's reward row)
        <= o + max(outcome_lateness_s, the question maturity delay): so r' is kept that long past the long
        horizon, and so is o (o >= t')."""
        return self.long_horizon_s + max(self.outcome_lateness_s, self.maturity_delay_s(question=True))

    def maturity_delay_s(self, question: bool = False) -> float:
        base = max(self.followup_window_s, self.apply_window_s + self.horizon_s)
        return base + (self.followup_window_s if question else 0.0) + self.allowed_lateness_s
