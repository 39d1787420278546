"""Storage URLs: the one filesystem layer every data-plane path goes through (the storage contract of DESIGN §8).

A location is a local path (`str` or `Path`), a `file://` URL, or an object-store URL `s3://bucket/key`.
`resolve(loc)` gives the `pyarrow.fs` filesystem and the path inside it; the helpers below are the operations the
data plane needs (exists, list, read, atomic write, delete), the same for every scheme.

Why pyarrow's filesystems: pyarrow is a core dependency already, it reads and writes Parquet on S3 natively with
no extra package, and every polars and Beam worker has it. (fsspec would add a package per store; Beam's
FileSystems would tie `schemas/` to Beam.)

Location values keep their kind: `normalize` turns a local path or a `file://` URL into a `Path` and leaves an
object-store URL a `str` (`s3://bucket/key`, no trailing slash); `join` keeps the kind of its base. A `Path` is
never made of an URL: `Path("s3://b/k")` is the local path `s3:/b/k`, and `normalize` refuses that form with a
clear error instead of writing to a local folder called `s3:`.

S3 settings come from the environment, the usual AWS way: `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY` /
`AWS_SESSION_TOKEN` (else the AWS default chain: config files, instance metadata), `AWS_REGION` or
`AWS_DEFAULT_REGION`, and `AWS_ENDPOINT_URL_S3` or `AWS_ENDPOINT_URL` for an S3-compatible server that is not AWS
(moto, MinIO), `http://` or `https://`. Buckets are never created here.

Atomic writes (`write_atomic`, `write_bytes`, `write_text`, `write_parquet`): a reader sees the whole new content
under the name, or the old content, or nothing -- never a partial file.
  * local: a temporary file in the same folder (`.tmp-<random>-<name>`, see `is_temp`), fsync, `os.replace`,
    fsync of the folder (and of the parents of every folder `mkdirs` creates). A crash leaves at most a temp file.
  * S3: the content is built in memory first, then uploaded; an object becomes visible only when its single
    PutObject or its CompleteMultipartUpload succeeds, and S3 never shows part of an object. A failed or killed
    upload leaves nothing visible (an incomplete multipart upload is not an object; a bucket lifecycle rule
    should abort old ones).

Conditional writes (`create_if_absent`, `replace_if_version`, `delete_if_version`, with `read_versioned`) are the
compare-and-swap primitives for leases and pointers that must hold across hosts: on S3 they are conditional
requests (`If-None-Match: *`, `If-Match: <etag>`; AWS S3 since 2024, MinIO, moto); locally an exclusive link and
an flock. Their version is the S3 ETag, or the SHA-256 of a local file's content.
"""

from __future__ import annotations

import fcntl
import fnmatch
import hashlib
import io
import os
import re
import uuid
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path, PurePosixPath
from typing import BinaryIO, Callable, Union
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

Location = Union[str, os.PathLike]
TEMP_PREFIX = ".tmp-"
SCHEMES = ("file", "s3")
_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_MANGLED = re.compile(r"^(s3|gs|gcs|abfs|az|hdfs|http|https):/(?!/)", re.IGNORECASE)


class StorageError(ValueError):
    """A location this layer cannot use (an unsupported scheme, a malformed URL, a conditional write the server
    does not honour)."""


# -- locations ----------------------------------------------------------------------------------------------------


def scheme(loc: Location) -> str:
    """'s3' for an S3 URL, 'file' for a local path or file:// URL; raises StorageError for any other scheme."""
    if isinstance(loc, os.PathLike):
        return "file"
    m = _URL.match(loc)
    if m is None:
        return "file"
    s = m.group(1).lower()
    if s not in SCHEMES:
        raise StorageError(f"unsupported storage URL scheme {s!r} in {loc!r}: use a local path, file:// or "
                           "s3://bucket/key")
    return s


def is_remote(loc: Location) -> bool:
    """Whether `loc` is in an object store (not on this machine's disk)."""
    return scheme(loc) != "file"


