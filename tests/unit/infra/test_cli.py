"""The CLI parses and answers --help without importing heavy modules; bad config exits 2 with the reason."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).parents[3]
HEAVY = ("torch", "kafka", "pyarrow", "mlflow", "apache_beam", "vllm", "deepspeed", "polars", "starlette")


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "infra.cli", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=120)


def test_help_lists_every_subcommand():
    out = run("--help")
    assert out.returncode == 0
    for name in ("up", "status", "down", "config", "schemas", "collector", "archive", "bench"):
        assert name in out.stdout


def test_parsing_and_config_loading_import_no_heavy_module():
    code = ("import sys; from infra.cli import _parser; from infra.config import load_config; "
            "_parser().parse_args(['status']); load_config(); "
            f"print([m for m in {HEAVY!r} if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_bad_override_exits_2_naming_the_key():
    out = run("--set", "kafka.port=0", "status")
    assert out.returncode == 2
    assert "kafka.port: Input should be greater than or equal to 1" in out.stderr


def test_schemas_validate_reports_bad_lines_and_exits_1(tmp_path):
    good = (REPO / "schemas/fixtures/edit_rejected/v1.json").read_text().replace("\n", "")
    f = tmp_path / "events.jsonl"
    f.write_text(good + "\n" + '{"event_type": "edit_rejected"}\n')
    out = run("schemas", "validate", str(f))
    assert out.returncode == 1
    assert '"line": 2' in out.stdout and "event_id" in out.stdout


def test_the_deepspeed_launchers_local_rank_argument_is_accepted_before_the_command():
    from infra.cli import _parser

    args = _parser().parse_args(["--local_rank=1", "train", "--cycle", "c1"])
    assert args.command == "train" and args.cycle == "c1"


def test_demo_prepare_refuses_the_options_of_a_demo_run(tmp_path):
    out = run("--set", f'state_dir="{tmp_path}"', "demo", "--prepare", "--summary", str(tmp_path / "out.json"))
    assert out.returncode == 2 and "--prepare runs no demo" in out.stderr
    assert not (tmp_path / "demo").exists(), "nothing was started"
