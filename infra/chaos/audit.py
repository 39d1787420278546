"""The audit of a chaos run: every served request against the reward table and the event log.

    result = audit(client, trajectories, rows, as_of, spec, archived=archived)
    result.rewards_lost, result.rewards_duplicated, result.as_dict()

What counts (the definitions the acceptance figures rest on):

  served      a request the simulated clients got an answer for (their ledger), or one whose trajectory event is
              in Kafka (serving produced it, whatever the client saw: e.g. the client timed out while serving
              answered). Requests that failed at the client and left no trajectory did not happen (serving was
              down): they are counted as `requests_failed`, nothing more.
  private     the trajectory says privacy mode (the client's privacy mode, or serving found a secret in it): no
              reward row may exist for it.
  expected    served, not private, and mature by the final cycle's as_of (request time + the spec's maturity
              delay, the question delay for question-only responses). Each must have exactly one row. A request
              whose trajectory never reached Kafka although its client got an answer is expected too (its event
              time is the client's): if it has no row it is lost -- the SDK spools while the broker is down, so
              nothing may be missing.
  pending     served, not private, not mature by as_of: the next cycle emits them; reported, not lost.
  lost        expected without a row.
  duplicated  rows beyond the first per request_id (over the whole table, every window).
  unexpected  rows for a request that is private, pending or was never served.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta

import polars as pl

SAMPLE = 10   # request ids listed per problem, for the report


@dataclass
class ClientRecord:
    """One policy call as a simulated client saw it."""

    request_id: str           # "" when the call failed before serving named it
    ok: bool
    event_time: datetime      # the request's event time (the client's simulated clock)
    privacy_mode: bool = False
    question: bool = False    # the answer only asked a question


@dataclass
class AuditResult:
    requests_served: int
    requests_failed: int
    requests_private: int
    rewards_expected: int
    rewards_present: int
    rewards_lost: int
    lost_never_in_kafka: int       # of the lost: the trajectory never reached Kafka (serving died holding it)
    rewards_duplicated: int
    rewards_pending: int
    rewards_unexpected: int
    trajectories_missing: int      # client got an answer, no trajectory in Kafka
    trajectory_copies_in_kafka: int   # extra copies of trajectory events (retries, floods) that dedupe must drop
    archive_missing: int | None    # trajectories in Kafka that the archive does not hold
    archive_duplicates: int | None  # committed archive rows beyond the first per event_id
    as_of: str | None
    samples: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)


def trajectory_frame(records: list[dict]) -> pl.DataFrame:
    """Trajectory events as a frame: event_id, request_id, event_time, privacy_mode, response_kind."""
    schema = {"event_id": pl.String, "request_id": pl.String, "event_time": pl.Datetime("us", "UTC"),
              "privacy_mode": pl.Boolean, "response_kind": pl.String}
    return pl.DataFrame(records, schema=schema)


def _mature_time(event_time: datetime, question: bool, spec) -> datetime:
    return event_time + timedelta(seconds=spec.maturity_delay_s(question=question))


def audit(client: list[ClientRecord], trajectories: pl.DataFrame, rows: pl.DataFrame, as_of: datetime | None,
          spec, archived: pl.DataFrame | None = None) -> AuditResult:
    """`trajectories`: every trajectory message read from Kafka (copies included, see `trajectory_frame`);
    `rows`: the reward table (at least `request_id`); `archived`: the archive's committed trajectory rows
    (event_id, request_id; copies included), or None to skip the event-log check."""
    # one view per request: Kafka's trajectory when there is one (serving's own record), else the client's
    served: dict[str, tuple[datetime, bool, bool]] = {}
    for t in trajectories.unique("event_id", keep="first").iter_rows(named=True):
        served.setdefault(t["request_id"], (t["event_time"], bool(t["privacy_mode"]),
                                            t["response_kind"] == "question"))
    in_kafka = set(served)
    ok = [c for c in client if c.ok and c.request_id]
    missing = sorted({c.request_id for c in ok} - in_kafka)
    for c in ok:
        served.setdefault(c.request_id, (c.event_time, c.privacy_mode, c.question))

    private = {r for r, (_, p, _) in served.items() if p}
    expected, pending = set(), set()
    for r, (t, p, q) in served.items():
        if p:
            continue
        (expected if as_of is not None and _mature_time(t, q, spec) <= as_of else pending).add(r)

    counts = rows.group_by("request_id").len() if rows.height else pl.DataFrame(
        {"request_id": [], "len": []}, schema={"request_id": pl.String, "len": pl.UInt32})
    have = set(counts["request_id"].to_list())
    dup = counts.filter(pl.col("len") > 1)
    lost = sorted(expected - have)
    unexpected = sorted(have - expected)

    archive_missing = archive_dups = None
    if archived is not None:
        archive_missing = len(in_kafka - set(archived["request_id"].to_list()))
        archive_dups = archived.height - archived["event_id"].n_unique() if archived.height else 0

    samples = {k: v[:SAMPLE] for k, v in (("lost", lost), ("duplicated", sorted(dup["request_id"].to_list())),
                                          ("unexpected", unexpected), ("trajectories_missing", missing)) if v}
    return AuditResult(
        requests_served=len(served), requests_failed=sum(not c.ok for c in client), requests_private=len(private),
        rewards_expected=len(expected), rewards_present=len(expected & have), rewards_lost=len(lost),
        lost_never_in_kafka=len(set(lost) - in_kafka),
        rewards_duplicated=int((dup["len"] - 1).sum()) if dup.height else 0, rewards_pending=len(pending),
        rewards_unexpected=len(unexpected), trajectories_missing=len(missing),
        trajectory_copies_in_kafka=trajectories.height - trajectories["event_id"].n_unique() if trajectories.height
        else 0, archive_missing=archive_missing, archive_duplicates=archive_dups,
        as_of=as_of.isoformat() if as_of else None, samples=samples)
