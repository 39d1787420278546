"""Every `rtrl` command and subcommand answers `--help` (in this process: exit 0, its own usage line) and has a
handler; every `rtrl ...` command that README.md and docs/*.md show in code names an existing command."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from infra import cli

REPO = Path(__file__).resolve().parents[3]

# Commands the docs name as missing on purpose ("does not exist yet", "there is no ..."): (path, where).
NOT_YET = {("bench", "gpu"): "docs/benchmarks.md", ("bench", "learning"): "docs/architecture.md"}


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return {name: sub for action in parser._actions if isinstance(action, argparse._SubParsersAction)
            for name, sub in action.choices.items()}


def command_paths(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Every command path of the tree, depth first: (), ("up",), ..., ("bench",), ("bench", "ingest"), ..."""
    yield path
    for name, sub in subcommands(parser).items():
        yield from command_paths(sub, (*path, name))


ROOT = cli.build_parser()
PATHS = list(command_paths(ROOT))


def parsers_along(path: tuple[str, ...]) -> list[argparse.ArgumentParser]:
    chain = [ROOT]
    for word in path:
        chain.append(subcommands(chain[-1])[word])
    return chain


def test_the_walk_finds_every_command_and_subcommand():
    assert len(PATHS) > 40
    assert {("up",), ("schemas", "export"), ("eval", "run"), ("ab", "report"), ("bench", "archive")} <= set(PATHS)


@pytest.mark.parametrize("path", PATHS, ids=lambda p: " ".join(p) or "rtrl")
def test_help_exits_0_with_the_commands_usage_line(path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    with pytest.raises(SystemExit) as done:
        cli.main([*path, "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: {' '.join(('rtrl', *path))} "), out[:200]
    assert "options:" in out


@pytest.mark.parametrize("path", [p for p in PATHS if p and not subcommands(parsers_along(p)[-1])],
                         ids=" ".join)
def test_every_command_has_a_handler(path):
    handlers = [p.get_default("handler") for p in parsers_along(path)]
    handler = next((h for h in reversed(handlers) if h is not None), None)
    assert callable(handler), f"rtrl {' '.join(path)}: no handler"


# --- commands named in the docs -------------------------------------------------------------------------------------

FENCED = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
SPAN = re.compile(r"(`+)(.+?)\1", re.S)
RTRL = re.compile(r"(?<![\w.-])rtrl[ \t]+")  # `rtrl up`, `.venv/bin/rtrl up`; not `.rtrl/`, `rtrl.toml`, `rtrl:`
WORD = re.compile(r"[a-z][a-z0-9-]*")


def code_texts(markdown: str) -> Iterator[str]:
    """Fenced code blocks (continuation lines joined), then inline code spans of the rest."""
    for block in FENCED.finditer(markdown):
        yield block.group(0).replace("\\\n", " ")
    for span in SPAN.finditer(FENCED.sub("", markdown)):
        yield span.group(2)


def after_global_options(tokens: list[str]) -> list[str]:
    """The tokens after `--config FILE`, `--set KEY=VALUE` (or their `=` forms) and `[...]` parts like `[--set …]`."""
    i = 0
    while i < len(tokens):
        t = tokens[i]
        if t.startswith("["):
            while i < len(tokens) and not tokens[i].endswith("]"):
                i += 1
            i += 1
        elif t in ("--config", "--set"):
            i += 2
        elif t.startswith(("--config=", "--set=", "--local_rank")):
            i += 1
        else:
            break
    return tokens[i:]


def named_command(words: list[str]) -> tuple[tuple[str, ...], str | None]:
    """(the command path the words name, the first word that should be a subcommand and is not, or None). The path
    ends at a command without subcommands or at the first token that is not a lowercase word (an option, an
    argument, a placeholder such as WHAT or ...); what follows is not looked at."""
    parser, path = ROOT, ()
    for raw in words:
        word = raw.rstrip(".,;:)")
        subs = subcommands(parser)
        if not subs or not WORD.fullmatch(word):
            break
        if word not in subs:
            return path, word
        parser, path = subs[word], (*path, word)
    return path, None


def doc_mentions() -> Iterator[tuple[str, str]]:
    """(file, the text after `rtrl ` up to the end of its line or code span) for each mention in code."""
    for f in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for text in code_texts(f.read_text(encoding="utf-8")):
            for m in RTRL.finditer(text):
                yield f.relative_to(REPO).as_posix(), re.split(r"[\n`]", text[m.end():], maxsplit=1)[0]


def test_the_doc_check_reads_mentions_and_resolves_global_options_and_placeholders():
    assert sum(1 for _ in doc_mentions()) > 20
    assert named_command(after_global_options("--set a=1 --config x.toml bench ingest --json".split())) == (
        ("bench", "ingest"), None)
    assert named_command(after_global_options("[--set …] demo --cycles 3".split())) == (("demo",), None)
    assert named_command("gate 3 --via-serving".split()) == (("gate",), None)
    assert named_command("bench WHAT --json".split()) == (("bench",), None)
    assert named_command("COMMAND --help".split()) == ((), None)
    assert named_command("bench quantum".split()) == (("bench",), "quantum")
    assert named_command("deploy now".split()) == ((), "deploy")


def test_every_command_the_docs_show_exists():
    unknown = []
    for where, text in doc_mentions():
        path, bad = named_command(after_global_options(text.split()))
        if bad is not None and (*path, bad) not in NOT_YET:
            unknown.append(f"{where}: rtrl {text.strip()}  ({' '.join(('rtrl', *path, bad))!r} is no command)")
    assert unknown == [], "\n".join(unknown)
