"""`python -m infra.stack.moto_server -H HOST -p PORT`: moto's S3 server (`moto_server`), as the embedded broker's
object store (`kafka.storage_engine = "s3"`, infra/stack/broker.py), without moto's instance tracking.

moto keeps every model object it ever makes in a class-level list (`BaseModel.__new__` appends to
`instances_tracked`, read only by `reset()` and its dashboard), so a long-running server holds every S3 object
version ever written: about 5 KiB per PUT even after the object is overwritten or deleted (measured, moto 5.2.5:
its resident memory grew 1.4 MiB per 300 overwrites of one 12-byte key). Tansu writes a batch object per
partition per produce request and rewrites the partition's watermark object each time, so the store grew with the
traffic whatever the broker's retention deleted. `untrack_models` makes `BaseModel.__new__` a plain `__new__`;
objects are then freed when the store drops them (the same test: flat).

Its S3 backend also records an empty tag set for every object written (`put_object` tags each new key, with no
tags), by the object's ARN, and never removes it when the object is deleted: `skip_empty_tags` leaves out what would
record no tag (an object's tags read the same either way). And it keeps the continuation token of every truncated
listing (more than 1,000 keys) for good, while Tansu lists a partition's batches on each fetch:
`bound_pagination_tokens` keeps only the newest `MAX_PAGINATION_TOKENS` (a listing resumed from a token older than
that many others starts over, as from an unknown token).

Run it with `ENV` (infra/stack/broker.py does): the server answers each request on a new thread, and glibc's
per-thread malloc arenas (up to 8 per core) then hold on to freed memory. Measured with this module, Tansu over it
and retention enforced (200,000 records of 500 bytes, 20 rounds, 2 cores): the server's resident memory went
83 -> 95 MiB with the default arenas, 82 -> 79 MiB with two; with moto as shipped, 87 -> 167 MiB.
"""

from __future__ import annotations

import sys

ENV = {"MALLOC_ARENA_MAX": "2"}      # the server process's environment (see above)


def untrack_models() -> None:
    """Stop moto's `BaseModel` from recording each instance it makes (idempotent)."""
    from moto.core.common_models import BaseModel

    if getattr(BaseModel.__new__, "_rtrl_untracked", False):
        return

    def __new__(cls, *args, **kwargs):  # noqa: N807 -- moto's own signature
        return super(BaseModel, cls).__new__(cls)

    __new__._rtrl_untracked = True
    BaseModel.__new__ = staticmethod(__new__)


MAX_PAGINATION_TOKENS = 10_000


class RecentTokens(dict):
    """A dict that forgets its oldest entries past `limit` (moto's continuation tokens: each is used once, next)."""

    def __init__(self, limit: int = MAX_PAGINATION_TOKENS):
        super().__init__()
        self.limit = limit

    def __setitem__(self, key, value) -> None:
        super().__setitem__(key, value)
        while len(self) > self.limit:
            del self[next(iter(self))]


def bound_pagination_tokens() -> None:
    """Give each S3 backend moto makes a `RecentTokens` for its continuation tokens (idempotent)."""
    from moto.s3.models import S3Backend

    if getattr(S3Backend.__init__, "_rtrl_bounded", False):
        return
    original = S3Backend.__init__

    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        self._pagination_tokens = RecentTokens()

    __init__._rtrl_bounded = True
    S3Backend.__init__ = __init__


def skip_empty_tags() -> None:
    """Make moto's `TaggingService.tag_resource` record nothing for a resource given no tags (idempotent)."""
    from moto.utilities.tagging_service import TaggingService

    if getattr(TaggingService.tag_resource, "_rtrl_skips_empty", False):
        return
    original = TaggingService.tag_resource

    def tag_resource(self, arn, tags):
        if not tags and arn not in self.tags:
            return
        original(self, arn, tags)

    tag_resource._rtrl_skips_empty = True
    TaggingService.tag_resource = tag_resource


def main(argv: list[str] | None = None) -> None:
    untrack_models()
    skip_empty_tags()
    bound_pagination_tokens()
    from moto.server import main as moto_main

    moto_main(argv if argv is not None else sys.argv[1:])


if __name__ == "__main__":
    main()
