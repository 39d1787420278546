"""What simulated users write after a response, drawn from template lists.

The reward job's default follow-up classifier (`pipelines.rewards.classifiers`, keyword rules) must label these as
the user meant them: a unit test measures it (at least 90% per list; these lists are all labelled right today).

    WRONG       after a wrong edit (dissatisfied)
    BROKEN      after an edit that could not apply, or a malformed tool call (dissatisfied)
    NEEDLESS    after a question on a request that was clear ("question was unnecessary")
    SATISFIED   after a correct edit (neither)
    RETRY       after a question on a clear request, when the user does not complain: the request again (neither)
The answer to a clarifying question on an ambiguous request is the task's own `clarification` (neither).
"""

from __future__ import annotations

import random

WRONG = (
    "That's wrong, undo it.",
    "No, that's not what I asked for.",
    "This is not right. I reverted it.",
    "You changed the wrong thing.",
    "That is incorrect, please try again.",
    "Not what I wanted at all.",
    "Wrong value, try again.",
    "No, I meant something else. Revert that.",
    "Ugh, that's not it.",
    "That's not correct, the change is wrong.",
    "You misunderstood the request.",
    "This doesn't do what I asked.",
)

BROKEN = (
    "That edit didn't work, the old text is not in the file.",
    "The edit failed to apply. Try again.",
    "Your change doesn't apply to the file, it's broken.",
    "That doesn't work, nothing changed.",
    "The tool call is broken, try again.",
    "It failed. The edit does not match the file.",
    "That edit is broken.",
    "Nothing happened, the edit failed.",
)

NEEDLESS = (
    "Why are you asking? Just do it.",
    "I already told you in my first message.",
    "It's in my request, just do it.",
    "No need to ask, just go ahead.",
    "Obviously. Just do it.",
    "Stop asking and just make the change.",
    "As I said, just do what I asked.",
    "Don't ask, just do it.",
    "It was in my original message. Read it again and just do it.",
    "Why do you keep asking? Just go ahead.",
)

SATISFIED = (
    "Thanks, that works.",
    "Great, thanks!",
    "Perfect.",
    "Looks good, thank you.",
    "Nice, exactly what I needed.",
    "Thanks!",
    "That's right, thanks.",
    "Good, merged it.",
)

RETRY = (
    "{request}",
    "Please: {request}",
    "{request} Thanks.",
)


def pick(rng: random.Random, templates: tuple[str, ...], **fields: str) -> str:
    return rng.choice(templates).format(**fields)
