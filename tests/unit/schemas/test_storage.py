"""schemas/storage.py on local paths (fast, no server): locations and URLs, atomic writes, listing, conditional
writes. The same operations against a real S3 server: tests/integration/test_archive_s3.py."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from schemas import storage
from schemas.storage import S3Settings, StorageError

# -- locations ----------------------------------------------------------------------------------------------------


def test_local_paths_and_file_urls_are_paths_and_s3_urls_are_canonical_strings(tmp_path):
    assert storage.normalize(tmp_path) == tmp_path
    assert storage.normalize(str(tmp_path)) == tmp_path
    assert storage.normalize(f"file://{tmp_path}") == tmp_path
    assert storage.normalize("file://localhost/x/y") == Path("/x/y")
    assert storage.normalize("s3://bkt//a/b/") == "s3://bkt/a/b"
    assert storage.normalize("S3://bkt") == "s3://bkt"
    assert storage.scheme("s3://bkt/a") == "s3" and storage.scheme(tmp_path) == "file" and storage.scheme("a/b") == "file"
    assert storage.is_remote("s3://bkt/a") and not storage.is_remote(str(tmp_path))
    assert storage.local_path("s3://bkt/a") is None and storage.local_path(str(tmp_path)) == tmp_path


@pytest.mark.parametrize("url", ["gs://bkt/x", "hdfs://nn/x", "http://host/x", "memory://x"])
def test_an_unsupported_scheme_is_a_clear_error(url):
    with pytest.raises(StorageError, match="unsupported storage URL scheme"):
        storage.normalize(url)
    with pytest.raises(StorageError):
        storage.resolve(url)


def test_a_url_mangled_by_pathlib_is_refused_not_written_to_a_folder_called_s3():
    with pytest.raises(StorageError, match="pathlib"):
        storage.normalize(Path("s3://bkt/archive"))  # Path() makes it 's3:/bkt/archive'
    with pytest.raises(StorageError, match="s3://bucket/key"):
        storage.normalize("s3:/bkt/archive")


def test_malformed_urls_are_refused():
    with pytest.raises(StorageError, match="no bucket"):
        storage.normalize("s3:///key")
    with pytest.raises(StorageError, match="host"):
        storage.normalize("file://otherhost/x")


def test_join_parent_name_and_relative_keep_the_kind_of_the_base(tmp_path):
    assert storage.join(tmp_path, "a", "b.json") == tmp_path / "a" / "b.json"
    assert storage.join(str(tmp_path), "a/b.json") == tmp_path / "a" / "b.json"
    assert storage.join("s3://bkt/root/", "a", "/b/c.json") == "s3://bkt/root/a/b/c.json"
    assert storage.join("s3://bkt", "a/") == "s3://bkt/a"
    assert storage.parent("s3://bkt/root/a.json") == "s3://bkt/root"
    assert storage.name("s3://bkt/root/a.json") == "a.json"
    assert storage.relative_to("s3://bkt/root/a/b.json", "s3://bkt/root") == "a/b.json"
    assert storage.relative_to(tmp_path / "a" / "b", tmp_path) == "a/b"
    with pytest.raises(ValueError):
        storage.relative_to("s3://bkt/other/a", "s3://bkt/root")
    assert storage.is_temp("s3://bkt/r/.tmp-1234-x.parquet") and not storage.is_temp(tmp_path / "x.parquet")


def test_resolve_gives_the_local_filesystem_and_an_absolute_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fs, path = storage.resolve("rel/x.parquet")
    assert isinstance(fs, pafs.LocalFileSystem) and path == str(tmp_path / "rel" / "x.parquet")


def test_s3_settings_come_from_the_environment_the_aws_way():
    s = S3Settings.from_env({"AWS_ACCESS_KEY_ID": "id", "AWS_SECRET_ACCESS_KEY": "sekrit",
                             "AWS_ENDPOINT_URL": "http://generic:1", "AWS_ENDPOINT_URL_S3": "http://s3only:2",
                             "AWS_DEFAULT_REGION": "eu-west-1", "AWS_REGION": "eu-central-1"})
    assert (s.access_key, s.secret_key, s.endpoint_url, s.region) == ("id", "sekrit", "http://s3only:2",
                                                                      "eu-central-1")
    assert "sekrit" not in repr(s)
    assert S3Settings.from_env({"AWS_ENDPOINT_URL": "http://m:5000"}).region == "us-east-1"  # moto needs one
    assert S3Settings.from_env({}) == S3Settings(None, None, None, None, None)  # AWS: the default chain


def test_resolve_s3_configures_pyarrow_from_the_environment(monkeypatch):
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)   # it would win over AWS_ENDPOINT_URL
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "id")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_REGION", "eu-west-3")
    fs, path = storage.resolve("s3://bkt/a/b.parquet")
    assert isinstance(fs, pafs.S3FileSystem) and path == "bkt/a/b.parquet" and fs.region == "eu-west-3"
    monkeypatch.setenv("AWS_ENDPOINT_URL", "ftp://nope")
    with pytest.raises(StorageError, match="http"):
        storage.resolve("s3://bkt/a")


# -- reading and writing ------------------------------------------------------------------------------------------


def test_write_read_list_and_delete_locally(tmp_path):
    root = tmp_path / "root"
    assert not storage.exists(root) and storage.list_files(root) == [] and storage.list_dirs(root) == []
    assert storage.write_text(storage.join(root, "a/x.json"), "héllo") == len("héllo".encode())
    storage.write_bytes(storage.join(root, "a/b/y.bin"), b"\x00\x01")
    table = pa.table({"x": [1, 2, 3], "s": ["a", "b", "c"]})
    size = storage.write_parquet(storage.join(root, "t.parquet"), table, compression="zstd")
    assert size == os.path.getsize(root / "t.parquet") == storage.file_size(root / "t.parquet")
    assert storage.read_text(root / "a" / "x.json") == "héllo" and storage.read_bytes(root / "a/b/y.bin") == b"\x00\x01"
    assert storage.read_parquet(root / "t.parquet").equals(table)
    assert storage.read_parquet(str(root / "t.parquet"), ["x"]).column_names == ["x"]
    assert pq.ParquetFile(storage.open_input(root / "t.parquet")).read().equals(table)
    assert storage.exists(root) and storage.is_dir(root / "a") and storage.is_file(root / "t.parquet")
    assert not storage.is_file(root / "a")

    listed = storage.list_files(root)
    assert [f.rel for f in listed] == ["a/b/y.bin", "a/x.json", "t.parquet"]
    assert listed[0].loc == root / "a" / "b" / "y.bin" and listed[0].size == 2
    assert [f.rel for f in storage.list_files(root, "*.json")] == []  # the pattern is on the relative path
    assert [f.rel for f in storage.list_files(root, "a/*.json")] == ["a/x.json"]
    assert [f.rel for f in storage.list_files(root, "**/*.json")] == ["a/x.json"]
    assert [f.rel for f in storage.list_files(root, "**/[xy].*")] == ["a/b/y.bin", "a/x.json"]
    assert [f.rel for f in storage.list_files(root, recursive=False)] == ["t.parquet"]
    assert storage.list_dirs(root) == ["a"] and storage.list_dirs(root / "a") == ["b"]
    assert storage.list_files(root / "t.parquet") == []  # a file is not a prefix

    storage.delete(root / "a" / "x.json")
    storage.delete(root / "a" / "x.json")  # missing_ok by default
    with pytest.raises(FileNotFoundError):
        storage.delete(root / "a" / "x.json", missing_ok=False)
    storage.delete_tree(root / "a")
    storage.delete_tree(root / "nothing")
    assert [f.rel for f in storage.list_files(root)] == ["t.parquet"]


def test_mkdirs_is_mkdir_p_locally(tmp_path):
    storage.mkdirs(tmp_path / "a" / "b" / "c")
    storage.mkdirs(str(tmp_path / "a" / "b" / "c"))
    assert (tmp_path / "a" / "b" / "c").is_dir()
    storage.mkdirs("s3://bkt/anything")  # a no-op, no request made


class Boom(Exception):
    pass


def test_an_interrupted_atomic_write_leaves_the_old_content_and_no_temp_file(tmp_path):
    path = tmp_path / "d" / "f.json"
    storage.write_text(path, "old")

    def half(f):
        f.write(b"new, half")
        raise Boom

    with pytest.raises(Boom):
        storage.write_atomic(path, half)
    assert path.read_text() == "old"
    assert [p.name for p in path.parent.iterdir()] == ["f.json"]
    storage.write_text(path, "new")
    assert path.read_text() == "new" and [p.name for p in path.parent.iterdir()] == ["f.json"]


def test_an_object_store_write_is_built_in_memory_and_uploaded_only_when_complete(monkeypatch):
    uploads = []
    monkeypatch.setattr(storage, "_put", lambda loc, data: uploads.append((loc, bytes(data))) or len(data))

    def half(f):
        f.write(b"half")
        raise Boom

    with pytest.raises(Boom):
        storage.write_atomic("s3://bkt/r/f.parquet", half)
    assert uploads == []
    assert storage.write_atomic("s3://bkt/r/f.bin", lambda f: f.write(b"whole")) == 5
    assert uploads == [("s3://bkt/r/f.bin", b"whole")]
    table = pa.table({"x": [1]})
    storage.write_parquet("s3://bkt/r/t.parquet", table)
    assert pq.read_table(pa.BufferReader(uploads[-1][1])).equals(table)


# -- conditional writes -------------------------------------------------------------------------------------------


def test_local_conditional_writes_compare_and_swap(tmp_path):
    path = tmp_path / "lease" / "holder.json"
    assert storage.read_versioned(path) is None
    v1 = storage.create_if_absent(path, b"one")
    assert v1 and storage.create_if_absent(path, b"two") is None
    assert storage.read_versioned(path) == (b"one", v1)
    assert storage.replace_if_version(path, b"two", "stale") is None
    v2 = storage.replace_if_version(path, b"two", v1)
    assert v2 and v2 != v1 and path.read_bytes() == b"two"
    assert storage.replace_if_version(path, b"three", v1) is None  # v1 is gone
    assert not storage.delete_if_version(path, v1)
    assert storage.delete_if_version(path, v2) and not path.exists()
    assert storage.replace_if_version(path, b"x", v2) is None and not storage.delete_if_version(path, v2)
    assert not [p for p in path.parent.iterdir() if storage.is_temp(p)]
