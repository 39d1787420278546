"""Configuration of the A/B metrics (`[ab]` in rtrl.toml) and of the reward-hacking monitors (`[ab.monitors]`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator


class MonitorThreshold(BaseModel):
    """When a reward-hacking monitor turns red: the treatment's change against control, per cycle.

    `max_increase` / `max_decrease` bound the change in the metric's own unit: relative (0.2 = +20 %) when
    `relative`, else absolute (0.01 = one percentage point for a rate). None leaves that side unchecked."""

    model_config = ConfigDict(extra="forbid")

    max_increase: float | None = Field(default=None, gt=0, le=100, description="Largest tolerated rise.")
    max_decrease: float | None = Field(default=None, gt=0, le=100, description="Largest tolerated fall.")
    relative: bool = Field(default=True, description="Thresholds are relative changes (else absolute).")


def _default_monitors() -> dict[str, MonitorThreshold]:
    return {
        # a policy that stops suggesting edits escapes the persistence penalty (asks or answers instead)
        "edit_rate": MonitorThreshold(max_decrease=0.10),
        # ... or asks questions it does not need to (the deferral rule should make this unprofitable)
        "clarification_rate": MonitorThreshold(max_increase=0.20),
        # broken calls are a hard negative; a rise means the reward is being gamed or the policy regressed
        "broken_tool_call_rate": MonitorThreshold(max_increase=0.01, relative=False),
        # the length penalty can be escaped by degenerate short answers, or outweighed by longer ones
        "tokens_per_response": MonitorThreshold(max_increase=0.20, max_decrease=0.30),
    }


class AbConfig(BaseModel):
    """`[ab]`: which arms are compared, how intervals are made, when the sample-ratio check fires."""

    model_config = ConfigDict(extra="forbid")

    control_arm: str = Field(default="control", min_length=1, max_length=64,
                             description="Arm name (reward table `arm`) of the baseline: a frozen checkpoint.")
    treatment_arm: str = Field(default="treatment", min_length=1, max_length=64,
                               description="Arm name of the real-time RL lineage (a new checkpoint each cycle).")
    treatment_share: float = Field(default=0.5, gt=0, lt=1,
                                   description="Expected share of users in treatment among the two arms (the "
                                               "serving split): the sample-ratio-mismatch check's null.")
    alpha: float = Field(default=0.05, gt=0, lt=0.5,
                         description="Two-sided error rate of every interval (0.05 = 95 % intervals).")
    srm_p_threshold: float = Field(default=0.001, gt=0, lt=0.5,
                                   description="A sample-ratio-mismatch chi-square p-value below this flags the "
                                               "cycle (its results should not be trusted).")
    sequential_tau: float = Field(default=0.05, gt=0, le=10,
                                  description="Mixing standard deviation of the mSPRT normal mixture, on the "
                                              "relative-change scale (0.05 = effects of about 5 % are where the "
                                              "always-valid interval is tightest).")
    buckets: int = Field(default=256, ge=16, le=65536,
                         description="Users are hashed into this many buckets; latency quantile intervals "
                                     "bootstrap over buckets (users stay whole, as they are randomized).")
    bootstrap_resamples: int = Field(default=400, ge=50, le=100_000,
                                     description="Bucket bootstrap resamples for the latency quantile intervals.")
    latency_resolution: float = Field(default=0.005, gt=0, le=0.1,
                                      description="Relative width of the log-spaced latency histogram bins: "
                                                  "quantiles are exact to about half of it.")
    seed: int = Field(default=0, ge=0, description="Bootstrap seed (results are reproducible).")
    cuped: bool = Field(default=True, description="Add CUPED-adjusted changes when a pre-experiment period is "
                                                  "given (`rtrl ab compute --pre-period`); ignored without one.")
    keep_cycle_frames: int = Field(default=20, ge=0, le=100_000,
                                   description="Retention of <state_dir>/ab (after each cycle): the newest N cycles "
                                   "keep their per-user sums and latency histogram (units.parquet, latency.parquet); "
                                   "an older cycle's are added to the folded running totals (<state_dir>/ab/folded) "
                                   "and removed. A cycle can be measured again while it keeps them. Every cycle's "
                                   "result.json is kept (the dashboards' history, for audit). 0 keeps every cycle's.")
    monitors: dict[str, MonitorThreshold] = Field(
        default_factory=_default_monitors,
        description="Reward-hacking monitors: metric name -> threshold on treatment vs control, per cycle (red past "
        "it). The defaults: fewer edits (escaping the persistence judge), more clarifying questions, more broken "
        "tool calls (absolute: +1 percentage point), and length games either way.")

    @model_validator(mode="after")
    def _check(self):
        if self.control_arm == self.treatment_arm:
            raise ValueError("control_arm and treatment_arm must differ")
        from pipelines.metrics.catalog import METRIC_NAMES

        unknown = sorted(set(self.monitors) - set(METRIC_NAMES))
        if unknown:
            raise ValueError(f"monitors name unknown metrics {unknown}; known: {list(METRIC_NAMES)}")
        return self
