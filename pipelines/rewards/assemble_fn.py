"""AssembleRewardsFn: the keyed, stateful, event-time join of the reward job (docs/rewards.md), with Beam state and
watermark timers.

Keyed by shard (a group of workspaces). Buffers event batches; keeps an event-time timer at the earliest maturity
time of a pending request; when the watermark passes it, computes the rows of every request that became mature
(`assemble_rewards`), emits them, drops state no pending request can need, and re-arms the timer. With `as_of`
(bounded replay and cycle runs) no flush timer is armed: the watermark of a bounded input only moves at its
end, so one flush at that end emits every request maturing by `as_of` in a single pass (per-maturity firings
would recompute the shard's buffer thousands of times), and the remaining buffer goes to the `carry` output,
the open join state the next cycle starts from.

Late data (pipelines/rewards/lateness.py): new input older than the last firing is dropped and counted
(`late_requests` for trajectories, `late_events` for the rest). Bounded runs drop it before deduplication
(`DropLateFn`), so this check only finds late data in streaming. The carry is not late data: its trajectories that matured by the last firing were emitted by the
previous cycle and stay in the buffer, because a question still pending may defer to one of them.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import apache_beam as beam
import polars as pl
from apache_beam.coders import PickleCoder, VarIntCoder
from apache_beam.metrics import Metrics
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.userstate import BagStateSpec, ReadModifyWriteStateSpec, TimerSpec, on_timer
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import Timestamp

from pipelines.rewards import progress
from pipelines.rewards.assemble import assemble_rewards
from pipelines.rewards.batches import EventBatch, micros
from pipelines.rewards.bounded import maturities, pending_outcomes, prune
from pipelines.rewards.classifiers import get_classifier
from pipelines.rewards.frames import concat_frames, empty_frame, first_per_event_id
from pipelines.rewards.lateness import count_late
from pipelines.rewards.outcomes import assemble_outcomes, outcome_maturities
from pipelines.rewards.spec import RewardSpec

CARRY = "carry"
OUTCOMES = "outcomes"
_NONE = -(2**62)
END_OF_TIME = datetime(9000, 1, 1, tzinfo=timezone.utc)  # "every request is mature" (fits a datetime, unlike +inf)


def _dt(us: int) -> datetime:
    return datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(microseconds=us)


class AssembleRewardsFn(beam.DoFn):
    BUFFER = BagStateSpec("buffer", PickleCoder())
    SEEN = ReadModifyWriteStateSpec("seen", PickleCoder())        # (event_id, event_time) of what the buffer holds
    FIRED = ReadModifyWriteStateSpec("fired", VarIntCoder())      # micros of the last firing
    ARMED = ReadModifyWriteStateSpec("armed", VarIntCoder())      # micros the flush timer is set to
    FLUSH = TimerSpec("flush", TimeDomain.WATERMARK)
    END = TimerSpec("end", TimeDomain.WATERMARK)

    def __init__(self, spec: RewardSpec, as_of: datetime | None = None, after: datetime | None = None):
        self.spec = spec
        self.as_of = as_of
        self.after_us = _NONE if after is None else micros(after)  # rows maturing by then were emitted before
        self.rows_emitted = Metrics.counter("rewards", "rows_emitted")
        self.duplicates = Metrics.counter("rewards", "duplicates_dropped")
        self.unknown = Metrics.counter("rewards", "unknown_labels")
        self.pending = Metrics.counter("rewards", "requests_pending")
        self.outcome_rows = Metrics.counter("rewards", "outcome_rows")
        self.outcome_unknown = Metrics.counter("rewards", "outcome_unknown")
        self.outcomes_pending = Metrics.counter("rewards", "outcomes_pending")

    def setup(self):
        self.classifier = get_classifier(self.spec.classifier)

    def _fired(self, fired_state) -> int:
        """Micros of the last firing (rows maturing by then are out), or where an earlier run stopped."""
        fired = fired_state.read()
        return self.after_us if fired is None else fired

    def _maturities(self, traj: pl.DataFrame, outcomes: pl.DataFrame | None = None) -> pl.Series:
        """When rows of these events can mature: each request's reward row and, for background tasks, outcome
        rows (outcomes.outcome_maturities)."""
        own = maturities(traj, self.spec)
        extra = outcome_maturities(traj, outcomes if outcomes is not None else empty_frame("task_outcome"), self.spec)
        return own if extra.is_empty() else pl.concat([own, extra.cast(own.dtype)])

    def _arm(self, candidates: pl.Series, fired: int, armed_state, flush) -> None:
        after = candidates.drop_nulls()
        if fired != _NONE:
            after = after.filter(after > _dt(fired))
        if after.is_empty():
            return
        first = micros(after.min())
        armed = armed_state.read()
        if armed is None or armed == _NONE or first < armed:
            flush.set(Timestamp(micros=first))
            armed_state.write(first)

    def process(self, element, buffer=beam.DoFn.StateParam(BUFFER), seen=beam.DoFn.StateParam(SEEN),
                fired_state=beam.DoFn.StateParam(FIRED), armed_state=beam.DoFn.StateParam(ARMED),
                flush=beam.DoFn.TimerParam(FLUSH), end=beam.DoFn.TimerParam(END)):
        _, batch = element
        fired = self._fired(fired_state)
        frame = batch.frame
        if fired != _NONE and not batch.carried:  # late: before the last firing (pipelines/rewards/lateness.py)
            late = frame["event_time"] < _dt(fired)
            if (n := int(late.sum())):
                count_late(batch.event_type, n)
                frame = frame.filter(~late)
        # then duplicates, against every event the buffer holds (a copy of one it no longer holds is late)
        known = seen.read()
        fresh = first_per_event_id(frame)
        if known is not None and known.height:
            fresh = fresh.filter(~fresh["event_id"].is_in(known["event_id"].implode()))
        if (dropped := frame.height - fresh.height):
            self.duplicates.inc(dropped)
        frame = fresh
        if frame.is_empty():
            return
        ids = frame.select("event_id", "event_time")
        seen.write(ids if known is None else pl.concat([known, ids]))
        buffer.add(EventBatch(batch.event_type, frame))
        end.set(GlobalWindow().max_timestamp())
        if self.as_of is None and batch.event_type == "trajectory":
            self._arm(self._maturities(frame), fired, armed_state, flush)
        elif self.as_of is None and batch.event_type == "task_outcome":
            self._arm(self._maturities(empty_frame("trajectory"), frame), fired, armed_state, flush)

    def _flush(self, fire_at_us: int, buffer, seen, fired_state):
        """Emit the rows that matured by `fire_at_us`; keep in the buffer what pending requests can still need.
        Yields row frames; returns the kept frames."""
        fired = self._fired(fired_state)
        frames = concat_frames({b.event_type: b.frame} for b in buffer.read())
        out = assemble_rewards(frames, self.spec, self.classifier, _dt(fire_at_us),
                               None if fired == _NONE else _dt(fired))
        if out.rows.height:
            self.rows_emitted.inc(out.rows.height)
            progress.add("rows_emitted", out.rows.height)
            self.unknown.inc(out.counts.get("unknown_labels", 0))
            yield out.rows
        outcomes, counts = assemble_outcomes(frames, self.spec, _dt(fire_at_us), None if fired == _NONE else _dt(fired))
        if outcomes.height:
            self.outcome_rows.inc(counts["outcome_rows"])
            self.outcome_unknown.inc(counts["outcome_unknown"])
            yield beam.pvalue.TaggedOutput(OUTCOMES, outcomes)
        buffer.clear()
        kept = prune(frames, _dt(fire_at_us), self.spec)
        for t, f in kept.items():
            if f.height:
                buffer.add(EventBatch(t, f))
        known = seen.read()
        if known is not None:   # a copy of an event no longer held is older than this firing: late, dropped
            held = pl.concat([f.select("event_id") for f in kept.values()])
            seen.write(known.filter(pl.col("event_id").is_in(held["event_id"].implode())))
        fired_state.write(fire_at_us)
        return kept

    @on_timer(FLUSH)
    def on_flush(self, ts=beam.DoFn.TimestampParam, buffer=beam.DoFn.StateParam(BUFFER),
                 seen=beam.DoFn.StateParam(SEEN), fired_state=beam.DoFn.StateParam(FIRED),
                 armed_state=beam.DoFn.StateParam(ARMED), flush=beam.DoFn.TimerParam(FLUSH)):
        fired = self._fired(fired_state)
        if ts.micros <= fired:
            return  # the end-of-input flush already covered this time
        kept = yield from self._flush(ts.micros, buffer, seen, fired_state)
        armed_state.write(_NONE)
        self._arm(self._maturities(kept["trajectory"], kept["task_outcome"]), ts.micros, armed_state, flush)

    @on_timer(END)
    def on_end(self, buffer=beam.DoFn.StateParam(BUFFER), seen=beam.DoFn.StateParam(SEEN),
               fired_state=beam.DoFn.StateParam(FIRED)):
        """End of the input (the watermark reached the end of time). Timer order at that instant is not defined,
        so flush here what is mature -- as of `as_of` for bounded cycle runs, else everything -- and hand the rest
        (the open join state) to the next cycle as the `carry` output."""
        fired = self._fired(fired_state)
        end_us = micros(self.as_of if self.as_of is not None else END_OF_TIME)
        if end_us > fired:
            yield from self._flush(end_us, buffer, seen, fired_state)
        if self.as_of is not None:
            held = list(buffer.read())
            self.outcomes_pending.inc(pending_outcomes(concat_frames({b.event_type: b.frame} for b in held),
                                                       self.spec, self.as_of))
            for b in held:
                if b.event_type == "trajectory":  # requests not mature yet: the next cycle emits them
                    self.pending.inc(int((self._maturities(b.frame) > self.as_of).sum()))
                yield beam.pvalue.TaggedOutput(CARRY, b)
        buffer.clear()
        seen.clear()
