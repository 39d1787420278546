"""docs/rewards.md "A replay from scratch" works as written: its bash blocks (write a wire event log, `rtrl archive
import`, `rtrl replay`) run in a fresh directory with the project's environment on PATH, then its python blocks
read the rows with polars and with DuckDB."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.M | re.S)


def section_blocks(title: str = "A replay from scratch") -> list[tuple[str, str]]:
    text = (REPO / "docs" / "rewards.md").read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return [(m.group(1), m.group(2)) for m in BLOCK.finditer(text[start:end if end > 0 else None])]


def test_the_section_has_the_import_the_replay_and_both_readers():
    blocks = section_blocks()
    langs = [lang for lang, _ in blocks]
    assert langs.count("bash") >= 2 and langs.count("python") == 2, langs
    code = "\n".join(body for _, body in blocks)
    for needle in ("rtrl archive import", "rtrl replay", "import polars", "import duckdb"):
        assert needle in code


def test_the_page_runs_as_written(tmp_path):
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    outputs = []
    for lang, body in section_blocks():
        argv = ["bash", "-euo", "pipefail", "-c", body] if lang == "bash" else [sys.executable, "-c", body]
        out = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
        assert out.returncode == 0, f"{lang} block failed:\n{body}\n--- stdout\n{out.stdout[-3000:]}\n--- stderr\n" \
                                    f"{out.stderr[-3000:]}"
        outputs.append((lang, out.stdout))
    assert (tmp_path / "events.jsonl").stat().st_size > 0
    bash_out = "\n".join(o for lang, o in outputs if lang == "bash")
    assert '"archive_import"' in bash_out and '"rows": 200' in bash_out
    polars_out, duckdb_out = [o for lang, o in outputs if lang == "python"]
    assert "200 rows" in polars_out
    assert "control" in duckdb_out and "treatment" in duckdb_out
