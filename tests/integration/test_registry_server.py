"""The registry as a service (docs/policy.md): `rtrl mlflow-server` over Postgres (system packages) and proxied S3
artifacts (moto). Clients with no S3 credentials register, alias, tag and download versions through it; the files
land in S3; two promoters in separate processes race through the Postgres advisory lock and exactly one wins."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from infra.config import load_config
from infra.stack.mlflow_server import MlflowServer
from registry.client import Registry
from tests.conftest import free_port

pytestmark = pytest.mark.integration
AWS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL",
       "MLFLOW_S3_ENDPOINT_URL")


@pytest.fixture(scope="module")
def server(postgres_server, _s3_process, tmp_path_factory):
    """An MLflow server on the session's Postgres (a database of its own) and S3 (a prefix of its own); the
    overrides that point a client at it; the S3 prefix. Only the server's process gets the S3 credentials."""
    name = f"mlflow_{uuid.uuid4().hex[:8]}"
    db = postgres_server.create_database(name)
    dest = _s3_process.url("mlflow")
    state = tmp_path_factory.mktemp("mlflow-server")
    port = free_port()
    server_cfg = load_config(None, [f'state_dir="{state}"', f'mlflow.server.backend_store_uri="{db}"',
                                    f'mlflow.server.artifacts_destination="{dest}"', f"mlflow.server.port={port}"])
    srv = MlflowServer(server_cfg)
    saved = {k: os.environ.get(k) for k in _s3_process.env}
    os.environ.update(_s3_process.env)         # the server's environment, not the clients'
    try:
        srv.start()
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
    client = [f'state_dir="{state}/client"', f'mlflow.tracking_uri="{srv.url}"', f'mlflow.promotion_lock="{db}"']
    try:
        yield srv, client, dest, _s3_process
    finally:
        srv.proc.stop()


@pytest.fixture
def no_s3_credentials(monkeypatch):
    for k in AWS:
        monkeypatch.delenv(k, raising=False)


def _checkpoint(folder: Path, marker: str) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "llama", "marker": marker}))
    (folder / "model.safetensors").write_bytes(os.urandom(2048))
    return folder


def test_a_client_without_s3_credentials_registers_aliases_tags_and_downloads_through_the_server(
        server, tmp_path, no_s3_credentials):
    srv, client, dest, s3 = server
    registry = Registry.from_config(load_config(None, [*client, 'mlflow.registered_model="roundtrip"']))
    assert registry.artifact_root is None, "the server decides where artifacts go"
    v = registry.register(_checkpoint(tmp_path / "ckpt", "a"), {"origin": "test"})
    registry.set_alias("champion", v)
    registry.set_version_tags(v, {"gate.decision": "promote"})
    assert registry.version_of("champion") == v
    assert registry.info(v).tags["gate.decision"] == "promote" and registry.info(v).tags["origin"] == "test"
    version, local = registry.resolve("champion")
    assert version == v
    assert json.loads((local / "config.json").read_text())["marker"] == "a"
    assert (local / "model.safetensors").read_bytes() == (tmp_path / "ckpt" / "model.safetensors").read_bytes()
    run = registry.client.get_run(registry.info(v).run_id)
    assert run.info.artifact_uri.startswith("mlflow-artifacts:/"), "proxied: the client never sees the S3 URL"
    keys = s3.keys(dest)
    assert any(k.endswith("/checkpoint/model.safetensors") and run.info.run_id in k for k in keys), keys


def _promoter(client: list[str], model: str, version: str, start_at: float) -> subprocess.Popen:
    """`rtrl promote VERSION` in its own process, released at `start_at` (both racers at the same moment)."""
    from infra.argv import rtrl_argv

    argv = rtrl_argv("promote", version, overrides=[*client, f'mlflow.registered_model="{model}"'])
    gate = f"import os,sys,time; time.sleep(max(0.0, {start_at} - time.time())); os.execv(sys.argv[1], sys.argv[1:])"
    env = {k: v for k, v in os.environ.items() if k not in AWS}
    return subprocess.Popen([sys.executable, "-c", gate, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)


def test_two_promoters_in_separate_processes_race_and_exactly_one_moves_champion(server, tmp_path,
                                                                                   no_s3_credentials):
    srv, client, _, _ = server
    model = "race"
    registry = Registry.from_config(load_config(None, [*client, f'mlflow.registered_model="{model}"']))
    champion = registry.register(_checkpoint(tmp_path / "c", "champion"))
    registry.set_alias("champion", champion)
    racers = [registry.register(_checkpoint(tmp_path / f"r{i}", f"racer{i}")) for i in range(2)]
    for v in racers:       # both gated against the same champion: only one swap can hold
        registry.set_version_tags(v, {"gate.decision": "promote", "gate.champion_version": champion,
                                      "gate.run_id": "race"})
    start_at = time.time() + 4.0
    procs = [_promoter(client, model, v, start_at) for v in racers]
    results = [(p.wait(timeout=120), p.stdout.read(), p.stderr.read()) for p in procs]
    codes = [c for c, _, _ in results]
    assert sorted(codes) == [0, 3], results
    winner, loser = (racers[0], racers[1]) if codes[0] == 0 else (racers[1], racers[0])
    assert registry.version_of("champion") == winner and registry.version_of("previous") == champion
    won, lost = registry.info(winner).tags, registry.info(loser).tags
    assert won["promotion.previous_version"] == champion and "promotion.refused_time" not in won
    assert "promotion.time" not in lost
    assert f"it points to {winner}" in lost["promotion.refused_reason"] and lost["promotion.refused_by"]
    loser_err = results[codes.index(3)][2]
    assert "moved since the eval" in loser_err
