"""The chaos audit on hand-built tables: what is expected, lost, duplicated, pending, unexpected."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import polars as pl

from infra.chaos.audit import ClientRecord, audit, trajectory_frame
from pipelines.rewards.spec import RewardSpec

SPEC = RewardSpec(horizon_s=600, apply_window_s=300, followup_window_s=300, allowed_lateness_s=600)
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
DELAY = timedelta(seconds=SPEC.maturity_delay_s())            # 1500 s
Q_DELAY = timedelta(seconds=SPEC.maturity_delay_s(question=True))   # 1800 s
AS_OF = T0 + timedelta(hours=1)


def traj(request_id, at, event_id=None, privacy=False, kind="edit"):
    return {"event_id": event_id or f"e-{request_id}", "request_id": request_id, "event_time": at,
            "privacy_mode": privacy, "response_kind": kind}


def rows(*request_ids):
    return pl.DataFrame({"request_id": list(request_ids)}, schema={"request_id": pl.String})


def test_every_mature_served_request_with_one_row_is_neither_lost_nor_duplicated():
    t = trajectory_frame([traj("a", T0), traj("b", T0 + timedelta(minutes=5))])
    r = audit([ClientRecord("a", True, T0), ClientRecord("b", True, T0)], t, rows("a", "b"), AS_OF, SPEC)
    assert (r.requests_served, r.rewards_expected, r.rewards_present) == (2, 2, 2)
    assert (r.rewards_lost, r.rewards_duplicated, r.rewards_pending, r.rewards_unexpected) == (0, 0, 0, 0)


def test_a_mature_request_without_a_row_is_lost():
    t = trajectory_frame([traj("a", T0), traj("b", T0)])
    r = audit([], t, rows("a"), AS_OF, SPEC)
    assert r.rewards_lost == 1 and r.samples["lost"] == ["b"] and r.lost_never_in_kafka == 0


def test_rows_beyond_the_first_per_request_are_duplicates_across_windows():
    t = trajectory_frame([traj("a", T0), traj("b", T0)])
    r = audit([], t, rows("a", "a", "a", "b"), AS_OF, SPEC)
    assert r.rewards_duplicated == 2 and r.samples["duplicated"] == ["a"]
    assert r.rewards_lost == 0


def test_a_request_not_mature_by_as_of_is_pending_not_lost_and_a_row_for_it_is_unexpected():
    young = AS_OF - DELAY + timedelta(seconds=1)
    t = trajectory_frame([traj("old", T0), traj("young", young)])
    r = audit([], t, rows("old"), AS_OF, SPEC)
    assert (r.rewards_expected, r.rewards_pending, r.rewards_lost) == (1, 1, 0)
    r2 = audit([], t, rows("old", "young"), AS_OF, SPEC)
    assert r2.rewards_unexpected == 1 and r2.samples["unexpected"] == ["young"]


def test_maturity_is_inclusive_of_as_of_and_questions_wait_the_longer_delay():
    t = trajectory_frame([traj("edge", AS_OF - DELAY), traj("q", AS_OF - DELAY, kind="question")])
    r = audit([], t, rows("edge"), AS_OF, SPEC)
    assert (r.rewards_expected, r.rewards_pending, r.rewards_lost) == (1, 1, 0)
    r2 = audit([], trajectory_frame([traj("q", AS_OF - Q_DELAY, kind="question")]), rows(), AS_OF, SPEC)
    assert r2.rewards_lost == 1


def test_privacy_mode_requests_expect_no_row_and_a_row_for_one_is_unexpected():
    t = trajectory_frame([traj("p", T0, privacy=True)])
    r = audit([ClientRecord("p", True, T0)], t, rows(), AS_OF, SPEC)
    assert (r.requests_private, r.rewards_expected, r.rewards_lost) == (1, 0, 0)
    assert audit([], t, rows("p"), AS_OF, SPEC).rewards_unexpected == 1


def test_an_answered_request_whose_trajectory_never_reached_kafka_is_expected_and_lost():
    r = audit([ClientRecord("gone", True, T0)], trajectory_frame([]), rows(), AS_OF, SPEC)
    assert (r.requests_served, r.trajectories_missing, r.rewards_expected, r.rewards_lost) == (1, 1, 1, 1)
    assert r.lost_never_in_kafka == 1


def test_a_failed_call_without_a_trajectory_did_not_happen_but_one_serving_logged_is_served():
    t = trajectory_frame([traj("timed-out", T0)])
    client = [ClientRecord("", False, T0), ClientRecord("", False, T0)]
    r = audit(client, t, rows("timed-out"), AS_OF, SPEC)
    assert (r.requests_failed, r.requests_served, r.rewards_expected, r.rewards_lost) == (2, 1, 1, 0)


def test_kafka_copies_of_a_trajectory_count_once_and_are_reported_as_copies():
    t = trajectory_frame([traj("a", T0), traj("a", T0), traj("a", T0)])
    r = audit([], t, rows("a"), AS_OF, SPEC)
    assert (r.requests_served, r.trajectory_copies_in_kafka, r.rewards_duplicated) == (1, 2, 0)


def test_the_event_log_check_counts_trajectories_missing_from_the_archive_and_archived_copies():
    t = trajectory_frame([traj("a", T0), traj("b", T0)])
    archived = pl.DataFrame({"event_id": ["e-a", "e-a"], "request_id": ["a", "a"]})
    r = audit([], t, rows("a", "b"), AS_OF, SPEC, archived=archived)
    assert (r.archive_missing, r.archive_duplicates) == (1, 1)
    assert audit([], t, rows("a", "b"), AS_OF, SPEC).archive_missing is None


def test_without_a_finished_cycle_nothing_is_expected_and_everything_is_pending():
    r = audit([], trajectory_frame([traj("a", T0)]), rows(), None, SPEC)
    assert (r.rewards_expected, r.rewards_pending, r.rewards_lost) == (0, 1, 0)
