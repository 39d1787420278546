"""`rtrl collector --keys-new / --keys-list`: a key is printed once, only its hash is kept."""

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
    assert main(["--set", f'state_dir="{tmp_path}"', "collector", "--keys-new", "web"]) == 0
    out = capsys.readouterr()
    key = out.out.strip()
    assert key.startswith("rtrl_") and "web" in out.err
    stored = (tmp_path / "collector_keys.json").read_text()
    assert key not in stored
    assert json.loads(stored)["clients"]["web"]["sha256"] == hashlib.sha256(key.encode()).hexdigest()


def test_keys_list_prints_client_ids_and_no_secrets(tmp_path, capsys):
    keys_file = tmp_path / "elsewhere" / "keys.json"
    args = ["--set", f'state_dir="{tmp_path}"', "--set", f'collector.api_keys_file="{keys_file}"', "collector"]
    main([*args, "--keys-new", "web"])
    main([*args, "--keys-new", "ci"])
    capsys.readouterr()
    assert main([*args, "--keys-list"]) == 0
    listed = capsys.readouterr().out
    assert listed.split() == ["ci", "web"]
    assert keys_file.exists() and not (tmp_path / "collector_keys.json").exists()


def test_bad_client_id_exits_2_with_the_reason(tmp_path, capsys):
    assert main(["--set", f'state_dir="{tmp_path}"', "collector", "--keys-new", "no spaces"]) == 2
    assert "client id" in capsys.readouterr().err


@pytest.mark.integration
def test_key_management_imports_neither_the_web_stack_nor_kafka(tmp_path):
    code = (f"import sys; from infra.cli import main; main(['--set', 'state_dir=\"{tmp_path}\"', 'collector', "
            "'--keys-new', 'web']); print([m for m in ('starlette', 'uvicorn', 'kafka', 'httpx') if m in sys.modules],"
            " file=sys.stderr)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert out.returncode == 0 and out.stderr.strip().endswith("[]"), out.stderr
