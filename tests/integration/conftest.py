"""Fixtures shared by the integration tests: one real gateway (vLLM engines, the MLflow registry, the session
broker) for every test that asks for `served`.

A vLLM engine takes ~30 s to start on 2 cores, so the gateway is started once, by the first test that needs it,
and stopped after the last one (`pytest_runtest_teardown` below: as soon as the next test does not use it, so
it never idles under the tests that follow, which may want the machine to themselves). The tests that use it are
run one after the other (`pytest_collection_modifyitems`). They are `exclusive` (tests/integration/test_serving.py
swaps versions under load), so all of them run in the same pytest process of ./infra/test.sh's second phase.

The registered versions: A = the default policy v0 (the checkpoint `rtrl demo --prepare` keeps in .rtrl/policy-v0,
else the session's bootstrap), which writes tool calls for the built-in tools (an agent client needs a policy
that calls tools); B = a random-init tiny checkpoint (the target of test_serving's hot swap). Arms control → alias
`control`, treatment → alias `champion`, both on A at first (one shared engine).
"""

from __future__ import annotations

import shutil
import uuid
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import free_port, stop_process

REPO = Path(__file__).resolve().parents[2]
SERVED = "served"


@dataclass
class Served:
    cfg: Any
    gateway: Any
    url: str
    registry: Any
    versions: list[str]   # [A: the default policy v0, B: a random-init tiny checkpoint]
    folders: list[Path]

    def __iter__(self):  # (cfg, gateway, url, registry, versions, folders), as test_serving unpacks it
        return iter((self.cfg, self.gateway, self.url, self.registry, self.versions, self.folders))


def default_policy(request, into: Path) -> Path:
    """The default policy v0 as a checkpoint folder: the one `rtrl demo --prepare` caches, else the session's
    bootstrap (which trains one when the cache is missing)."""
    cached = REPO / ".rtrl" / "policy-v0"
    if (cached / "config.json").exists():
        shutil.copytree(cached, into)
        return into
    from infra.config import load_config
    from registry.client import Registry

    state, _, _ = request.getfixturevalue("bootstrapped")
    registry = Registry.from_config(load_config(None, [f'state_dir="{state}"']))
    shutil.copytree(registry.local_path(registry.version_of("champion")), into)
    return into


class _Gateway:
    """The shared gateway: started on first use, stopped when no test that follows needs it."""

    def __init__(self):
        self.value: Served | None = None
        self._exit: ExitStack | None = None

    def get(self, request) -> Served:
        if self.value is None:
            self._exit = ExitStack()
            try:
                self.value = self._start(request, self._exit)
            except BaseException:
                self.stop()
                raise
        return self.value

    def stop(self) -> None:
        exit_stack, self._exit, self.value = self._exit, None, None
        if exit_stack is not None:
            exit_stack.close()

    @staticmethod
    def _start(request, exit_stack: ExitStack) -> Served:
        from registry.client import Registry
        from serving.server import url_of
        from serving.testing import make_tiny_checkpoint
        from tests.integration.gateway import running_gateway

        stack = request.getfixturevalue("stack")
        tmp = request.getfixturevalue("tmp_path_factory").mktemp("serving")
        model = f"serving-it-{uuid.uuid4().hex[:8]}"  # the session store is shared: a registered model of our own
        cfg = stack.cfg.model_copy(update={
            "mlflow": stack.cfg.mlflow.model_copy(update={"registered_model": model}),
            "serving": stack.cfg.serving.model_copy(update={"port": free_port(), "registry_poll_s": 0.5,
                                                            "max_tokens": 48, "drain_timeout_s": 60}),
            "sdk": stack.cfg.sdk.model_copy(update={"linger_ms": 5, "send_timeout_s": 5})})
        registry = Registry.from_config(cfg)
        folders = [default_policy(request, tmp / "ckpt0"), make_tiny_checkpoint(tmp / "ckpt1", seed=1)]
        versions = [registry.register(f, tags={"test": "serving"}) for f in folders]
        registry.set_alias("control", versions[0])
        registry.set_alias("champion", versions[0])
        gateway = exit_stack.enter_context(running_gateway(cfg))
        return Served(cfg, gateway, url_of(cfg.serving), registry, versions, folders)


_GATEWAY = _Gateway()


@pytest.fixture(scope="session")
def _shared_gateway():
    yield _GATEWAY
    _GATEWAY.stop()


