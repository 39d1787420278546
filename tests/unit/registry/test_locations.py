"""Storage URLs where the registry and the data-plane callers take a configured location: `path_or_default` keeps
an object-store URL a URL (never the local folder `s3:/b/k`) and local paths exactly as before; the MLflow artifact
root gives experiments a file:// or s3:// location; MLflow's S3 endpoint follows the AWS_* one; the registry's
promotion lock follows `mlflow.promotion_lock` or an object-store artifact root; replay, the dashboard's lag and
`rtrl replay`'s archive check take URLs."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest

from infra.config import load_config
from registry.client import Registry, artifact_location, use_s3_endpoint_from_aws_env
from schemas.storage import StorageError


@pytest.fixture
def cfg(tmp_path):
    return load_config(None, [f'state_dir="{tmp_path / "state"}"'])


def test_path_or_default_keeps_urls_and_local_paths_as_before(cfg, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cfg.path_or_default("", "archive") == cfg.state_path / "archive"
    assert cfg.path_or_default("rel/dir", "archive") == tmp_path / "rel" / "dir"
    assert cfg.path_or_default("~/x", "archive") == tmp_path / "home" / "x"
    assert cfg.path_or_default("/abs/../abs/y", "archive") == Path("/abs/y")
    assert cfg.path_or_default("file:///srv/a%20b", "archive") == Path("/srv/a b")
    assert cfg.path_or_default("s3://bucket//archive/", "archive") == "s3://bucket/archive"
    with pytest.raises(StorageError, match="went through pathlib.Path"):
        cfg.path_or_default("s3:/bucket/archive", "archive")     # a mangled URL is refused, not made a folder
    with pytest.raises(StorageError, match="unsupported storage URL scheme"):
        cfg.path_or_default("gs://bucket/archive", "archive")


def test_experiments_get_a_file_uri_or_the_object_store_url(tmp_path):
    assert artifact_location(tmp_path / "a", "rtrl-checkpoints") == (tmp_path / "a" / "rtrl-checkpoints").as_uri()
    assert artifact_location("s3://b/mlflow/", "rtrl-checkpoints") == "s3://b/mlflow/rtrl-checkpoints"


@pytest.mark.parametrize("env, expected", [
    ({"AWS_ENDPOINT_URL_S3": "http://127.0.0.1:9000"}, "http://127.0.0.1:9000"),
    ({"AWS_ENDPOINT_URL": "http://minio:9000"}, "http://minio:9000"),
    ({"AWS_ENDPOINT_URL_S3": "http://s3only:1", "AWS_ENDPOINT_URL": "http://all:2"}, "http://s3only:1"),
    ({"MLFLOW_S3_ENDPOINT_URL": "http://explicit:3", "AWS_ENDPOINT_URL_S3": "http://other:4"}, "http://explicit:3"),
    ({}, None),
])
def test_mlflow_s3_endpoint_follows_the_aws_endpoint_unless_set(env, expected):
    env = dict(env)
    assert use_s3_endpoint_from_aws_env(env) == expected
    assert env.get("MLFLOW_S3_ENDPOINT_URL") == expected


def _registry(tmp_path, monkeypatch, *overrides) -> Registry:
    for k in ("MLFLOW_S3_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(k, raising=False)
    cfg = load_config(None, [f'state_dir="{tmp_path / "state"}"', *overrides])
    return Registry.from_config(cfg)


def test_the_registry_takes_its_artifact_root_and_promotion_lock_from_config(tmp_path, monkeypatch):
    local = _registry(tmp_path, monkeypatch)
    assert local.artifact_root == tmp_path / "state" / "mlflow-artifacts" and local.promotion_lock is None
    remote = _registry(tmp_path, monkeypatch, 'mlflow.artifact_root="s3://b/mlflow"')
    assert remote.artifact_root == "s3://b/mlflow"
    assert remote.promotion_lock == "s3://b/mlflow/_rtrl-locks/promotion-rtrl-policy.lease"
    assert not (tmp_path / "state" / "mlflow-artifacts").exists()
    lease = _registry(tmp_path, monkeypatch, 'mlflow.promotion_lock="s3://locks/rtrl/promotion.lease"')
    assert lease.promotion_lock == "s3://locks/rtrl/promotion.lease"
    flock = _registry(tmp_path, monkeypatch, f'mlflow.promotion_lock="{tmp_path / "shared.lock"}"')
    assert flock.promotion_lock == tmp_path / "shared.lock"


def test_with_an_mlflow_server_the_server_keeps_the_artifacts_and_a_postgres_lock_is_kept_as_a_url(tmp_path,
                                                                                                   monkeypatch):
    server = _registry(tmp_path, monkeypatch, 'mlflow.tracking_uri="http://mlflow:5000"')
    assert server.artifact_root is None and server.promotion_lock is None
    pg = _registry(tmp_path, monkeypatch, 'mlflow.tracking_uri="http://mlflow:5000"',
                   'mlflow.promotion_lock="postgresql://rtrl@db:5432/mlflow"')
    assert pg.promotion_lock == "postgresql://rtrl@db:5432/mlflow"
    own = _registry(tmp_path, monkeypatch, 'mlflow.tracking_uri="http://mlflow:5000"',
                    'mlflow.artifact_root="s3://b/mlflow"')
    assert own.artifact_root == "s3://b/mlflow" and own.promotion_lock.startswith("s3://b/mlflow/_rtrl-locks/")


def test_a_promotion_against_a_server_without_a_shared_lock_is_refused_with_what_to_set(tmp_path, monkeypatch):
    from registry.promotion import PromotionRefused, lock_for, lock_path_for

    server = _registry(tmp_path, monkeypatch, 'mlflow.tracking_uri="http://mlflow:5000"')
    assert lock_path_for(server.tracking_uri, tmp_path) is None
    with pytest.raises(PromotionRefused, match="mlflow.promotion_lock"):
        lock_for(server, lock_path_for(server.tracking_uri, tmp_path))
    local = _registry(tmp_path, monkeypatch)
    assert lock_for(local, lock_path_for(local.tracking_uri, tmp_path)) == tmp_path / "state" / "mlflow.db.promotion.lock"


@pytest.mark.parametrize("settings,error", [
    (['mlflow.server.host="0.0.0.0"'], "basic-auth"),
    (['mlflow.server.app_name="ldap"'], "basic-auth"),
])
def test_the_mlflow_server_refuses_to_bind_beyond_loopback_without_auth(tmp_path, settings, error):
    from infra.config import ConfigError

    with pytest.raises(ConfigError, match=error):
        load_config(None, [f'state_dir="{tmp_path}"', *settings])
    cfg = load_config(None, [f'state_dir="{tmp_path}"', 'mlflow.server.host="0.0.0.0"',
                             'mlflow.server.app_name="basic-auth"'])
    from infra.stack.mlflow_server import MlflowServer

    argv = MlflowServer(cfg).argv()
    assert argv[argv.index("--app-name") + 1] == "basic-auth" and "--serve-artifacts" in argv


def test_the_mlflow_server_names_the_installed_postgres_driver(tmp_path):
    from infra.stack.mlflow_server import MlflowServer

    cfg = load_config(None, [f'state_dir="{tmp_path}"', 'mlflow.server.backend_store_uri="postgresql://u@h:5432/m"',
                             'mlflow.server.artifacts_destination="s3://b/mlflow"'])
    argv = MlflowServer(cfg).argv()
    assert argv[argv.index("--backend-store-uri") + 1] == "postgresql+psycopg2://u@h:5432/m"
    assert argv[argv.index("--artifacts-destination") + 1] == "s3://b/mlflow"


def test_replay_output_may_be_an_object_store_url(cfg):
    from infra.orchestrator.replay import output_for

    t0, t1 = datetime(2026, 11, 1, tzinfo=timezone.utc), datetime(2026, 11, 2, tzinfo=timezone.utc)
    assert output_for(cfg, t0, t1, "s3://b/replays//r1/") == "s3://b/replays/r1"


def test_rtrl_replay_names_a_missing_local_archive(tmp_path):
    from infra.commands.replay import archive_problem

    t0, t1 = datetime(2026, 11, 1, tzinfo=timezone.utc), datetime(2026, 11, 2, tzinfo=timezone.utc)
    assert archive_problem(str(tmp_path / "none"), t0, t1).startswith(f"no archive at {tmp_path / 'none'}: build")


def test_consumer_lag_reads_manifest_names_under_any_root(tmp_path):
    from infra.dashboard.data import consumer_lag

    mdir = tmp_path / "archive" / "_manifests" / "c1"
    mdir.mkdir(parents=True)
    for name in ("telemetry.edits-0-0-9.json", "telemetry.edits-0-10-19.json", "telemetry.tools-1-0-4.json",
                 ".tmp-ab12cd34-telemetry.edits-0-20-99.json"):   # an interrupted write is not a commit
        (mdir / name).write_text("{}")
    cycles = [{"status": "done", "cycle_id": "k1", "cluster_id": "c1",
               "stop": {"telemetry.edits/0": 15, "telemetry.tools/1": 5}}]
    assert consumer_lag(tmp_path / "archive", cycles) == {
        "cycle_id": "k1", "total": 5, "partitions": {"telemetry.edits/0": 5, "telemetry.tools/1": 0}}
    no_cluster = [dict(cycles[0], cluster_id=None)]
    assert consumer_lag(tmp_path / "archive", no_cluster)["total"] == 5
    assert consumer_lag(tmp_path / "missing", cycles) is None
