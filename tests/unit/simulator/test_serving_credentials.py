"""rtrl's own clients of serving carry credentials: OpenAIPolicy sends the key it is given (the placeholder
otherwise) and trusts what `verify` says; the simulator and the chaos users take $RTRL_SERVING_KEY, else make a
gateway key of client rtrl-simulator where serving requires one, and trust serving's certificate under TLS."""

from __future__ import annotations

import argparse
import ssl
import stat

import httpx
import pytest

from codetasks.policy import PLACEHOLDER_KEY, OpenAIPolicy, PolicyError
from infra.commands import simulate
from infra.config import load_config
from schemas.api_keys import KeyStore
from serving.server import keys_path
from tests.integration.test_collector_trust import self_signed


def recording(seen: list, status: int = 200) -> httpx.Client:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("authorization"))
        if status != 200:
            return httpx.Response(status, json={"error": {"message": "no", "type": "authentication_error",
                                                          "param": None, "code": "invalid_api_key"}})
        return httpx.Response(200, json={"object": "list", "data": [
            {"id": "rtrl-policy", "object": "model", "created": 0, "owned_by": "rtrl"}]})

    return httpx.Client(transport=httpx.MockTransport(handler))


def test_the_policy_sends_the_key_it_is_given_as_a_bearer_token():
    seen: list = []
    OpenAIPolicy("http://serving.test/v1", api_key="rtrl_abc", http_client=recording(seen)).check()
    assert seen == ["Bearer rtrl_abc"]


@pytest.mark.parametrize("key", [None, ""])
def test_without_a_key_the_policy_sends_the_placeholder_as_before(key):
    seen: list = []
    OpenAIPolicy("http://serving.test/v1", http_client=recording(seen)).check()
    OpenAIPolicy("http://serving.test/v1", api_key=key, http_client=recording(seen)).check()
    assert seen == [f"Bearer {PLACEHOLDER_KEY}"] * 2 and not PLACEHOLDER_KEY.startswith("rtrl_")


def test_a_refused_key_is_a_policy_error_with_the_status():
    with pytest.raises(PolicyError) as e:
        OpenAIPolicy("http://serving.test/v1", api_key="rtrl_bad", http_client=recording([], 401)).check()
    assert e.value.status == 401


def test_verify_builds_the_client_with_it_and_none_keeps_the_default(monkeypatch):
    import openai

    made: list = []
    real = openai.DefaultHttpxClient
    monkeypatch.setattr(openai, "DefaultHttpxClient", lambda **kw: made.append(kw) or real(**kw))
    ctx = ssl.create_default_context()
    OpenAIPolicy("https://serving.test/v1", verify=ctx)
    assert made == [{"verify": ctx}]
    OpenAIPolicy("https://serving.test/v1")                                   # default: the openai client's own
    OpenAIPolicy("https://serving.test/v1", verify=ctx, http_client=recording([]))   # a given client wins
    assert len(made) == 1


# -- the simulator's and the chaos users' credentials ------------------------------------------------------------
@pytest.fixture(autouse=True)
def no_env_key(monkeypatch):
    monkeypatch.delenv(simulate.SERVING_KEY_ENV, raising=False)
    monkeypatch.setattr(simulate.time, "sleep", lambda s: None)   # the wait for serving to re-read the keys file


def _cfg(tmp_path, *sets):
    return load_config(None, [f'state_dir="{tmp_path / "state"}"', *sets])


def test_on_loopback_no_key_is_needed_and_none_is_made(tmp_path):
    cfg = _cfg(tmp_path)
    assert not cfg.serving.key_required
    policy, url, source = simulate.serving_policy(cfg)
    assert (url, source) == (f"http://127.0.0.1:{cfg.serving.port}/v1", "none")
    assert policy.client.api_key == PLACEHOLDER_KEY
    assert not keys_path(cfg).exists() and not (cfg.state_path / simulate.SIMULATOR_KEY_FILE).exists()


def test_the_environment_key_wins(tmp_path, monkeypatch):
    monkeypatch.setenv(simulate.SERVING_KEY_ENV, " rtrl_from_env \n")
    for cfg in (_cfg(tmp_path), _cfg(tmp_path, 'serving.host="0.0.0.0"')):
        policy, _, source = simulate.serving_policy(cfg)
        assert policy.client.api_key == "rtrl_from_env" and source == "$RTRL_SERVING_KEY"
    # an endpoint elsewhere gets it too (the user chose to send it there)
    assert simulate.serving_key(cfg, "http://elsewhere.test/v1") == ("rtrl_from_env", "$RTRL_SERVING_KEY")
    assert not keys_path(cfg).exists()


