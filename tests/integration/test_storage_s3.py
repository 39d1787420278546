"""`schemas.storage` reads against a real S3 server (moto's, as the stack runs it): a read racing an overwrite gets
one whole body, the old or the new, never one version's body at the other's size (pyarrow's reader takes the size
first and the bytes after: it cut the larger body, or padded the smaller with NULs)."""

from __future__ import annotations

import threading

import pytest

from schemas import storage

pytestmark = pytest.mark.integration


def test_a_read_racing_an_overwrite_of_another_size_gets_one_whole_body(s3_server):
    loc = s3_server.url("race") + "/LATEST"
    short, long = b"{" + b" " * 10 + b"}", b"{" + b" " * 4000 + b"}"   # a small object replaced by a larger one
    storage.write_bytes(loc, short)
    stop = threading.Event()

    def overwrite():
        while not stop.is_set():
            storage.write_bytes(loc, long)
            storage.write_bytes(loc, short)

    writer = threading.Thread(target=overwrite, daemon=True)
    writer.start()
    try:
        bodies = [storage.read_bytes(loc) for _ in range(300)]
    finally:
        stop.set()
        writer.join(timeout=30)
    torn = [b for b in bodies if b not in (short, long)]
    assert not torn, f"{len(torn)} reads got a body of one version at another's size (cut, or padded with NULs)"
    assert set(bodies) == {short, long}, "the race never happened: the reads must see both versions"


def test_reading_a_missing_object_is_file_not_found(s3_server):
    with pytest.raises(FileNotFoundError):
        storage.read_bytes(s3_server.url("missing") + "/nothing.json")
    with pytest.raises(FileNotFoundError):
        storage.read_text(s3_server.url("missing") + "/nothing.json")
