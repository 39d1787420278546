"""How well a checkpoint does on fresh generator tasks (unseen workspaces), with Hugging Face `generate`.

Turns evaluated per task: its first turn; for an ambiguous task also the turn after the user's clarification
(given the reference question, whatever the model asked). Each response is graded by the task generator
(`grade`: the edits applied to the file and compared with the expected file).

    edit_accuracy            right edits / turns where an edit is the right response (clear first turns and
                             clarified turns)
    broken_rate              responses graded "broken" / all responses: a call that does not parse or validate,
                             or an edit that cannot apply (old text missing or not unique) - the reward's hard
                             negatives (docs/rewards.md)
    malformed_rate           responses with a call that does not parse or validate (the protocol alone)
    question_rate_ambiguous  first turns of ambiguous tasks answered with a question (the right move)
    question_rate_clear      first turns of clear tasks answered with a question (needless)
    repair_accuracy          right edits / repair turns: one per task, after a failed attempt and the user's
                             complaint (`corpus.repair_messages`); not part of the rates above

Decoding is done twice: sampling at temperature 1 from the untruncated distribution (what serving does for
training traffic: the band v0 must land in is measured this way) and greedy. Sampling is seeded.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field
from typing import Callable, Sequence

from codetasks.tasks import Task, grade
from schemas.chat_format import render
from schemas.tool_protocol import parse_response
from trainer.bootstrap.corpus import repair_messages


@dataclass(frozen=True)
class Turn:
    task: Task
    clarified: bool
    repair: bool = False

    @property
    def messages(self) -> list[dict[str, str]]:
        if self.repair:
            return repair_messages(self.task, random.Random(f"eval-repair:{self.task.task_id}"))
        return self.task.clarified_messages(self.task.question) if self.clarified else self.task.messages()

    @property
    def prompt(self) -> str:
        """The default chat format's text (what the default tokenizer's template renders)."""
        return render(self.messages)

    @property
    def wants_edit(self) -> bool:
        return self.clarified or self.repair or not self.task.ambiguous


@dataclass
class Metrics:
    responses: int
    edit_turns: int
    edit_accuracy: float
    broken_rate: float
    malformed_rate: float
    question_rate_ambiguous: float
    question_rate_clear: float
    outcomes: dict[str, int] = field(default_factory=dict)     # correct / wrong / question / broken
    accuracy_by_kind: dict[str, float] = field(default_factory=dict)
    mean_completion_tokens: float = 0.0
    repair_turns: int = 0
    repair_accuracy: float = 0.0


@dataclass
class EvalResult:
    tasks: int
    seed: int
    sampled: Metrics      # temperature 1, untruncated: what serving does
    greedy: Metrics | None
    seconds: float

    def to_dict(self) -> dict:
        return asdict(self)


def turns_of(tasks: Sequence[Task], repairs: bool = False) -> list[Turn]:
    out = []
    for t in tasks:
        out.append(Turn(t, False))
        if t.ambiguous:
            out.append(Turn(t, True))
        if repairs:
            out.append(Turn(t, True, repair=True))
    return out


def _rate(num: int, den: int) -> float:
    return round(num / den, 4) if den else 0.0


def _graded(turns: Sequence[Turn], responses: Sequence[str]):
    """(turn, parsed response, grade) for each turn and its response."""
    for turn, text in zip(turns, responses):
        parsed = parse_response(text)
        yield turn, parsed, grade(turn.task, parsed, clarified=turn.clarified)


def right_edits(turns: Sequence[Turn], responses: Sequence[str]) -> list[tuple[str, int]]:
    """(task id, 1 if the edit is right else 0) for each turn that wants an edit, in turn order: the units of a
    paired comparison of two checkpoints on the same tasks (`edit_accuracy` is their mean)."""
    return [(turn.task.task_id, int(g.correct)) for turn, _, g in _graded(turns, responses) if turn.wants_edit]


def score(turns: Sequence[Turn], responses: Sequence[str], n_tokens: Sequence[int]) -> Metrics:
    """Grade each turn's response and aggregate."""
    outcomes: dict[str, int] = {}
    by_kind: dict[str, list[int]] = {}
    edit_turns = right = broken = malformed = 0
    q_amb = n_amb = q_clear = n_clear = 0
    repaired: list[int] = []
    graded = list(_graded(turns, responses))
    for turn, parsed, g in graded:
        if turn.repair:
            repaired.append(int(g.correct))
            continue
        outcomes[g.outcome] = outcomes.get(g.outcome, 0) + 1
        broken += g.outcome == "broken"
        malformed += parsed.broken > 0
        if turn.wants_edit:
            edit_turns += 1
            right += g.correct
            by_kind.setdefault(turn.task.kind, []).append(int(g.correct))
        if not turn.clarified:
            if turn.task.ambiguous:
                n_amb, q_amb = n_amb + 1, q_amb + (g.outcome == "question")
            else:
                n_clear, q_clear = n_clear + 1, q_clear + (g.outcome == "question")
    n = len(turns) - len(repaired)
    return Metrics(n, edit_turns, _rate(right, edit_turns), _rate(broken, n), _rate(malformed, n),
                   _rate(q_amb, n_amb), _rate(q_clear, n_clear), dict(sorted(outcomes.items())),
                   {k: _rate(sum(v), len(v)) for k, v in sorted(by_kind.items())},
                   round(sum(c for (turn, _, _), c in zip(graded, n_tokens) if not turn.repair) / max(1, n), 1),
                   len(repaired), _rate(sum(repaired), len(repaired)))


