"""Serving's listener as deployed (uvicorn, TLS, keys), over fake engines (no vLLM: cheap): a TLS handshake with a
self-signed certificate made here, the official `openai` client over HTTPS with a key, the health probe the CLI
and the orchestrator use, and the gate's admin calls with the local admin key `rtrl serve` makes."""

from __future__ import annotations

import socket
import ssl
import threading

import httpx
import pytest

from infra.config import load_config
from schemas.api_keys import KeyStore
from serving.auth import ADMIN_KEY_ENV
from tests.conftest import free_port
from tests.integration.test_collector_trust import self_signed
from tests.unit.serving.fakes import FakeLoader, FakeRegistry
from tests.waiting import wait_for

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """(cfg, url, client key, certificate): a gateway over fake engines serving HTTPS on loopback, keys required."""
    from serving.server import build_gateway, ensure_local_admin_key, keys_path, make_server, url_of

    tmp = tmp_path_factory.mktemp("serving-tls")
    cert, key = self_signed(tmp)
    cfg = load_config(None, [f'state_dir="{tmp / "state"}"', f"serving.port={free_port()}", "serving.telemetry=false",
                             "serving.require_key=true", f'serving.tls_cert_file="{cert}"',
                             f'serving.tls_key_file="{key}"', "serving.registry_poll_s=3600"])
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv(ADMIN_KEY_ENV, raising=False)
        assert ensure_local_admin_key(cfg)                   # what `rtrl serve` does at start
    client_key = KeyStore(keys_path(cfg)).create("web", org="acme", role="client")
    gateway = build_gateway(cfg, registry=FakeRegistry({"control": "1", "champion": "1"}), loader=FakeLoader())
    server = make_server(cfg, gateway=gateway, log_level="warning")
    thread = threading.Thread(target=server.run, name="serving-tls", daemon=True)
    thread.start()
    wait_for(lambda: server.started or not thread.is_alive(), 60, "serving starting", interval_s=0.05)
    assert server.started, "serving did not start"
    try:
        yield cfg, url_of(cfg.serving), client_key, cert
    finally:
        server.should_exit = True
        thread.join(60)


def openai_client(url: str, key: str, cert):
    import openai

    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=30,
                         http_client=httpx.Client(verify=ssl.create_default_context(cafile=str(cert))))


def test_tls_handshake_with_a_self_signed_certificate_made_in_the_test(served):
    cfg, url, _, cert = served
    assert url == f"https://127.0.0.1:{cfg.serving.port}"
    ctx = ssl.create_default_context(cafile=str(cert))
    with socket.create_connection(("127.0.0.1", cfg.serving.port), timeout=10) as raw, \
            ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
        assert s.version() in ("TLSv1.2", "TLSv1.3")
        assert s.getpeercert()["subject"] == ((("commonName", "127.0.0.1"),),)
    with pytest.raises(httpx.HTTPError):                     # plain HTTP is not served on the TLS port
        httpx.get(f"http://127.0.0.1:{cfg.serving.port}/health", timeout=5)


def test_the_openai_client_chats_over_https_with_a_key_and_is_refused_without_one(served):
    import openai

    _, url, client_key, cert = served
    # closed clients: an idle TLS connection left open holds the server's shutdown for the TLS close timeout (30 s)
    with openai_client(url, client_key, cert) as client:
        r = client.chat.completions.create(model="rtrl-policy", user="u-1",
                                           messages=[{"role": "user", "content": "Raise RETRIES in app/util.py"}])
        assert r.choices[0].message.content == "answer from v1" and r.model_extra["policy_version"] == "1"
        assert [m.id for m in client.models.list().data] == ["rtrl-policy"]
    with openai_client(url, "unused", cert) as refused, pytest.raises(openai.AuthenticationError):
        refused.chat.completions.create(model="rtrl-policy", user="u-1", messages=[{"role": "user", "content": "hi"}])


def test_health_probes_trust_the_configured_certificate(served):
    from infra.orchestrator.steps import serving_status
    from serving.server import health

    cfg, *_ = served
    status, body = health(cfg.serving)
    assert status == 200 and body["status"] == "ok"
    assert serving_status(cfg)["status"] == "ok"


def test_the_gate_stages_with_the_local_admin_key_and_a_client_key_is_refused(served, monkeypatch):
    from evals.endpoints import EndpointError, stage, unstage

    cfg, _, client_key, _ = served
    monkeypatch.delenv(ADMIN_KEY_ENV, raising=False)
    assert stage(cfg, "5") >= 0                              # <state_dir>/admin.key, over HTTPS
    assert unstage(cfg, "5") is True
    monkeypatch.setenv(ADMIN_KEY_ENV, client_key)
    with pytest.raises(EndpointError, match="HTTP 403"):
        stage(cfg, "5")