def normalize(loc: Location) -> Path | str:
    """A local location as a `Path`, an object-store one as a canonical URL string `s3://bucket/key`."""
    if isinstance(loc, os.PathLike):
        text = os.fspath(loc)
        if _MANGLED.match(text):
            raise StorageError(f"{text!r} looks like a URL that went through pathlib.Path (which turns '//' into "
                               "'/'); pass the URL as a string")
        return Path(loc)
    s = scheme(loc)
    if s == "file":
        if _URL.match(loc):
            parts = urlsplit(loc)
            if parts.netloc not in ("", "localhost"):
                raise StorageError(f"file URL {loc!r} names host {parts.netloc!r}; use file:///absolute/path")
            from urllib.parse import unquote
            return Path(unquote(parts.path))
        if _MANGLED.match(loc):
            raise StorageError(f"{loc!r} looks like a URL missing a '/' after the scheme (or one that went "
                               "through pathlib.Path); write s3://bucket/key")
        return Path(loc)
    bucket, _, key = loc[len(s) + 3:].partition("/")
    if not bucket:
        raise StorageError(f"{loc!r} names no bucket; use {s}://bucket/key")
    key = "/".join(p for p in key.split("/") if p)
    return f"{s}://{bucket}/{key}" if key else f"{s}://{bucket}"


def join(base: Location, *parts: str) -> Path | str:
    """`base`/part/... keeping the kind of `base` (a `Path` for local, a URL string for an object store)."""
    base = normalize(base)
    if isinstance(base, Path):
        return base.joinpath(*parts)
    tail = "/".join(s for p in parts for s in str(p).split("/") if s)
    return f"{base}/{tail}" if tail else base


def name(loc: Location) -> str:
    loc = normalize(loc)
    return loc.name if isinstance(loc, Path) else PurePosixPath(loc.split("://", 1)[1]).name


def parent(loc: Location) -> Path | str:
    loc = normalize(loc)
    if isinstance(loc, Path):
        return loc.parent
    head, _, _ = loc.rpartition("/")
    return loc if head.endswith(":/") else head


def relative_to(loc: Location, base: Location) -> str:
    """The posix path of `loc` under `base` ('a/b.parquet')."""
    loc, base = normalize(loc), normalize(base)
    if isinstance(loc, Path) and isinstance(base, Path):
        return loc.relative_to(base).as_posix()
    if isinstance(loc, str) and isinstance(base, str) and loc.startswith(base + "/"):
        return loc[len(base) + 1:]
    raise ValueError(f"{loc} is not under {base}")


def is_temp(loc: Location) -> bool:
    """Whether `loc` is a temporary file of an interrupted local atomic write (recovery may delete it)."""
    return name(loc).startswith(TEMP_PREFIX)


def local_path(loc: Location) -> Path | None:
    """The local `Path` of `loc`, or None when it is in an object store."""
    loc = normalize(loc)
    return loc if isinstance(loc, Path) else None


# -- filesystems --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class S3Settings:
    """What the environment says about S3 (see the module docstring)."""

    access_key: str | None
    secret_key: str | None
    session_token: str | None
    region: str | None
    endpoint_url: str | None   # http(s)://host:port of a non-AWS server, else None

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> "S3Settings":
        env = os.environ if env is None else env
        endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or None
        region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or None
        return cls(env.get("AWS_ACCESS_KEY_ID") or None, env.get("AWS_SECRET_ACCESS_KEY") or None,
                   env.get("AWS_SESSION_TOKEN") or None, region or ("us-east-1" if endpoint else None), endpoint)

    def __repr__(self) -> str:  # never the secret
        return (f"S3Settings(access_key={self.access_key!r}, region={self.region!r}, "
                f"endpoint_url={self.endpoint_url!r})")


@lru_cache(maxsize=8)
def _s3_filesystem(settings: S3Settings) -> pafs.S3FileSystem:
    kwargs: dict = {"region": settings.region}
    if settings.access_key and settings.secret_key:
        kwargs.update(access_key=settings.access_key, secret_key=settings.secret_key,
                      session_token=settings.session_token)
    if settings.endpoint_url:
        u = urlsplit(settings.endpoint_url)
        if u.scheme not in ("http", "https") or not u.netloc:
            raise StorageError(f"S3 endpoint {settings.endpoint_url!r} (AWS_ENDPOINT_URL[_S3]) must be "
                               "http(s)://host[:port]")
        kwargs.update(endpoint_override=u.netloc + u.path.rstrip("/"), scheme=u.scheme)
    return pafs.S3FileSystem(**kwargs)


