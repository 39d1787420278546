"""Execute the tool-call protocol (`schemas/tool_protocol.py`) against one task's work dir.

The harness parses a model response, then hands each valid `ToolCall` to `ToolExecutor.execute`, which returns
the text the model sees next and whether the call *failed* — a failed call is a broken tool call for the gate's
guardrail (the model's fault: a missing file, an edit whose old text is not there, a path outside the work dir,
a command that ran into a sandbox limit). A command that runs and exits non-zero has not failed: the tool did its
job and the exit status is in the text. Sandbox breakage is neither: it sets `infra_error`, and the harness marks
the episode an infrastructure failure.

read_file, edit_file and search touch only regular files inside the work dir, resolved on the host without
following links out of it (a model can create a symlink to /etc with run_terminal); run_terminal and lint run
in the sandbox. edit_file is `codetasks.workspace.apply_edit`: the simulated users, the bootstrap
and the eval judge an edit the same way.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from evals.sandbox import Limits, SandboxResult, run_sandboxed
from codetasks.workspace import EditError, apply_edit
from schemas.events import ToolErrorKind
from schemas.tool_protocol import ToolCall, validate_call

MAX_READ_BYTES = 256 * 1024      # read_file / search skip or refuse larger files
MAX_SEARCH_HITS = 200
MAX_RESULT_CHARS = 16 * 1024     # tool text shown to the model

# Syntax check without writing __pycache__ into the work dir (py_compile would); pyflakes when installed.
_LINT = r"""
import sys
path = sys.argv[1]
try:
    import pyflakes.api
except ImportError:
    pyflakes = None
src = open(path, encoding="utf-8", errors="replace").read()
if pyflakes is not None:
    sys.exit(1 if pyflakes.api.check(src, path) else 0)
try:
    compile(src, path, "exec", dont_inherit=True)
except SyntaxError as e:
    print(f"{path}:{e.lineno}:{e.offset}: {e.msg}")
    sys.exit(1)
