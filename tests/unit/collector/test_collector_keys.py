"""API keys: random, shown once, stored only as SHA-256 in a 0600 file that is replaced atomically."""

from __future__ import annotations

import base64
import hashlib
import json
import stat

import pytest

from schemas.api_keys import KeyStore, KeyStoreError
from tests.unit.collector.conftest import ORG, valid_events


def test_key_is_32_random_bytes_urlsafe_base64_with_prefix(tmp_path):
    store = KeyStore(tmp_path / "keys.json")
    a, b = store.create("web", org=ORG, role="serving"), store.create("ci", org=ORG, role="serving")
    for key in (a, b):
        assert key.startswith("rtrl_")
        assert len(base64.urlsafe_b64decode(key[5:] + "=")) == 32
    assert a != b


def test_key_never_appears_in_the_keys_file_only_its_hash(tmp_path):
    path = tmp_path / "keys.json"
    key = KeyStore(path).create("web", org=ORG, role="serving")
    text = path.read_text()
    assert key not in text and key[5:] not in text
    assert json.loads(text)["clients"]["web"]["sha256"] == hashlib.sha256(key.encode()).hexdigest()


def test_keys_file_is_private_and_no_temporary_file_is_left(tmp_path):
    path = tmp_path / "state" / "keys.json"
    store = KeyStore(path)
    store.create("web", org=ORG, role="serving")
    store.create("ci", org=ORG, role="serving")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sorted(p.name for p in path.parent.iterdir()) == ["keys.json", "keys.json.lock"]


def test_lookup_by_key_finds_the_client(tmp_path):
    store = KeyStore(tmp_path / "keys.json")
    web, ci = store.create("web", org=ORG, role="serving"), store.create("ci", org=ORG, role="serving")
    assert store.client_for_key(web) == "web" and store.client_for_key(ci) == "ci"
    assert store.client_for_key(web + "x") is None
    assert KeyStore(tmp_path / "keys.json").clients() == ["ci", "web"]


def test_new_key_for_a_client_replaces_its_old_key(tmp_path):
    store = KeyStore(tmp_path / "keys.json")
    old = store.create("web", org=ORG, role="serving")
    new = store.create("web", org=ORG, role="serving")
    assert store.client_for_key(old) is None and store.client_for_key(new) == "web"
    assert store.clients() == ["web"]


@pytest.mark.parametrize("client", ["", "has space", "../x", "-leading-dash", "x" * 65, "é"])
def test_unacceptable_client_ids_are_refused(tmp_path, client):
    with pytest.raises(KeyStoreError, match="client id"):
        KeyStore(tmp_path / "keys.json").create(client, org=ORG)


@pytest.mark.parametrize("content", ["{", "[]", '{"clients": {"web": {"sha256": "short"}}}'])
def test_malformed_keys_file_is_reported_with_its_path(tmp_path, content):
    path = tmp_path / "keys.json"
    path.write_text(content)
    with pytest.raises(KeyStoreError, match="keys.json"):
        KeyStore(path)


def test_missing_keys_file_means_no_clients(tmp_path):
    assert KeyStore(tmp_path / "absent.json").clients() == []


def test_running_collector_picks_up_a_key_made_after_it_started(harness):
    other = KeyStore(harness.keys.path)  # e.g. `rtrl collector --keys-new ci` in another process
    ci_key = other.create("ci", org=ORG, role="serving")
    body = {"events": valid_events(1)}
    harness.clock.advance(2)  # the file is re-checked at most once a second
    r = harness.post(body, harness.bearer(ci_key))
    assert r.status_code == 200, r.text


def test_rotated_key_stops_working_in_the_running_collector(harness):
    old = harness.api_key
    KeyStore(harness.keys.path).create("web", org=ORG, role="serving")
    harness.clock.advance(2)
    r = harness.post({"events": valid_events(1)}, harness.bearer(old))
    assert r.status_code == 401
    assert harness.transport.records == []


def test_keys_file_broken_while_running_keeps_the_loaded_keys(harness):
    harness.keys.path.write_text("{ broken")
    harness.clock.advance(2)
    r = harness.post({"events": valid_events(1)})
    assert r.status_code == 200


# -- org and role ----------------------------------------------------------------------------------------------------
def test_a_key_carries_the_org_and_role_it_was_made_with(tmp_path):
    store = KeyStore(tmp_path / "keys.json")
    store.create("web", org="acme", role="client")
    store.create("srv", org="*", role="serving")
    again = KeyStore(tmp_path / "keys.json")
    assert (again.get("web").org, again.get("web").role) == ("acme", "client")
    assert (again.get("srv").org, again.get("srv").role) == ("*", "serving")
    assert json.loads((tmp_path / "keys.json").read_text())["version"] == 2


def test_making_a_key_needs_an_org(tmp_path):
    with pytest.raises(TypeError, match="org"):
        KeyStore(tmp_path / "keys.json").create("web")  # type: ignore[call-arg]


@pytest.mark.parametrize("org, role, match", [("", "client", "org"), ("has space", "client", "org"),
                                              ("acme", "root", "role"), ("acme", "", "role")])
def test_unacceptable_org_or_role_is_refused(tmp_path, org, role, match):
    with pytest.raises(KeyStoreError, match=match):
        KeyStore(tmp_path / "keys.json").create("web", org=org, role=role)


def test_version_1_file_stays_readable_its_keys_have_no_org_and_role_client(tmp_path):
    path = tmp_path / "keys.json"
    key = "rtrl_" + "x" * 43
    path.write_text(json.dumps({"version": 1, "clients": {"old": {"sha256": hashlib.sha256(key.encode()).hexdigest(),
                                                                  "created_at": "2026-10-01T00:00:00+00:00"}}}))
    store = KeyStore(path)
    assert store.client_for_key(key) == "old"
    assert (store.get("old").org, store.get("old").role) == (None, "client")
    assert store.without_org() == ["old"]
    store.create("new", org="acme")  # the file is rewritten as version 2; the old entry is kept as it was
    data = json.loads(path.read_text())
    assert data["version"] == 2 and "org" not in data["clients"]["old"] and data["clients"]["new"]["org"] == "acme"
    assert KeyStore(path).client_for_key(key) == "old"


@pytest.mark.parametrize("content, match", [
    ('{"version": 3, "clients": {}}', "version 3"),
    ('{"version": 2, "clients": {"web": {"sha256": "' + "ab" * 32 + '", "org": "acme", "role": "root"}}}', "role"),
    ('{"version": 2, "clients": {"web": {"sha256": "' + "ab" * 32 + '", "org": "a b", "role": "client"}}}', "org"),
])
def test_keys_file_with_an_unknown_version_role_or_org_is_refused(tmp_path, content, match):
    path = tmp_path / "keys.json"
    path.write_text(content)
    with pytest.raises(KeyStoreError, match=match):
        KeyStore(path)
