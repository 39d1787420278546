"""Serving's trust boundary (serving.auth) over fake engines: who needs a key where, the admin role, OpenAI-shaped
refusals the official client maps to its own errors, the Principal a route sees, the bind rule of the config, and
the admin key of local tools."""

from __future__ import annotations

import json
import os
import stat

import pytest
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from schemas.api_keys import KeyStore
from serving.app import Gateway, create_app
from serving.arms import Fleet
from serving.auth import (ADMIN_KEY_ENV, LOCAL_ADMIN_CLIENT, AuthMiddleware, Principal, ensure_admin_key,
                          principal_of, read_admin_key)
from serving.config import ServingConfig
from tests.unit.serving.fakes import FakeLoader, FakeRegistry

BODY = {"model": "x", "user": "u-1", "messages": [{"role": "user", "content": "fix it"}]}


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def keys(tmp_path):
    return KeyStore(tmp_path / "keys.json", clock=Clock())


def served(keys, events=None, **cfg) -> TestClient:
    scfg = ServingConfig(**cfg)
    fleet = Fleet(scfg, FakeRegistry({"control": "1", "champion": "2"}), FakeLoader(max_model_len=scfg.max_model_len))
    gw = Gateway(scfg, fleet, "rtrl-policy", emit=(events if events is not None else []).append)
    return TestClient(create_app(gw, poll=False, keys=keys))


def bearer(key: str) -> dict:
    return {"authorization": f"Bearer {key}"}


def assert_openai_error(r, status: int, kind: str) -> dict:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["type"] == kind and err["param"] is None and err["code"] and err["message"]
    return err


# -- the config --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "localhost"])
def test_a_loopback_host_needs_no_key_by_default(host):
    assert ServingConfig(host=host).key_required is False
    assert ServingConfig(host=host, require_key=True).key_required is True


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.5", "serving.internal"])
def test_a_host_beyond_loopback_needs_a_key_and_refuses_require_key_false(host):
    assert ServingConfig(host=host).key_required is True
    with pytest.raises(ValidationError, match="no server binds beyond loopback without auth"):
        ServingConfig(host=host, require_key=False)


def test_tls_files_go_together_and_make_the_url_https():
    from serving.server import url_of

    with pytest.raises(ValidationError, match="go together"):
        ServingConfig(tls_cert_file="cert.pem")
    scfg = ServingConfig(tls_cert_file="cert.pem", tls_key_file="key.pem", host="0.0.0.0", port=8443)
    assert scfg.tls and url_of(scfg) == "https://127.0.0.1:8443"
    assert url_of(ServingConfig(port=8080)) == "http://127.0.0.1:8080"


# -- who needs a key where ---------------------------------------------------------------------------------------
def test_missing_or_wrong_key_is_401_when_a_key_is_required_and_health_stays_open(keys):
    good = keys.create("web", org="acme")
    with served(keys, host="0.0.0.0") as c:
        err = assert_openai_error(c.post("/v1/chat/completions", json=BODY), 401, "authentication_error")
        assert "missing API key" in err["message"]
        assert_openai_error(c.get("/v1/models"), 401, "authentication_error")
        for wrong in ("rtrl_" + "A" * 43, "unused", good[:-1]):
            err = assert_openai_error(c.post("/v1/chat/completions", json=BODY, headers=bearer(wrong)), 401,
                                      "authentication_error")
            assert err["message"] == "invalid API key"                  # never which part was wrong
        r = c.post("/v1/chat/completions", json=BODY, headers={"authorization": f"Basic {good}"})
        assert_openai_error(r, 401, "authentication_error")
        assert r.headers["www-authenticate"].startswith("Bearer")
        assert c.get("/health").status_code == 200                       # probes need no key
        assert c.post("/v1/chat/completions", json=BODY, headers=bearer(good)).status_code == 200
        assert c.get("/v1/models", headers=bearer(good)).status_code == 200


