"""Coding requests against a workspace file: what the user asks, what a right answer is, and grading.

Kinds (each a transformation of one `SourceFile`, so the expected file is known exactly):
    change_constant   "Set PAGE_SIZE to 50."             clear; ambiguous when only the suffix is named and two
                                                          constants share it ("Change the size to 50.")
    rename_function   "Rename load config to read config." the new name follows the org's convention
    fix_off_by_one    "Fix the off-by-one in count items." only functions that have the bug
    add_parameter     "Add a max retries parameter to fetch page, default 3."  ambiguous when no function is named;
                                                          keyword-only (after `*`) where the org's house rule says so
An ambiguous request has a hidden intended target: the right first response is a question; the user's answer
(`clarification`) makes it clear. Request phrasings come in two splits: `train` (the traffic the policy learns
from) and `eval` (held out for the evaluation suite; never in training traffic).

`demonstration` is the reference response (tool-call protocol text), used to bootstrap the default policy;
`grade` applies a response's edit_file calls to the file and compares with the expected text.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace

from codetasks.workspace import (EditError, Function, SourceFile, Workspace, apply_edit, ident,
                                                 VERBS)
from schemas.events import ResponseKind
from schemas.tool_protocol import ParsedResponse, ToolCall

KINDS = ("change_constant", "rename_function", "fix_off_by_one", "add_parameter")
NEW_PARAMS = (("timeout",), ("max", "retries"), ("verbose",), ("page", "size"), ("strict",), ("limit",))

PHRASES = {
    "train": {
        "change_constant": ("Set {name} to {value}.", "Change {words} to {value}."),
        "change_constant?": ("Change the {suffix} to {value}.",),
        "rename_function": ("Rename {old} to {new}.", "Rename the function {old} to {new}."),
        "fix_off_by_one": ("Fix the off-by-one in {fn}.", "{fn} skips the last element, fix it."),
        "add_parameter": ("Add a {param} parameter to {fn}, default {value}.",),
        "add_parameter?": ("Add a {param} parameter, default {value}.",),
    },
    "eval": {
        "change_constant": ("Make {words} {value}.", "{name} should be {value}."),
        "change_constant?": ("Bump the {suffix} to {value}.",),
        "rename_function": ("Call {old} {new} instead.",),
        "fix_off_by_one": ("The loop in {fn} misses the last item.",),
        "add_parameter": ("{fn} needs a {param} argument defaulting to {value}.",),
        "add_parameter?": ("I need a {param} argument defaulting to {value}.",),
    },
}


def system_prompt(org_id: str) -> str:
    return f"org {org_id}: edit files with tool calls; ask one question if the request is unclear."


def _words(name: str) -> str:
    return name.lower().replace("_", " ")


@dataclass(frozen=True)
class Task:
    task_id: str
    kind: str
    org_id: str
    path: str
    before: str                      # the file as the user sees it
    after: str                       # the file a right edit produces
    request: str                     # the user's message
    edit: ToolCall                   # the reference edit
    ambiguous: bool = False
    candidates: tuple[str, ...] = () # what an ambiguous request could mean (names), the intended one first
    clarification: str = ""          # the user's answer to a question (ambiguous tasks)
    question: str = ""               # the reference question (ambiguous tasks)

    def messages(self) -> list[dict[str, str]]:
        """The first turn: system, then the file and the request."""
        return [{"role": "system", "content": system_prompt(self.org_id)},
                {"role": "user", "content": f"{self.path}\n```\n{self.before}```\n{self.request}"}]

    def clarified_messages(self, question: str) -> list[dict[str, str]]:
        """The second turn after the assistant asked `question`: the user's answer appended."""
        return self.messages() + [{"role": "assistant", "content": question},
                                  {"role": "user", "content": self.clarification}]

    def demonstration(self, clarified: bool = False) -> str:
        """The reference response: a question for an ambiguous first turn, else the edit."""
        if self.ambiguous and not clarified:
            return self.question
        return self.edit.text()


@dataclass(frozen=True)
class Grade:
    outcome: str          # "correct" | "wrong" | "question" | "broken"
    kind: ResponseKind
    needless_question: bool = False
    new_text: str | None = None       # the file after the response's edits (None when nothing applied)
    errors: tuple[str, ...] = field(default=())

    @property
    def correct(self) -> bool:
        return self.outcome == "correct"


def grade(task: Task, parsed: ParsedResponse, clarified: bool = False) -> Grade:
    """Judge one response to `task` (its first turn, or the turn after the clarification)."""
    if parsed.kind is ResponseKind.question:
        return Grade("question", parsed.kind, needless_question=not task.ambiguous or clarified)
    text, errors, edited = task.before, [], False
    for call in parsed.calls:
        if call.name != "edit_file":
            continue
        if call.arguments["path"] != task.path:
            errors.append(f"no such file {call.arguments['path']!r}")
            continue
        try:
            text = apply_edit(text, call.arguments["old"], call.arguments["new"])
            edited = True
        except EditError as e:
            errors.append(str(e))
    if parsed.broken or errors:
        return Grade("broken", parsed.kind, new_text=text if edited else None, errors=tuple(errors))
    if not edited:
        return Grade("wrong", parsed.kind)
    return Grade("correct" if text == task.after else "wrong", parsed.kind, new_text=text)


def _unique_old(text: str, lines: list[str], at: int) -> str:
    """The shortest run of lines starting at lines[at] (growing upwards) that occurs once in `text`."""
    for start in range(at, -1, -1):
        snippet = "\n".join(lines[start:at + 1])
        if text.count(snippet) == 1:
            return snippet
    raise ValueError("no unique snippet")


