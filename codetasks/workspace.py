"""Seeded, deterministic workspaces of small Python files, with the naming conventions of their organization.

An org writes functions and parameters in snake_case or camelCase (constants are UPPER_SNAKE everywhere), so a
policy that learns an org's convention edits its code better. The naming style is in every file, so a shared policy
reads it there; an org's house rule need not be (`Org.kwonly`: whether new parameters are keyword-only), and that
is what an org's own adapter can learn and a shared policy, serving orgs whose rules conflict, cannot learn as
well. Every file is a few
constants and functions built from a small vocabulary; some functions carry an off-by-one loop bound to fix.
`apply_edit` is the `edit_file` tool's semantics, shared by the simulated users and the eval harness.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

VERBS = ("load", "save", "parse", "fetch", "count", "merge", "build", "check", "format", "send", "read", "write",
         "scan", "sort", "clean")
NOUNS = ("config", "items", "user", "record", "order", "page", "token", "report", "cache", "file", "batch",
         "event", "entry", "index", "queue")
SUFFIXES = ("LIMIT", "SIZE", "TIMEOUT", "RETRIES", "COUNT", "DEPTH")
ARGS = ("path", "items", "data", "values", "rows", "name", "url", "keys")
STYLES = ("snake", "camel")


@dataclass(frozen=True)
class Org:
    org_id: str
    style: str  # "snake" | "camel"
    # the org's house rule for a new parameter: True keyword-only (`def f(items, *, timeout=3)`), False positional
    # (`def f(items, timeout=3)`), None no rule (the positional form is written; a test-graded suite takes either)
    kwonly: bool | None = None


ORG_ID = re.compile(r"^o(\d+)$")   # the id `org_of` gives org <index>


def org_of(index: int, seed: int = 0) -> Org:
    """Org `index` of a population: styles alternate, shuffled by the seed."""
    rng = random.Random(f"org:{seed}:{index}")
    return Org(f"o{index}", STYLES[(index + rng.randrange(2)) % 2])


def ident(words: tuple[str, ...] | list[str], style: str) -> str:
    """A function or parameter name in the org's style: ('load', 'config') -> load_config | loadConfig."""
    if style == "snake":
        return "_".join(words)
    return words[0] + "".join(w.capitalize() for w in words[1:])


def constant(noun: str, suffix: str) -> str:
    return f"{noun.upper()}_{suffix}"


@dataclass(frozen=True)
class Function:
    words: tuple[str, ...]      # e.g. ("load", "config")
    params: tuple[str, ...]     # parameter names as written
    loop_arg: str               # the sequence parameter the body loops over
    off_by_one: bool            # the loop stops one element early (a bug to fix)


@dataclass
class SourceFile:
    path: str
    constants: dict[str, int]
    functions: list[Function]
    style: str

    def render(self) -> str:
        lines = [f'"""{self.path.rsplit("/", 1)[-1][:-3].replace("_", " ")} helpers."""', ""]
        lines += [f"{name} = {value}" for name, value in self.constants.items()]
        for fn in self.functions:
            name = ident(fn.words, self.style)
            bound = f"len({fn.loop_arg}) - 1" if fn.off_by_one else f"len({fn.loop_arg})"
            lines += ["", "", f"def {name}({', '.join(fn.params)}):", "    out = []",
                      f"    for i in range({bound}):", f"        out.append({fn.loop_arg}[i])", "    return out"]
        return "\n".join(lines) + "\n"


@dataclass
class Workspace:
    workspace_id: str
    org: Org
    files: dict[str, SourceFile] = field(default_factory=dict)

    def text(self, path: str) -> str:
        return self.files[path].render()


def make_file(rng: random.Random, path: str, style: str) -> SourceFile:
    nouns = rng.sample(NOUNS, 3)
    suffixes = rng.sample(SUFFIXES, 2)
    constants = {constant(nouns[0], suffixes[0]): rng.randrange(2, 100),
                 constant(nouns[1], suffixes[1]): rng.randrange(2, 100)}
    if rng.random() < 0.35:  # two constants sharing a suffix: "change the limit" is ambiguous here
        constants[constant(nouns[2], suffixes[0])] = rng.randrange(2, 100)
    functions = []
    verbs = rng.sample(VERBS, 2)
    for verb in verbs:
        arg = rng.choice(ARGS)
        functions.append(Function((verb, rng.choice(nouns)), (arg,), arg, rng.random() < 0.4))
    return SourceFile(path, constants, functions, style)


def make_workspace(seed: int, org: Org, index: int, n_files: int = 3) -> Workspace:
    """Workspace `index` of `org`, the same for the same (seed, org, index)."""
    rng = random.Random(f"ws:{seed}:{org.org_id}:{index}")
    ws = Workspace(f"ws-{org.org_id}-{index}", org)
    names = rng.sample(NOUNS, n_files)
    for name in names:
        path = f"app/{name}_utils.py"
        ws.files[path] = make_file(rng, path, org.style)
    return ws


class EditError(ValueError):
    """The edit_file call cannot apply (the model's fault: a broken tool call)."""


def apply_edit(text: str, old: str, new: str) -> str:
    """edit_file semantics: `old` must occur exactly once in `text`."""
    n = text.count(old)
    if n == 0:
        raise EditError("old text not found in the file")
    if n > 1:
        raise EditError(f"old text occurs {n} times; it must be unique")
    return text.replace(old, new, 1)