def test_without_required_keys_chat_is_open_but_a_wrong_rtrl_key_is_still_401(keys):
    keys.create("web", org="acme")
    with served(keys) as c:                                                # 127.0.0.1: no key required
        assert c.post("/v1/chat/completions", json=BODY).status_code == 200
        # the openai client must send some key: a placeholder is no key
        assert c.post("/v1/chat/completions", json=BODY, headers=bearer("unused")).status_code == 200
        r = c.post("/v1/chat/completions", json=BODY, headers=bearer("rtrl_not-a-key"))
        assert_openai_error(r, 401, "authentication_error")


def test_admin_endpoints_need_the_admin_role_whatever_chat_needs(keys):
    client_key = keys.create("web", org="acme", role="client")
    serving_key = keys.create("gw", org="*", role="serving")
    admin_key = keys.create("ops", org="*", role="admin")
    with served(keys) as c:                                                # chat needs no key here
        err = assert_openai_error(c.post("/admin/stage", json={"version": "5"}), 401, "authentication_error")
        assert "role 'admin'" in err["message"]
        assert_openai_error(c.post("/admin/stage", json={"version": "5"}, headers=bearer("unused")), 401,
                            "authentication_error")
        for key in (client_key, serving_key):
            err = assert_openai_error(c.post("/admin/stage", json={"version": "5"}, headers=bearer(key)), 403,
                                      "permission_error")
            assert "role 'admin'" in err["message"]
        assert_openai_error(c.post("/admin/unstage", json={"version": "5"}, headers=bearer(client_key)), 403,
                            "permission_error")
        r = c.post("/admin/stage", json={"version": "5"}, headers=bearer(admin_key))
        assert r.status_code == 200 and r.json()["staged"] == ["5"]
        r = c.post("/admin/unstage", json={"version": "5"}, headers=bearer(admin_key))
        assert r.status_code == 200 and r.json()["unstaged"] is True


def test_without_a_keys_file_admin_is_always_refused(tmp_path):
    with served(None) as c:
        assert c.post("/admin/stage", json={"version": "5"}).status_code == 401
        assert c.post("/admin/stage", json={"version": "5"}, headers=bearer("rtrl_x")).status_code == 401


def test_a_version_1_key_is_403_naming_the_command_that_reissues_it(keys):
    key = keys.create("old", org="acme")
    data = json.loads(keys.path.read_text())
    data["version"] = 1
    del data["clients"]["old"]["org"], data["clients"]["old"]["role"]
    keys.path.write_text(json.dumps(data))
    keys.reload()
    with served(keys, host="0.0.0.0") as c:
        err = assert_openai_error(c.post("/v1/chat/completions", json=BODY, headers=bearer(key)), 403,
                                  "permission_error")
        assert "rtrl collector --keys-new old --org ORG" in err["message"]


def test_the_official_openai_client_raises_its_own_auth_errors(keys):
    import openai

    client_key = keys.create("web", org="acme")
    with served(keys, host="0.0.0.0") as c:
        def client(key, base="http://testserver/v1"):
            return openai.OpenAI(base_url=base, api_key=key, http_client=c, max_retries=0)

        with pytest.raises(openai.AuthenticationError, match="invalid API key"):
            client("rtrl_wrong").chat.completions.create(**BODY)
        assert client(client_key).chat.completions.create(**BODY).choices
        with pytest.raises(openai.PermissionDeniedError, match="role 'admin'"):
            client(client_key, "http://testserver").post("/admin/stage", body={"version": "5"}, cast_to=object)


def test_a_key_made_while_serving_works_after_the_once_a_second_refresh(keys):
    with served(keys, host="0.0.0.0") as c:
        web = keys.create("web", org="acme")
        assert c.post("/v1/chat/completions", json=BODY, headers=bearer(web)).status_code == 200     # t = 0
        newer = KeyStore(keys.path).create("newer", org="acme")   # as another process's `--keys-new` writes it
        keys._clock.t = 0.5                                        # within the second: the file is not looked at
        assert c.post("/v1/chat/completions", json=BODY, headers=bearer(newer)).status_code == 401
        keys._clock.t = 1.5
        assert c.post("/v1/chat/completions", json=BODY, headers=bearer(newer)).status_code == 200


