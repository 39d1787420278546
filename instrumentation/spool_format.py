"""The spool's record format: [u32 body length][u32 crc32(body)][body], where
body = [u16 topic length][u32 key length][topic][key][value]. A record that is cut short or fails its CRC is
reported as torn, so a reader can stop there (a crash mid-write leaves exactly that at a segment's end).
"""

from __future__ import annotations

import struct
import zlib
from typing import BinaryIO

from instrumentation.transport import Record

HEADER = struct.Struct("<II")   # body length, crc32(body)
FIELDS = struct.Struct("<HI")   # topic length, key length; the value is the rest of the body
MAX_RECORD_BYTES = 64 * 1024 * 1024


def encode(record: Record) -> bytes:
    topic = record.topic.encode()
    body = FIELDS.pack(len(topic), len(record.key)) + topic + record.key + record.value
    return HEADER.pack(len(body), zlib.crc32(body)) + body


def _decode(body: bytes) -> Record:
    topic_len, key_len = FIELDS.unpack_from(body)
    start = FIELDS.size
    topic = body[start:start + topic_len].decode()
    key = body[start + topic_len:start + topic_len + key_len]
    return Record(topic, key, body[start + topic_len + key_len:])


def read_record(f: BinaryIO) -> tuple[Record | None, int]:
    """The next record and its size on disk, or (None, 0) at a clean end, or (None, -1) if torn or corrupt."""
    head = f.read(HEADER.size)
    if not head:
        return None, 0
    if len(head) < HEADER.size:
        return None, -1
    length, crc = HEADER.unpack(head)
    if length < FIELDS.size or length > MAX_RECORD_BYTES:
        return None, -1
    body = f.read(length)
    if len(body) < length or zlib.crc32(body) != crc:
        return None, -1
    return _decode(body), HEADER.size + length
