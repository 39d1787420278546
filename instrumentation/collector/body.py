"""Reading a request body without ever holding more than the cap, whatever Content-Length says."""

from __future__ import annotations

from collections.abc import AsyncIterator


class BodyTooLarge(Exception):
    def __init__(self, limit: int):
        super().__init__(f"request body exceeds {limit} bytes")
        self.limit = limit


class BadContentLength(Exception):
    pass


def declared_length(value: str | None, limit: int) -> int | None:
    """The Content-Length header checked before reading: None if absent; BodyTooLarge if over `limit`."""
    if value is None:
        return None
    value = value.strip()
    if not value.isdigit() or not value.isascii() or len(value) > 20:
        raise BadContentLength(f"Content-Length {value[:40]!r} is not a non-negative integer")
    n = int(value)
    if n > limit:
        raise BodyTooLarge(limit)
    return n


async def read_bounded(chunks: AsyncIterator[bytes], limit: int) -> bytes:
    """Concatenate `chunks`, raising BodyTooLarge as soon as the total passes `limit` (the rest is not read)."""
    buf = bytearray()
    async for chunk in chunks:
        if len(buf) + len(chunk) > limit:
            raise BodyTooLarge(limit)
        buf += chunk
    return bytes(buf)