def test_where_serving_requires_a_key_a_gateway_key_is_made_once_and_kept(tmp_path):
    cfg = _cfg(tmp_path, 'serving.host="0.0.0.0"')
    assert cfg.serving.key_required
    key, source = simulate.serving_key(cfg)
    keys = KeyStore(keys_path(cfg))
    client = keys.get(keys.client_for_key(key))
    assert (client.client_id, client.org, client.role) == ("rtrl-simulator", "*", "client")
    assert "rtrl-simulator" in source
    kept = cfg.state_path / simulate.SIMULATOR_KEY_FILE
    assert kept.read_text().strip() == key and stat.S_IMODE(kept.stat().st_mode) == 0o600
    assert simulate.serving_key(cfg) == (key, source)                # reused: a running simulator keeps its key
    keys.create("rtrl-simulator", org="acme", role="client")         # replaced elsewhere (not a gateway key)
    again, _ = simulate.serving_key(cfg)
    assert again != key and KeyStore(keys_path(cfg)).client_for_key(again) == "rtrl-simulator"
    policy, _, _ = simulate.serving_policy(cfg)
    assert policy.client.api_key == again


def test_a_keys_file_outside_the_state_dir_needs_the_environment_key(tmp_path):
    cfg = _cfg(tmp_path, "serving.require_key=true", f'collector.api_keys_file="{tmp_path / "deploy" / "keys.json"}"')
    with pytest.raises(ValueError, match="RTRL_SERVING_KEY"):
        simulate.serving_key(cfg)
    assert not (tmp_path / "deploy").exists()


def test_an_endpoint_elsewhere_gets_no_key_made_and_the_system_cas(tmp_path):
    cfg = _cfg(tmp_path, "serving.require_key=true")
    policy, url, source = simulate.serving_policy(cfg, "http://elsewhere.test/v1")
    assert (url, source, policy.client.api_key) == ("http://elsewhere.test/v1", "none", PLACEHOLDER_KEY)
    assert not keys_path(cfg).exists()


def test_under_tls_the_url_is_https_and_serving_certificate_is_trusted(tmp_path, monkeypatch):
    import openai

    cert, key = self_signed(tmp_path)
    cfg = _cfg(tmp_path, f'serving.tls_cert_file="{cert}"', f'serving.tls_key_file="{key}"')
    made: list = []
    real = openai.DefaultHttpxClient
    monkeypatch.setattr(openai, "DefaultHttpxClient", lambda **kw: made.append(kw) or real(**kw))
    _, url, _ = simulate.serving_policy(cfg)
    assert url == f"https://127.0.0.1:{cfg.serving.port}/v1"
    ctx = made[0]["verify"]
    assert isinstance(ctx, ssl.SSLContext) and not ctx.check_hostname
    assert [c["subject"] for c in ctx.get_ca_certs()] == [((("commonName", "127.0.0.1"),),)]
    simulate.serving_policy(cfg, "https://elsewhere.test/v1")        # not serving's: the system's CAs
    assert len(made) == 1


def test_help_documents_the_serving_key(capsys):
    parser = argparse.ArgumentParser(prog="rtrl")
    simulate.add_parser(parser.add_subparsers())
    with pytest.raises(SystemExit):
        parser.parse_args(["simulate", "--help"])
    assert "RTRL_SERVING_KEY" in " ".join(capsys.readouterr().out.split())


def test_simulate_stops_with_a_hint_when_serving_refuses_the_key(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(simulate.SERVING_KEY_ENV, "rtrl_stale")
    cfg = _cfg(tmp_path)
    seen: list = []
    real = simulate.serving_policy

    def refused(cfg, endpoint="", model="", timeout_s=120.0):
        policy, url, source = real(cfg, endpoint, model, timeout_s)
        key = policy.client.api_key
        policy = OpenAIPolicy(url, model, api_key=key, http_client=recording(seen, 401), max_retries=0)
        return policy, url, source

    monkeypatch.setattr(simulate, "serving_policy", refused)
    args = argparse.Namespace(users=None, seed=None, speed=None, endpoint=None, model=None, duration=1.0,
                              sim_hours=None)
    assert simulate.main(args, cfg) == 1
    assert seen == ["Bearer rtrl_stale"]
    assert "RTRL_SERVING_KEY" in capsys.readouterr().err
