"""`rtrl collector --keys-new / --keys-list`: a key is printed once, only its hash is kept, with its org and role."""

from __future__ import annotations

import pytest

import hashlib
import json
import subprocess
import sys
from pathlib import Path

from infra.cli import main

REPO = Path(__file__).parents[3]


def test_keys_new_prints_the_key_once_and_stores_only_its_hash(tmp_path, capsys):
    assert main(["--set", f'state_dir="{tmp_path}"', "collector", "--keys-new", "web", "--org", "acme"]) == 0
    out = capsys.readouterr()
    key = out.out.strip()
    assert key.startswith("rtrl_") and "web" in out.err and "acme" in out.err
    stored = (tmp_path / "collector_keys.json").read_text()
    assert key not in stored
    entry = json.loads(stored)["clients"]["web"]
    assert entry["sha256"] == hashlib.sha256(key.encode()).hexdigest()
    assert (entry["org"], entry["role"]) == ("acme", "client")  # role client unless asked


def test_keys_list_prints_client_ids_and_no_secrets(tmp_path, capsys):
    keys_file = tmp_path / "elsewhere" / "keys.json"
    args = ["--set", f'state_dir="{tmp_path}"', "--set", f'collector.api_keys_file="{keys_file}"', "collector"]
    main([*args, "--keys-new", "web", "--org", "acme"])
    main([*args, "--keys-new", "ci", "--org", "acme", "--role", "serving"])
    capsys.readouterr()
    assert main([*args, "--keys-list"]) == 0
    listed = capsys.readouterr().out
    assert [line.split("\t") for line in listed.splitlines()] == [["ci", "serving", "acme"], ["web", "client", "acme"]]
    assert "rtrl_" not in listed
    assert keys_file.exists() and not (tmp_path / "collector_keys.json").exists()


def test_bad_client_id_exits_2_with_the_reason(tmp_path, capsys):
    assert main(["--set", f'state_dir="{tmp_path}"', "collector", "--keys-new", "no spaces", "--org", "acme"]) == 2
    assert "client id" in capsys.readouterr().err


def test_keys_new_without_org_exits_2_and_makes_no_key(tmp_path, capsys):
    assert main(["--set", f'state_dir="{tmp_path}"', "collector", "--keys-new", "web"]) == 2
    assert "--org" in capsys.readouterr().err
    assert not (tmp_path / "collector_keys.json").exists()


def test_keys_new_with_an_unknown_role_is_refused_by_the_parser(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["--set", f'state_dir="{tmp_path}"', "collector", "--keys-new", "web", "--org", "a", "--role", "root"])
    assert e.value.code == 2 and "role" in capsys.readouterr().err


def test_keys_list_marks_a_version_1_key_as_needing_an_org(tmp_path, capsys):
    (tmp_path / "collector_keys.json").write_text(json.dumps(
        {"version": 1, "clients": {"old": {"sha256": "ab" * 32, "created_at": "2026-10-01T00:00:00+00:00"}}}))
    assert main(["--set", f'state_dir="{tmp_path}"', "collector", "--keys-list"]) == 0
    client, role, org = capsys.readouterr().out.rstrip("\n").split("\t")
    assert (client, role) == ("old", "client") and "re-issue" in org


@pytest.mark.integration
def test_key_management_imports_neither_the_web_stack_nor_kafka(tmp_path):
    code = (f"import sys; from infra.cli import main; main(['--set', 'state_dir=\"{tmp_path}\"', 'collector', "
            "'--keys-new', 'web', '--org', 'acme']); print([m for m in ('starlette', 'uvicorn', 'kafka', 'httpx') if m in sys.modules],"
            " file=sys.stderr)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert out.returncode == 0 and out.stderr.strip().endswith("[]"), out.stderr