# -- the Principal -----------------------------------------------------------------------------------------------
def test_the_principal_is_stored_in_the_scope_for_the_route(keys):
    seen: list[Principal] = []

    async def route(request):
        seen.append(principal_of(request.scope))
        return JSONResponse({})

    web = keys.create("web", org="acme", role="client")
    gw = keys.create("gw", org="*", role="serving")
    app = Starlette(routes=[Route("/v1/chat/completions", route, methods=["POST"])],
                    middleware=[Middleware(AuthMiddleware, keys=keys, require_key=False)])
    with TestClient(app) as c:
        c.post("/v1/chat/completions", headers=bearer(web))
        c.post("/v1/chat/completions", headers=bearer(gw))
        c.post("/v1/chat/completions")
    assert seen == [Principal("web", "acme", "client"), Principal("gw", "*", "serving"),
                    Principal(None, None, "anonymous")]
    assert principal_of({}) == Principal(None, None, "anonymous")


def test_the_chat_route_takes_the_user_and_org_from_the_key(keys):
    events: list = []
    key = keys.create("web-7", org="acme")
    with served(keys, events, host="0.0.0.0") as c:
        body = {k: v for k, v in BODY.items() if k != "user"}
        r = c.post("/v1/chat/completions", json=body, headers=bearer(key))
        assert r.status_code == 200, r.text
    assert events[0].user_id == "web-7" and events[0].org_id == "acme"


# -- the admin key of local tools --------------------------------------------------------------------------------
def test_the_local_admin_key_is_made_once_0600_and_read_by_tools(tmp_path, keys, monkeypatch):
    monkeypatch.delenv(ADMIN_KEY_ENV, raising=False)
    key_file = tmp_path / "state" / "admin.key"
    assert read_admin_key(key_file) is None
    assert ensure_admin_key(keys, key_file) is True
    assert stat.S_IMODE(os.stat(key_file).st_mode) == 0o600
    raw = read_admin_key(key_file)
    assert keys.client_for_key(raw) == LOCAL_ADMIN_CLIENT
    made = keys.get(LOCAL_ADMIN_CLIENT)
    assert (made.org, made.role) == ("*", "admin")
    assert ensure_admin_key(keys, key_file) is False and read_admin_key(key_file) == raw   # kept
    keys.create(LOCAL_ADMIN_CLIENT, org="*", role="admin")                                 # rotated elsewhere
    assert ensure_admin_key(keys, key_file) is True and read_admin_key(key_file) != raw
    monkeypatch.setenv(ADMIN_KEY_ENV, "rtrl_from-env")
    assert read_admin_key(key_file) == "rtrl_from-env"
    assert not list(key_file.parent.glob(".*.tmp"))


def test_rtrl_serve_makes_the_admin_key_only_for_a_keys_file_in_the_state_dir(tmp_path, monkeypatch):
    from infra.config import RtrlConfig
    from serving.server import admin_key, ensure_local_admin_key, keys_path

    monkeypatch.delenv(ADMIN_KEY_ENV, raising=False)
    cfg = RtrlConfig(state_dir=str(tmp_path / "state"))
    assert keys_path(cfg) == cfg.state_path / "collector_keys.json"          # the collector's file by default
    assert ensure_local_admin_key(cfg) is True and ensure_local_admin_key(cfg) is False
    assert KeyStore(keys_path(cfg)).get(KeyStore(keys_path(cfg)).client_for_key(admin_key(cfg))).role == "admin"
    elsewhere = cfg.model_copy(update={"state_dir": str(tmp_path / "other"),
                                       "serving": cfg.serving.model_copy(
                                           update={"api_keys_file": str(tmp_path / "deploy" / "keys.json")})})
    assert keys_path(elsewhere) == tmp_path / "deploy" / "keys.json"
    assert ensure_local_admin_key(elsewhere) is False and admin_key(elsewhere) is None
    monkeypatch.setenv(ADMIN_KEY_ENV, "rtrl_ops")
    fresh = RtrlConfig(state_dir=str(tmp_path / "third"))
    assert ensure_local_admin_key(fresh) is False and admin_key(fresh) == "rtrl_ops"