@lru_cache(maxsize=8)
def _s3_client(settings: S3Settings):
    import boto3  # only for the conditional requests pyarrow does not make (boto3 comes with moto, a core dep)

    return boto3.client("s3", endpoint_url=settings.endpoint_url, region_name=settings.region,
                        aws_access_key_id=settings.access_key, aws_secret_access_key=settings.secret_key,
                        aws_session_token=settings.session_token)


_LOCAL = pafs.LocalFileSystem()


def resolve(loc: Location) -> tuple[pafs.FileSystem, str]:
    """(filesystem, path inside it) for a location. Local paths are made absolute; `s3://bucket/key` gives
    (S3FileSystem configured from the environment, 'bucket/key')."""
    loc = normalize(loc)
    if isinstance(loc, Path):
        return _LOCAL, os.path.abspath(loc)
    return _s3_filesystem(S3Settings.from_env()), loc.split("://", 1)[1]


def _s3_bucket_key(loc: str) -> tuple[str, str]:
    bucket, _, key = loc.split("://", 1)[1].partition("/")
    return bucket, key


# -- reading ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StoredFile:
    """A file found by `list_files`: its location, its path relative to the listed prefix, size and mtime."""

    loc: Path | str
    rel: str
    size: int
    mtime_ns: int | None


def _info(loc: Location) -> pafs.FileInfo:
    fs, path = resolve(loc)
    return fs.get_file_info(path)


def exists(loc: Location) -> bool:
    """Whether a file or a folder (on S3: any object under the prefix) is there."""
    return _info(loc).type != pafs.FileType.NotFound


def is_file(loc: Location) -> bool:
    return _info(loc).type == pafs.FileType.File


def is_dir(loc: Location) -> bool:
    """A folder (on S3: a prefix with at least one object under it)."""
    return _info(loc).type == pafs.FileType.Directory


def file_size(loc: Location) -> int:
    info = _info(loc)
    if info.type != pafs.FileType.File:
        raise FileNotFoundError(f"{loc}: no such file")
    return info.size


def _select(loc: Location, recursive: bool) -> list[pafs.FileInfo]:
    fs, path = resolve(loc)
    try:
        return fs.get_file_info(pafs.FileSelector(path, allow_not_found=True, recursive=recursive))
    except NotADirectoryError:
        return []


def _glob_regex(pattern: str) -> re.Pattern:
    """A glob on '/'-separated paths: `*`, `?` and `[...]` stay within one component, `**/` spans any number."""
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[" and (j := pattern.find("]", i + 1)) > i:
            out.append(fnmatch.translate(pattern[i:j + 1])[4:-3])  # fnmatch's class, without its (?s: ... )\Z
            i = j + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


def list_files(prefix: Location, pattern: str | None = None, recursive: bool = True) -> list[StoredFile]:
    """Files under the folder/prefix `prefix` (recursively by default), sorted by relative path; `pattern` is a
    glob on the relative path ('event_type=*/*/*.parquet'; `*` stays within one component, `**/` spans any).
    A missing prefix lists nothing."""
    base = normalize(prefix)
    _, root = resolve(base)
    match = _glob_regex(pattern).match if pattern is not None else None
    out = []
    for info in _select(base, recursive):
        if info.type != pafs.FileType.File:
            continue
        rel = info.path[len(root):].lstrip("/")
        if match is not None and not match(rel):
            continue
        out.append(StoredFile(join(base, rel), rel, info.size, info.mtime_ns))
    out.sort(key=lambda f: f.rel)
    return out


def list_dirs(prefix: Location) -> list[str]:
    """Names of the folders (S3: common prefixes) directly under `prefix`, sorted."""
    return sorted(PurePosixPath(i.path).name for i in _select(prefix, False) if i.type == pafs.FileType.Directory)


