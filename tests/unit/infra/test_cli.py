"""The CLI parses and answers --help without importing heavy modules; bad config exits 2 with the reason. (Every
command's --help, in this process: test_cli_help.py.)"""

import subprocess
import sys
from pathlib import Path

import pytest

from infra.argv import rtrl_args, rtrl_argv
from infra.cli import main

REPO = Path(__file__).parents[3]
HEAVY = ("torch", "kafka", "pyarrow", "mlflow", "apache_beam", "vllm", "deepspeed", "polars", "starlette")
# Not heavy, but not needed to parse either: `rtrl --help` stays as quick as the command modules' stdlib imports
PARSING_NEEDS_NOT = ("pydantic", "infra.config", "urllib.request", "infra.stack.process", "dataclasses")


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(rtrl_argv(*args), capture_output=True, text=True, cwd=REPO, timeout=120)


def test_rtrl_argv_puts_the_config_and_every_override_before_the_command():
    assert rtrl_argv("archive", "--until-idle", "5.0", config="my.toml", overrides=["a=1", "b=2"]) == [
        sys.executable, "-m", "infra.cli", "--config", "my.toml", "--set", "a=1", "--set", "b=2", "archive",
        "--until-idle", "5.0"]
    assert rtrl_args("status") == ["status"]
    assert rtrl_args("down", config=None, overrides=("state_dir=/x",)) == ["--set", "state_dir=/x", "down"]


@pytest.mark.integration  # `python -m infra.cli` as a program
def test_help_lists_every_subcommand():
    out = run("--help")
    assert out.returncode == 0
    for name in ("up", "status", "down", "config", "schemas", "collector", "archive", "bench"):
        assert name in out.stdout


@pytest.mark.integration  # a fresh interpreter, to see what parsing imports
def test_parsing_and_config_loading_import_no_heavy_module():
    code = ("import sys; from infra.cli import build_parser; build_parser().parse_args(['status']); "
            f"print([m for m in {PARSING_NEEDS_NOT!r} if m in sys.modules]); "
            "from infra.config import load_config; load_config(); "
            f"print([m for m in {HEAVY!r} if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert out.stdout.split() == ["[]", "[]"], out.stdout + out.stderr


@pytest.mark.integration
def test_bad_override_exits_2_naming_the_key(capsys):
    assert main(["--set", "kafka.port=0", "status"]) == 2
    assert "kafka.port: Input should be greater than or equal to 1" in capsys.readouterr().err


@pytest.mark.integration
def test_schemas_validate_reports_bad_lines_and_exits_1(tmp_path, capsys):
    good = (REPO / "schemas/fixtures/edit_rejected/v1.json").read_text().replace("\n", "")
    f = tmp_path / "events.jsonl"
    f.write_text(good + "\n" + '{"event_type": "edit_rejected"}\n')
    assert main(["schemas", "validate", str(f)]) == 1
    out = capsys.readouterr().out
    assert '"line": 2' in out and "event_id" in out


def test_the_deepspeed_launchers_local_rank_argument_is_accepted_before_the_command():
    from infra.cli import build_parser

    args = build_parser().parse_args(["--local_rank=1", "train", "--cycle", "c1"])
    assert args.command == "train" and args.cycle == "c1"


@pytest.mark.integration  # `rtrl demo` in a process of its own: nothing of the demo is imported here
def test_demo_prepare_refuses_the_options_of_a_demo_run(tmp_path):
    out = run("--set", f'state_dir="{tmp_path}"', "demo", "--prepare", "--summary", str(tmp_path / "out.json"))
    assert out.returncode == 2 and "--prepare runs no demo" in out.stderr
    assert not (tmp_path / "demo").exists(), "nothing was started"