@pytest.fixture(scope="module")   # module: a module's own fixtures may build on it; every module gets the one gateway
def served(request, _shared_gateway) -> Served:
    """The shared gateway (see the module docstring); it unpacks as (cfg, gateway, url, registry, versions,
    folders). A test that moves the aliases leaves them moved for the tests after it."""
    return _shared_gateway.get(request)


@dataclass
class S3Server:
    """A moto S3 server of the session: `endpoint` (http://127.0.0.1:PORT), `bucket` (created), `env` (the AWS_*
    variables that point `schemas.storage`, boto3 and subprocesses at it; already set in this process)."""

    endpoint: str
    bucket: str
    env: dict[str, str]

    def url(self, name: str = "") -> str:
        """A fresh `s3://` prefix of the bucket (a test's own: `name-<random>`)."""
        return f"s3://{self.bucket}/{name or 'test'}-{uuid.uuid4().hex[:8]}"

    def client(self):
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, region_name=self.env["AWS_DEFAULT_REGION"],
                            aws_access_key_id=self.env["AWS_ACCESS_KEY_ID"],
                            aws_secret_access_key=self.env["AWS_SECRET_ACCESS_KEY"])

    def keys(self, url: str) -> list[str]:
        """Every object key under an s3:// prefix."""
        bucket, _, prefix = url[len("s3://"):].partition("/")
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/")
        return sorted(o["Key"] for page in pages for o in page.get("Contents", []))


@pytest.fixture(scope="session")
def _s3_process(tmp_path_factory):
    """moto's S3 server process for the session (the stack runs the same), with its bucket made."""
    import subprocess
    import sys
    import time

    from infra.stack.process import port_accepts

    port = free_port()
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    moto = Path(sys.executable).parent / "moto_server"
    with open(log, "wb") as out:
        proc = subprocess.Popen([str(moto), "-H", "127.0.0.1", "-p", str(port)], stdout=out, stderr=subprocess.STDOUT)
    endpoint = f"http://127.0.0.1:{port}"
    env = {"AWS_ACCESS_KEY_ID": "rtrl-test", "AWS_SECRET_ACCESS_KEY": "rtrl-test", "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_ENDPOINT_URL_S3": endpoint}
    try:
        deadline = time.monotonic() + 60
        while not port_accepts("127.0.0.1", port):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"moto_server did not start: {log.read_text()[-2000:]}")
            time.sleep(0.1)
        server = S3Server(endpoint, "rtrl-test", env)
        server.client().create_bucket(Bucket=server.bucket)
        yield server
    finally:
        stop_process(proc, 10)


@pytest.fixture
def s3_server(_s3_process, monkeypatch):
    """A real S3 server for a test with data-plane state on S3: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
    AWS_DEFAULT_REGION and AWS_ENDPOINT_URL_S3 point `schemas.storage`, boto3 and the test's subprocesses at it
    while the test runs, and only then (other tests of the worker, e.g. a broker over its own store, never see
    them)."""
    for k, v in _s3_process.env.items():
        monkeypatch.setenv(k, v)
    return _s3_process


def _uses_gateway(item) -> bool:
    return SERVED in getattr(item, "fixturenames", ())


@pytest.hookimpl(trylast=True)   # after tests/conftest.py's ordering, which it keeps otherwise
def pytest_collection_modifyitems(config, items):
    """The tests that use the shared gateway, one after the other (where the first of them was)."""
    users = [i for i in items if _uses_gateway(i)]
    if len(users) < 2:
        return
    first = items.index(users[0])
    ids = {id(i) for i in users}
    rest = [i for i in items if id(i) not in ids]
    items[:] = rest[:first] + users + rest[first:]


def pytest_runtest_teardown(item, nextitem):
    if _GATEWAY.value is not None and _uses_gateway(item) and (nextitem is None or not _uses_gateway(nextitem)):
        _GATEWAY.stop()


@pytest.fixture(scope="session")
def postgres_server(tmp_path_factory):
    """A Postgres server of the session from the system packages (infra.stack.postgres.LocalPostgres), on a free
    loopback port; `create_database(name)` gives a test its own database URL. Deleted at the end."""
    from infra.stack.postgres import LocalPostgres

    pg = LocalPostgres(tmp_path_factory.mktemp("postgres"), free_port())
    pg.start()
    try:
        yield pg
    finally:
        pg.destroy()
