"""Helpers clients use to describe code without sending it (docs/events.md: hunks and snapshots carry hashes).

A line's fingerprint is the 64-bit BLAKE2b of the line with its whitespace normalized (leading and trailing
whitespace stripped, every internal run collapsed to one space), as 16 hex characters: re-indenting or
re-wrapping spaces does not change it, any other edit does. Blank lines have no fingerprint. The reward job
measures edit persistence by comparing the fingerprints an edit inserted with a later snapshot's.

A file is named by `file_id`: a hash of its workspace-relative path, so paths never leave the client either.
"""

from __future__ import annotations

import posixpath
from hashlib import blake2b

FINGERPRINT_BYTES = 8   # 16 hex chars: schemas.events.Fingerprint
FILE_ID_BYTES = 16      # 32 hex chars: schemas.events.FileId allows up to 128


def normalize_line(line: str) -> str:
    """`line` stripped, with every internal run of whitespace collapsed to one space."""
    return " ".join(line.split())


def line_fingerprint(line: str) -> str | None:
    """The fingerprint of one line, or None when the line is blank."""
    norm = normalize_line(line)
    if not norm:
        return None
    return blake2b(norm.encode("utf-8", "surrogatepass"), digest_size=FINGERPRINT_BYTES).hexdigest()


def line_fingerprints(text: str) -> list[str]:
    """Fingerprints of the non-blank lines of `text`, in order (duplicates kept: a repeated line counts twice)."""
    out = []
    for line in text.splitlines():
        norm = " ".join(line.split())
        if norm:
            out.append(blake2b(norm.encode("utf-8", "surrogatepass"), digest_size=FINGERPRINT_BYTES).hexdigest())
    return out


def normalize_path(workspace_relative_path: str) -> str:
    """One spelling per file: forward slashes, no `.` segments, no leading `./` or `/`, no trailing slash."""
    path = workspace_relative_path.replace("\\", "/").strip()
    if not path:
        raise ValueError("file path must not be empty")
    norm = posixpath.normpath(path).lstrip("/")
    if norm in ("", ".") or norm == ".." or norm.startswith("../"):
        raise ValueError(f"{workspace_relative_path!r} is not a path inside the workspace")
    return norm


def file_id(workspace_relative_path: str) -> str:
    """A stable id for a file in a workspace: BLAKE2b-128 of its normalized workspace-relative path, hex."""
    return blake2b(normalize_path(workspace_relative_path).encode("utf-8", "surrogatepass"),
                   digest_size=FILE_ID_BYTES).hexdigest()