def open_input(loc: Location) -> pa.NativeFile:
    """A random-access input file for pyarrow / polars readers (`pq.ParquetFile(open_input(u))`)."""
    fs, path = resolve(loc)
    return fs.open_input_file(path)


def read_bytes(loc: Location) -> bytes:
    """A whole file's bytes; FileNotFoundError when it does not exist. On S3 one GetObject, whose body is one version
    of the object: pyarrow's stream takes the size first and the bytes after, so a read racing an overwrite got one
    version's body at the other's size (the larger cut, the smaller padded with NULs)."""
    if local_path(loc) is None:
        got = read_versioned(loc)
        if got is None:
            raise FileNotFoundError(f"{normalize(loc)}: no such object")
        return got[0]
    fs, path = resolve(loc)
    with fs.open_input_stream(path) as f:
        return f.read()


def read_text(loc: Location, encoding: str = "utf-8") -> str:
    return read_bytes(loc).decode(encoding)


def read_parquet(loc: Location, columns: list[str] | None = None) -> pa.Table:
    """One Parquet file as a table (pyarrow's multi-threaded reader, on any filesystem)."""
    fs, path = resolve(loc)
    return pq.read_table(path, columns=columns, filesystem=fs)


# -- writing ------------------------------------------------------------------------------------------------------


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def mkdirs(loc: Location) -> None:
    """mkdir -p; locally fsyncing the parent of every folder it creates, so the new entries survive a crash. A
    no-op on S3 (prefixes exist when an object is under them)."""
    path = local_path(loc)
    if path is None:
        return
    missing = []
    p = path
    while not p.exists():
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        try:
            d.mkdir()
        except FileExistsError:
            continue
        fsync_dir(d.parent)


def write_atomic(loc: Location, write: Callable[[BinaryIO], None]) -> int:
    """Create or replace `loc` atomically with what `write(f)` writes (see the module docstring); returns the
    size in bytes. Local parents are created."""
    path = local_path(loc)
    if path is None:
        buf = io.BytesIO()
        write(buf)
        return _put(loc, buf.getbuffer())
    mkdirs(path.parent)
    tmp = path.with_name(f"{TEMP_PREFIX}{uuid.uuid4().hex[:8]}-{path.name}")
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
            size = f.tell()
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)
    return size


def _put(loc: Location, data) -> int:
    # One write of content already complete in memory: the object appears at the PutObject (or, above pyarrow's
    # part size, the CompleteMultipartUpload) issued by close(); a failed part fails close() before completion.
    fs, path = resolve(loc)
    out = fs.open_output_stream(path)
    out.write(data)
    out.close()
    return len(data)


def write_bytes(loc: Location, data: bytes) -> int:
    """Atomic write of bytes; returns the size."""
    if local_path(loc) is None:
        return _put(loc, data)
    return write_atomic(loc, lambda f: f.write(data))


def write_text(loc: Location, text: str, encoding: str = "utf-8") -> int:
    return write_bytes(loc, text.encode(encoding))


def write_parquet(loc: Location, table: pa.Table, **kwargs) -> int:
    """Atomic write of a Parquet file (`pq.write_table` keyword arguments); returns the size in bytes."""
    return write_atomic(loc, lambda f: pq.write_table(table, f, **kwargs))


def delete(loc: Location, missing_ok: bool = True) -> None:
    """Delete one file."""
    loc = normalize(loc)
    if isinstance(loc, Path):
        try:
            loc.unlink()
        except FileNotFoundError:
            if not missing_ok:
                raise
        return
    # boto3, not pyarrow: pyarrow's delete_file writes an empty 'folder/' marker object when the folder would be
    # left empty, and an orphan sweep would leave those behind.
    if not missing_ok and not is_file(loc):
        raise FileNotFoundError(f"{loc}: no such object")
    bucket, key = _s3_bucket_key(loc)
    _s3_client(S3Settings.from_env()).delete_object(Bucket=bucket, Key=key)