def _edit(path: str, before: str, after: str) -> ToolCall:
    """The minimal line-level edit turning `before` into `after` (one changed line, with unique context)."""
    b, a = before.split("\n"), after.split("\n")
    i = next(k for k in range(len(b)) if b[k] != a[k])
    old = _unique_old(before, b, i)
    n_ctx = old.count("\n")
    new = "\n".join(a[i - n_ctx:i + 1])
    return ToolCall("edit_file", {"path": path, "old": old, "new": new})


def make_task(rng: random.Random, ws: Workspace, task_id: str, split: str = "train",
              ambiguous_rate: float = 0.25, kind: str | None = None) -> Task:
    """A request against one file of `ws`; ambiguous with probability `ambiguous_rate` where the file allows it."""
    path = rng.choice(sorted(ws.files))
    src = ws.files[path]
    style = ws.org.style
    kinds = [k for k in KINDS if k != "fix_off_by_one" or any(f.off_by_one for f in src.functions)]
    kind = kind or rng.choice(kinds)
    phrases = PHRASES[split]
    ambiguous = False
    candidates: tuple[str, ...] = ()
    clarification = question = ""
    if kind == "change_constant":
        by_suffix: dict[str, list[str]] = {}
        for name in src.constants:
            by_suffix.setdefault(name.rsplit("_", 1)[1], []).append(name)
        shared = [names for names in by_suffix.values() if len(names) > 1]
        ambiguous = bool(shared) and rng.random() < ambiguous_rate
        names = rng.choice(shared) if ambiguous else sorted(src.constants)
        target = rng.choice(names)
        value = rng.choice([v for v in range(2, 200) if v != src.constants[target]])
        if ambiguous:
            candidates = (target, *[n for n in names if n != target])
            request = rng.choice(phrases["change_constant?"]).format(suffix=target.rsplit("_", 1)[1].lower(),
                                                                     value=value)
            question = f"Which one do you mean: {' or '.join(sorted(names))}?"
            clarification = f"{target}."
        else:
            request = rng.choice(phrases["change_constant"]).format(name=target, words=_words(target), value=value)
        new = replace(src, constants={**src.constants, target: value})
    elif kind == "rename_function":
        i = rng.randrange(len(src.functions))
        fn = src.functions[i]
        verb = rng.choice([v for v in VERBS if v not in {f.words[0] for f in src.functions}])
        renamed = replace(fn, words=(verb, *fn.words[1:]))
        request = rng.choice(phrases["rename_function"]).format(old=" ".join(fn.words), new=" ".join(renamed.words))
        new = replace(src, functions=[renamed if k == i else f for k, f in enumerate(src.functions)])
    elif kind == "fix_off_by_one":
        i = rng.choice([k for k, f in enumerate(src.functions) if f.off_by_one])
        fn = src.functions[i]
        request = rng.choice(phrases["fix_off_by_one"]).format(fn=" ".join(fn.words))
        request = request[0].upper() + request[1:]
        new = replace(src, functions=[replace(fn, off_by_one=False) if k == i else f
                                      for k, f in enumerate(src.functions)])
    else:  # add_parameter
        i = rng.randrange(len(src.functions))
        fn = src.functions[i]
        words = rng.choice([w for w in NEW_PARAMS if ident(w, style) not in fn.params])
        value = rng.choice((3, 10, 30, 100, "True", "False", "None"))
        param = ident(words, style)
        if len(src.functions) > 1 and rng.random() < ambiguous_rate:
            ambiguous = True
            names = [ident(f.words, style) for f in src.functions]
            candidates = (names[i], *[n for n in names if n != names[i]])
            request = rng.choice(phrases["add_parameter?"]).format(param=" ".join(words), value=value)
            question = f"Which function: {' or '.join(sorted(names))}?"
            clarification = f"{names[i]}."
        else:
            request = rng.choice(phrases["add_parameter"]).format(param=" ".join(words), fn=" ".join(fn.words),
                                                                   value=value)
        request = request[0].upper() + request[1:]
        star = ("*",) if ws.org.kwonly and "*" not in fn.params else ()   # the org's house rule
        grown = replace(fn, params=(*fn.params, *star, f"{param}={value}"))
        new = replace(src, functions=[grown if k == i else f for k, f in enumerate(src.functions)])
    before, after = src.render(), new.render()
    return Task(task_id, kind, ws.org.org_id, path, before, after, request, _edit(path, before, after), ambiguous,
                candidates, clarification, question)


def apply_task(ws: Workspace, task: Task) -> None:
    """Make the task's expected file the workspace's file (a right edit was kept)."""
    src = ws.files[task.path]
    ws.files[task.path] = _parse_back(src, task.after)


def _parse_back(src: SourceFile, text: str) -> SourceFile:
    """The SourceFile whose render is `text` (a right edit keeps the file inside the generator's grammar)."""
    consts, fns = {}, []
    lines = text.split("\n")
    for k, line in enumerate(lines):
        if " = " in line and not line.startswith(" ") and line.split(" = ")[0].isupper():
            name, value = line.split(" = ")
            consts[name] = int(value)
        elif line.startswith("def "):
            head = line[4:-2]
            name, params = head.split("(", 1)
            loop = lines[k + 2].strip()
            arg = loop[len("for i in range(len("):].split(")")[0]
            words = tuple(name.split("_")) if src.style == "snake" else _split_camel(name)
            fns.append(Function(words, tuple(p.strip() for p in params.split(",")), arg, loop.endswith("- 1):")))
    out = SourceFile(src.path, consts, fns, src.style)
    if out.render() != text:
        raise ValueError(f"{src.path}: text is outside the generator's grammar")
    return out


def _split_camel(name: str) -> tuple[str, ...]:
    words, cur = [], ""
    for ch in name:
        if ch.isupper() and cur:
            words.append(cur)
            cur = ch.lower()
        else:
            cur += ch
    return tuple(words + [cur])