"""


class PathError(ValueError):
    """A tool path that is absolute, escapes the work dir, or does not name a regular file."""


@dataclass
class ToolResult:
    text: str                                   # what the model sees (tool message content)
    failed: bool = False                        # a broken tool call (the model's fault)
    error_kind: ToolErrorKind = ToolErrorKind.none
    infra_error: str | None = None              # the sandbox broke: the episode is an infrastructure failure
    edited: bool = False                        # an edit_file applied


def resolve(workdir: str | os.PathLike, path: str) -> Path:
    """`path` (workspace-relative) as a host path inside `workdir`; PathError for absolute paths and escapes
    (`..` past the root, or a symlink leading outside)."""
    if not path or not path.strip():
        raise PathError("path is empty")
    if os.path.isabs(path) or path.startswith("~"):
        raise PathError(f"{path!r} is absolute; paths are relative to the workspace root (e.g. app/util.py)")
    root = Path(os.path.realpath(workdir))
    target = Path(os.path.realpath(root / path))
    if target != root and root not in target.parents:
        raise PathError(f"{path!r} is outside the workspace")
    return target


def _regular(target: Path, path: str) -> os.stat_result:
    try:
        st = os.stat(target)
    except FileNotFoundError:
        raise PathError(f"no such file: {path}") from None
    if stat.S_ISDIR(st.st_mode):
        raise PathError(f"{path} is a directory")
    if not stat.S_ISREG(st.st_mode):
        raise PathError(f"{path} is not a regular file")
    if st.st_size > MAX_READ_BYTES:
        raise PathError(f"{path} is too large ({st.st_size} bytes; limit {MAX_READ_BYTES})")
    return st


def _clip(text: str) -> str:
    if len(text) <= MAX_RESULT_CHARS:
        return text
    return text[:MAX_RESULT_CHARS] + f"\n[... {len(text) - MAX_RESULT_CHARS} more characters cut]"


class ToolExecutor:
    """Runs tool calls for one episode. `hide` is passed to the sandbox (the task suite, so that hidden tests and
    reference solutions are invisible to commands)."""

    def __init__(self, workdir: str | os.PathLike, limits: Limits = Limits(), hide: Sequence[str] = ()) -> None:
        self.workdir = Path(workdir)
        self.limits = limits
        self.hide = tuple(hide)

    def execute(self, call: ToolCall | tuple[str, dict[str, Any]]) -> ToolResult:
        name, args = (call.name, call.arguments) if isinstance(call, ToolCall) else call
        why = validate_call(name, args)
        if why:
            return ToolResult(f"error: {why}", True, ToolErrorKind.validation_error)
        try:
            return getattr(self, f"_{name}")(**args)
        except PathError as e:
            return ToolResult(f"error: {e}", True, ToolErrorKind.tool_error)
        except EditError as e:
            return ToolResult(f"error: edit_file {args['path']}: {e}", True, ToolErrorKind.tool_error)

    def _read_file(self, path: str) -> ToolResult:
        target = resolve(self.workdir, path)
        _regular(target, path)
        return ToolResult(_clip(target.read_bytes().decode("utf-8", errors="replace")))

    def _edit_file(self, path: str, old: str, new: str) -> ToolResult:
        target = resolve(self.workdir, path)
        _regular(target, path)
        text = apply_edit(target.read_bytes().decode("utf-8", errors="replace"), old, new)
        with open(target, "r+", encoding="utf-8", newline="") as f:   # in place: keeps the owner and mode
            f.write(text)
            f.truncate()
        return ToolResult(f"edited {path}", edited=True)

    def _search(self, query: str) -> ToolResult:
        if not query:
            return ToolResult("error: search: query is empty", True, ToolErrorKind.validation_error)
        hits: list[str] = []
        root = os.path.realpath(self.workdir)
        for dirpath, dirnames, filenames in os.walk(root):   # os.walk does not follow directory links
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for name in sorted(filenames):
                full = os.path.join(dirpath, name)
                st = os.lstat(full)
                if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_READ_BYTES:
                    continue
                with open(full, "rb") as f:
                    data = f.read()
                if b"\0" in data:
                    continue
                rel = os.path.relpath(full, root)
                for no, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), 1):
                    if query in line:
                        hits.append(f"{rel}:{no}: {line}")
                        if len(hits) >= MAX_SEARCH_HITS:
                            return ToolResult(_clip("\n".join(hits) + f"\n[stopped at {MAX_SEARCH_HITS} matches]"))
        return ToolResult(_clip("\n".join(hits)) if hits else f"no matches for {query!r}")

    def _run_terminal(self, command: str) -> ToolResult:
        return self._sandboxed(["/bin/sh", "-c", command], f"$ {command}")

    def _lint(self, path: str) -> ToolResult:
        target = resolve(self.workdir, path)
        _regular(target, path)
        if target.suffix != ".py":
            return ToolResult(f"error: lint: {path} is not a Python file (.py)", True, ToolErrorKind.tool_error)
        rel = os.path.relpath(target, os.path.realpath(self.workdir))
        r = run_sandboxed(["python", "-c", _LINT, rel], self.workdir, self.limits, hide=self.hide)
        if r.ok and not r.stdout.strip() and not r.stderr.strip():
            return ToolResult(f"lint {path}: no problems found")
        return _result(r, f"lint {path}", self.limits)

    def _sandboxed(self, argv: list[str], header: str) -> ToolResult:
        return _result(run_sandboxed(argv, self.workdir, self.limits, hide=self.hide), header, self.limits)


def _result(r: SandboxResult, header: str, limits: Limits) -> ToolResult:
    """A sandboxed command's tool text: output, then why it ended."""
    if r.infra_error:
        return ToolResult(f"error: the sandbox failed ({r.infra_error})", error_kind=ToolErrorKind.infrastructure,
                          infra_error=r.infra_error)
    parts = [header, r.stdout.rstrip("\n"), r.stderr.rstrip("\n")]
    if r.truncated:
        parts.append(f"[output cut at {limits.output_bytes} bytes]")
    if r.timed_out:
        parts.append(f"[killed after {limits.wall_seconds:g} s wall clock]")
        return ToolResult(_clip("\n".join(p for p in parts if p)), True, ToolErrorKind.timeout)
    if r.limit_hit:
        parts.append(f"[exit code {r.returncode}; sandbox limit hit: {r.limit_hit}]")
        kind = ToolErrorKind.timeout if r.limit_hit == "cpu" else ToolErrorKind.tool_error
        return ToolResult(_clip("\n".join(p for p in parts if p)), True, kind)
    parts.append(f"[exit code {r.returncode}]")
    return ToolResult(_clip("\n".join(p for p in parts if p)))