def prompts_of(turns: Sequence[Turn], tokenizer) -> list[str]:
    """Each turn's prompt text: the checkpoint's own chat template (any checkpoint; the default's equals
    `render`), else the default chat format."""
    if getattr(tokenizer, "chat_template", None):
        return [tokenizer.apply_chat_template(t.messages, add_generation_prompt=True, tokenize=False) for t in turns]
    return [t.prompt for t in turns]


def generate(model, tokenizer, prompts: Sequence[str], *, sample: bool, max_new_tokens: int, batch_size: int,
             seed: int) -> tuple[list[str], list[int]]:
    """Responses (text up to eos, special tokens skipped, as serving returns them) and their token counts. A Llama
    checkpoint is decoded with `trainer.decode` (transformers' arithmetic and draws, a fraction of its overhead),
    any other with transformers' `generate`; prompts go in left-padded batches of `batch_size`, shortest first."""
    import torch

    from trainer.decode import LlamaDecoder, transformers_generate
    from trainer.decode import generate as lean_generate

    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    texts: list[str] = [""] * len(prompts)
    counts: list[int] = [0] * len(prompts)
    decoder = LlamaDecoder(model) if LlamaDecoder.supports(model) else None
    ends = {"sample": sample, "max_new_tokens": max_new_tokens, "eos_id": tokenizer.eos_token_id,
            "pad_id": tokenizer.pad_token_id}
    torch.manual_seed(seed)
    for k in range(0, len(order), batch_size):
        idx = order[k:k + batch_size]
        rows = [tokenizer(prompts[i], add_special_tokens=False)["input_ids"] for i in idx]
        outs = (lean_generate(model, rows, decoder=decoder, **ends) if decoder is not None
                else transformers_generate(model, rows, **ends))
        for i, ids in zip(idx, outs):
            counts[i] = len(ids)
            texts[i] = tokenizer.decode(ids, skip_special_tokens=True)
    return texts, counts


def evaluate(model, tokenizer, tasks: Sequence[Task], *, max_new_tokens: int, batch_size: int, seed: int,
             log: Callable[[str], None] = print, greedy: bool = True, repairs: bool = True,
             sampled: Metrics | None = None) -> EvalResult:
    """Metrics of sampled (T=1) and, unless `greedy` is False, greedy decoding; `repairs`: a repair turn per task
    too (`repair_accuracy`). `sampled`: the sampled pass of this model on these tasks, seed and repairs, already
    measured (the bootstrap's stop confirmation), taken as it is instead of generated again."""
    import time

    t0 = time.monotonic()
    turns = turns_of(tasks, repairs)
    prompts = prompts_of(turns, tokenizer)
    metrics = {}
    for mode in ("sampled", "greedy") if greedy else ("sampled",):
        if mode == "sampled" and sampled is not None:
            metrics[mode] = sampled
        else:
            texts, counts = generate(model, tokenizer, prompts, sample=mode == "sampled",
                                     max_new_tokens=max_new_tokens, batch_size=batch_size, seed=seed)
            metrics[mode] = score(turns, texts, counts)
        m = metrics[mode]
        log(f"eval {mode}: edit accuracy {m.edit_accuracy:.3f} broken {m.broken_rate:.3f} "
            f"malformed {m.malformed_rate:.3f} questions ambiguous {m.question_rate_ambiguous:.2f} "
            f"clear {m.question_rate_clear:.2f}" + (f" repairs {m.repair_accuracy:.3f}" if m.repair_turns else "")
            + f" ({len(turns)} responses, {time.monotonic() - t0:.0f}s)")
    return EvalResult(len(tasks), seed, metrics["sampled"], metrics.get("greedy"), round(time.monotonic() - t0, 1))
