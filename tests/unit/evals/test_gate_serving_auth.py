"""The gate's chat requests on the running gateway (gate.tasks.via_serving) carry the admin key it stages with, and
trust
serving's configured certificate when serving speaks TLS; a private endpoint's client stays as it was."""

from __future__ import annotations

import ssl

import httpx
import pytest

from codetasks.policy import PLACEHOLDER_KEY
from evals import endpoints, gate_run
from infra.config import load_config
from serving.auth import ADMIN_KEY_ENV
from tests.integration.test_collector_trust import self_signed


@pytest.fixture
def cfg(tmp_path, monkeypatch):
    monkeypatch.delenv(ADMIN_KEY_ENV, raising=False)
    return load_config(None, [f'state_dir="{tmp_path / "state"}"'])


def test_chat_options_carry_the_admin_key_of_local_tools(cfg, monkeypatch):
    assert endpoints.serving_chat_options(cfg) == {"api_key": None, "verify": None}   # none yet: the placeholder
    cfg.state_path.mkdir(parents=True, exist_ok=True)
    (cfg.state_path / "admin.key").write_text("rtrl_from_file\n")
    assert endpoints.serving_chat_options(cfg) == {"api_key": "rtrl_from_file", "verify": None}
    monkeypatch.setenv(ADMIN_KEY_ENV, "rtrl_from_env")
    assert endpoints.serving_chat_options(cfg)["api_key"] == "rtrl_from_env"


def test_chat_options_trust_serving_certificate_under_tls(cfg, tmp_path):
    cert, key = self_signed(tmp_path)
    tls = cfg.model_copy(update={"serving": cfg.serving.model_copy(update={"tls_cert_file": str(cert),
                                                                          "tls_key_file": str(key)})})
    ctx = endpoints.serving_chat_options(tls)["verify"]
    assert isinstance(ctx, ssl.SSLContext)
    assert [c["subject"] for c in ctx.get_ca_certs()] == [((("commonName", "127.0.0.1"),),)]
    assert endpoints.staged_model(tls, "7")[0].startswith("https://")


def test_the_arms_on_serving_send_the_admin_key(cfg, monkeypatch):
    monkeypatch.setenv(ADMIN_KEY_ENV, "rtrl_admin")
    staged, seen = [], []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.url.path, request.headers.get("authorization")))
        return httpx.Response(200, json={"object": "list", "data": []})

    real = gate_run.arm_policy

    def arm_policy(url, model, **options):
        assert options["verify"] is None                            # plain HTTP here: the default verification
        policy = real(url, model, **options)
        policy.client = policy.client.with_options(http_client=httpx.Client(transport=httpx.MockTransport(handler)))
        return policy

    monkeypatch.setattr(endpoints, "stage", lambda cfg, v, cores="": staged.append(v) or 0.0)
    monkeypatch.setattr(gate_run, "arm_policy", arm_policy)
    monkeypatch.setattr("evals.harness.run_suite", lambda tasks, endpoint, **kw: [])
    timings: dict = {}
    assert gate_run.run_arms_on_serving(cfg, {"candidate": "8", "champion": "7"}, [], cfg.state_path, 1, 1, timings,
                                        lambda m: None) == []
    assert staged == ["8", "7"]
    assert seen == [("/v1/models", "Bearer rtrl_admin")] * 2


def test_a_private_endpoint_client_keeps_the_placeholder():
    assert gate_run.arm_policy("http://127.0.0.1:9/v1", "").client.api_key == PLACEHOLDER_KEY