def delete_tree(loc: Location) -> None:
    """Delete a folder / every object under a prefix, and the folder itself (nothing if it is missing)."""
    loc = normalize(loc)
    if isinstance(loc, Path):
        fs, path = resolve(loc)
        if fs.get_file_info(path).type == pafs.FileType.Directory:
            fs.delete_dir(path)
        return
    bucket, key = _s3_bucket_key(loc)
    client = _s3_client(S3Settings.from_env())
    prefix = f"{key}/" if key else ""
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        objects = [{"Key": o["Key"]} for o in page.get("Contents", [])]
        if objects:  # at most 1,000 per page: one DeleteObjects request each
            client.delete_objects(Bucket=bucket, Delete={"Objects": objects, "Quiet": True})


# -- conditional writes (compare-and-swap) ------------------------------------------------------------------------


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _client_error_code(e) -> str:
    return str(getattr(e, "response", {}).get("Error", {}).get("Code", ""))


_PRECONDITION = {"PreconditionFailed", "412", "ConditionalRequestConflict", "409"}


def read_versioned(loc: Location) -> tuple[bytes, str] | None:
    """(content, version) of a file, or None when it does not exist. The version is what the conditional writes
    below compare against."""
    path = local_path(loc)
    if path is None:
        from botocore.exceptions import ClientError

        bucket, key = _s3_bucket_key(normalize(loc))
        try:
            r = _s3_client(S3Settings.from_env()).get_object(Bucket=bucket, Key=key)
        except ClientError as e:
            if _client_error_code(e) in ("NoSuchKey", "404"):
                return None
            raise
        return r["Body"].read(), r["ETag"]
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    return data, _sha(data)


def create_if_absent(loc: Location, data: bytes) -> str | None:
    """Create `loc` with `data` only if nothing is there; the new version, or None if it already existed."""
    path = local_path(loc)
    if path is None:
        from botocore.exceptions import ClientError

        bucket, key = _s3_bucket_key(normalize(loc))
        try:
            r = _s3_client(S3Settings.from_env()).put_object(Bucket=bucket, Key=key, Body=data, IfNoneMatch="*")
        except ClientError as e:
            if _client_error_code(e) in _PRECONDITION:
                return None
            raise
        return r["ETag"]
    mkdirs(path.parent)
    tmp = path.with_name(f"{TEMP_PREFIX}{uuid.uuid4().hex[:8]}-{path.name}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)  # atomic, and fails if the name exists
        except FileExistsError:
            return None
    finally:
        tmp.unlink(missing_ok=True)
    fsync_dir(path.parent)
    return _sha(data)


class _LocalCas:
    """An flock on a sidecar file serialising the compare and the swap of one local file."""

    def __init__(self, path: Path):
        self.path = path.with_name(f".{path.name}.cas")

    def __enter__(self):
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)


def replace_if_version(loc: Location, data: bytes, version: str) -> str | None:
    """Replace `loc` with `data` only if its version is still `version`; the new version, or None if it changed
    (or is gone)."""
    path = local_path(loc)
    if path is None:
        from botocore.exceptions import ClientError

        bucket, key = _s3_bucket_key(normalize(loc))
        try:
            r = _s3_client(S3Settings.from_env()).put_object(Bucket=bucket, Key=key, Body=data, IfMatch=version)
        except ClientError as e:
            if _client_error_code(e) in _PRECONDITION | {"NoSuchKey", "404"}:
                return None
            raise
        return r["ETag"]
    mkdirs(path.parent)
    with _LocalCas(path):
        current = read_versioned(path)
        if current is None or current[1] != version:
            return None
        write_bytes(path, data)
    return _sha(data)


def delete_if_version(loc: Location, version: str) -> bool:
    """Delete `loc` only if its version is still `version`; whether it was deleted."""
    path = local_path(loc)
    if path is None:
        from botocore.exceptions import ClientError

        bucket, key = _s3_bucket_key(normalize(loc))
        try:
            _s3_client(S3Settings.from_env()).delete_object(Bucket=bucket, Key=key, IfMatch=version)
        except ClientError as e:
            if _client_error_code(e) in _PRECONDITION | {"NoSuchKey", "404"}:
                return False
            raise
        return True
    if not path.parent.exists():
        return False
    with _LocalCas(path):
        current = read_versioned(path)
        if current is None or current[1] != version:
            return False
        path.unlink()
    return True
