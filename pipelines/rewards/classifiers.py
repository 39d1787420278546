"""Pluggable follow-up classifiers (docs/rewards.md: the follow-up and clarification-deferral components).

A follow-up classifier reads the user's next message after a response and says, per message,
  dissatisfied          the user is unhappy with the response: it is wrong, broke something, ignored the
                        request, must be undone, or the user is plainly frustrated;   -> r_followup
  question_unnecessary  the user says the question the assistant asked was needless: the answer was already
                        given, is obvious or easy to look up, or the user says "just do it".  -> r_deferral

The reward job classifies hundreds of thousands of messages, so `classify` is vectorized: it takes a polars
String Series and returns a DataFrame with two Boolean columns, one row per text in the same order
(null or empty text -> both False). No Python runs per text.

Which classifier runs is `RewardSpec.classifier` (a name in this registry). Plug in your own with

    @register_classifier
    class MyClassifier:
        name = "mine"
        version = "1"
        def classify(self, texts: pl.Series) -> pl.DataFrame: ...

A classifier's `version` must change whenever its behaviour does (it is stored beside the reward rows); the
default "keywords" classifier uses a hash of its rule set. Measure a classifier on the labelled set shipped in
pipelines/rewards/data/ with `python -m pipelines.rewards.classifier_eval --classifier NAME`.
"""

from __future__ import annotations

import hashlib
import json
from typing import Callable, Protocol, runtime_checkable

import polars as pl

__all__ = [
    "FollowupClassifier",
    "KeywordClassifier",
    "OUTPUT_COLUMNS",
    "get_classifier",
    "known_classifiers",
    "register_classifier",
]

OUTPUT_COLUMNS = ("dissatisfied", "question_unnecessary")


@runtime_checkable
class FollowupClassifier(Protocol):
    """Classifies follow-up messages; see the module docstring for the contract."""

    name: str
    version: str

    def classify(self, texts: pl.Series) -> pl.DataFrame:
        """One row per text, same order: Boolean `dissatisfied`, `question_unnecessary`; null/empty -> False."""
        ...


# --------------------------------------------------------------------------------------------------------------
# The default rule set. Texts are lower-cased and normalised first (curly quotes -> straight, fenced code and
# double-quoted passages removed, whitespace collapsed), so every pattern below is written in lower case; they
# are still compiled case-insensitively. Patterns are Rust-regex syntax (no look-around): negation is handled by
# first rewriting negated / self-attributed phrases ("not wrong", "no problem", "I broke", "undo my commit")
# to a neutral token, then matching the positive patterns.
# --------------------------------------------------------------------------------------------------------------

# Applied in order to the lower-cased text before any rule (pattern, replacement).
_NORMALISE: tuple[tuple[str, str], ...] = (
    (r"[\u2018\u2019\u02bc\u00b4]", "'"),           # curly apostrophes
    (r"[\u201c\u201d]", '"'),
    (r"(?s)```.*?(```|$)", " "),                     # pasted code blocks / tracebacks
    (r"\"[^\"\n]{0,300}\"", " "),                     # quoted passages ("the export button doesn't work")
    (r"[\u2014\u2013]", " - "),
    (r"\s+", " "),
)

# Phrases that look negative but are not complaints about the response: rewritten to " ~ " before matching.
_NEUTRALISE: tuple[str, ...] = (
    # "not wrong", "nothing wrong", "no problem", "no worries", "not a big deal", "not your fault", ...
    r"\b(no|not|nothing|never|isn'?t|wasn'?t|ain'?t)\s+(really\s+|at\s+all\s+|that\s+|even\s+)?"
    r"(wrong|bad|broken|a\s+(big\s+)?(problem|deal|bug|issue|worry)|an\s+issue|worries|worry|problem|problems"
    r"|harm|rush|big\s+deal|your\s+fault|an?\s+error)\b",
    r"\b(doesn'?t|does\s+not|don'?t|won'?t|wouldn'?t)\s+(really\s+|much\s+)?matter\b",
    r"\b(my|on\s+my)\s+(bad|fault|mistake|side|end)\b",
    # the user's own actions or mistakes
    r"\bi('ve|\s+have)?\s+(had|pushed|used|set|typed|gave\s+you|passed|sent|made|picked|wrote)\s+(the|a)\s+wrong\b",
    r"\bwrong\s+\w+\s+(was|is)\s+(my|on\s+my|in\s+my)\b",
    r"\bi('ve|\s+have)?\s+(broke|broken|undid|undone|reverted|deleted|removed|messed\s+up)\b",
    r"\b(undo|revert|roll\s+back)\s+my\b",
    r"\bhow\s+(do|can|would|should|could)\s+(i|we|you)\s+(undo|revert|roll\s+back|delete|remove)\b",
    # "doesn't break on unicode", "check if this breaks anything"
    r"\b(doesn'?t|does\s+not|won'?t|will\s+not|not|never|without)\s+(break|breaking|breaks|crash|crashing|fail)\b",
    r"\b(if|whether)\s+(this|it|that|anything)\s+(breaks|broke|will\s+break)\b",
    r"\bnot\s+what\s+i('d|\s+would)\b",  # "not what I'd have done, but it works"
    r"\b(glad|good|great|nice)\b[^.!?]{0,20}\b(fixed|works|working)\b",
)

# Dissatisfied with the response.
_DISSATISFIED: tuple[str, ...] = (
    # not what I asked / meant / wanted
    r"\bnot\s+(at\s+all\s+)?what\s+i\s+(asked|wanted|meant|said|need|needed|requested|expected)",
    r"\bopposite\s+of\s+what\b",
    r"\b(that|this|it)('s|\s+is|\s+was)\s+(still\s+)?not\s+(it|right|correct|a\s+fix|a\s+solution|working|what)\b",
    r"\bnot\s+(quite\s+|even\s+|exactly\s+)?(right|correct|close)\b",
    r"\b(wrong|incorrect|worse|garbage|useless|nonsense|pointless|a\s+hack|a\s+mess|overkill|overcomplicated"
    r"|over-?engineered)\b",
    r"\bmess(ed)?\s+up\b",
    # I didn't ask / I said / no, I meant
    r"\bi\s+(didn'?t|did\s+not|never)\s+(ask|want|say|tell|request)\b",
    r"\bi\s+(said|asked|told\s+you|wanted|explicitly)\b[^.!?]{0,60}\b(not|don'?t|isn'?t|never|only)\b",
    r"\b(no|nope|nah),?\s+i\s+(meant|mean|said|wanted|asked)\b",
    r"\bthe\s+other\s+way\s+(around|round)\b",
    # undo / revert / put back / try again
    r"^\W*(undo|revert|roll\s*back|rollback|put\s+(it|that|them)\s+back)\b",
    r"\b(undo|revert|roll\s*back)\s+(that|this|it|everything|all|your|the\s+(last|previous|recent)"
    r"|the\s+changes?|the\s+edits?|these|those)\b",
    r"\b(reverted|undid|rolled\s+back)\s+(your|the|this|that|it)\b",
    r"\bput\s+(it|that|them|this)?\s*back\b",
    r"\btry\s+again\b",
    # still broken / doesn't work / same error
    r"\bstill\s+(broken|fail\w*|not|isn'?t|doesn'?t|does\s+not|don'?t|didn'?t|won'?t|can'?t|getting|seeing|see|"
    r"the\s+same|same|throw\w*|crash\w*|error\w*|red|slow|wrong|happening|there|returns|returning|using|prints|"
    r"printing|off|has|shows|showing|closes|hangs|timing|breaks|missing|empty|undefined|null|none|no\b|404|500)",
    r"\b(doesn'?t|does\s+not|didn'?t|did\s+not|isn'?t|is\s+not|not|won'?t|will\s+not|wont|can'?t|cannot|never)\s+"
    r"(work|works|working|worked|compile|compiles|compiling|help|helping|helped|fix|fixed|build|builds|run|start"
    r"|starts|load|loads|address|handle|solve|change\s+anything|terminate|terminates|finish|return|exist|exists"
    r"|valid|defined|understand|get\s+it|listen|listening|read|match|matches|parse|parses|catch|cover|do\s+anything"
    r"|do\s+what)\b",
    r"\bsame\s+(error|output|result|issue|problem|exception|bug|warning|behaviou?r|thing|crash|failure|404|500)",
    r"\bnothing\s+(changed|happens|happened|works|renders|shows)\b",
    # broke / broken / fails now / crashes ...
    r"\b(broke|broken|breaks|breaking)\b",
    r"\b(you|u)('ve|\s+have)?\s+(broke|broken|deleted|removed|dropped|overwrote|overwritten|ignored|forgot|forgotten"
    r"|misread|misunderstood|hallucinated|made\s+up|duplicated|hardcoded|hard-coded|swallowed|rewrote|rewritten"
    r"|wrapped|changed\s+the|put\s+the|edited|missed|skipped|reintroduced)\b",
    r"\b(misunderst\w*|misread|hallucinat\w*|made\s+up|making\s+(things|stuff)\s+up|going\s+in\s+circles"
    r"|reintroduc\w*|regress\w*)\b",
    r"\b(crash\w*|segfault\w*|panics?|panicked|hangs|hanging|forever|memory\s+leak|infinite\s+loop|timing\s+out"
    r"|times\s+out|vulnerab\w*|injection)\b",
    r"\bnow\b[^.!?]{0,60}\b(fail\w*|error\w*|exception|red|blank|empty|broken|undefined|circular|duplicates?"
    r"|screaming|warn\w*|slower|worse|gone|a\s+string|404|500|3gb|string)\b",
    r"\b(fails?|failing|failures?|errors?|crash\w*|red|blank|empty|broken|gone)\s+now\b",
    r"\b(after|since)\s+(your|the|this|that)\s+(change|edit|patch|fix|commit|update)s?\b",
    r"\bsince\s+this\b",
    r"\b(before|prior\s+to)\s+(your|the|this)\s+(change|patch|edit|fix)",
    r"\b(was|were)\s+(working|fine|passing)\b|\bused\s+to\s+work\b|\b(passed|worked)\s+before\b",
    r"\b(fix|fixed)\s+your\s+fix\b|\bfix\s+(it|this)\s+again\b",
    r"\b(is|are|was)\s+(now\s+)?(gone|missing)\b|\bit'?s\s+gone\b|\bwhere\s+did\s+(my|the)\b",
    r"\b(is|are|still)\s+off\b",
    r"\b(is|was|been)\s+deprecated\b",
    r"\bno\s+such\b",
    r"\bdid\s+(you|u)\s+(even\s+)?(read|look|test|run|check|try)\b",
    r"\bi\s+don'?t\s+think\s+(you|u)\s+(understood|understand|get|got|read)\b",
    # why did you / why is there ...
    r"\bwhy+\s+(did|would|have|has|'d)\s+(you|u)\b",
    r"\bwhy\s+(is|are)\s+(there|everything|it|this|my)\b",
    r"\bwhat\s+did\s+(you|u)\s+do\b",
    # don't touch / stop changing
    r"\b(don'?t|do\s+not|stop|never)\s+(touch|touching|change|changing|rewrite|rewriting|modify|modifying|do\s+that"
    r"|delete|deleting|remove|removing|overwrite)\b",
    # a bare "no" / "nope" / "no no no"
    r"^\W*(no+|nope|nah|wrong)\W*$",
    r"^\W*no+\W+no+\b",
    r"^\W*(no+|nope|nah)\W+(just\s+no|still)\b",
    # frustration markers
    r"\b(ugh+|argh+|urgh+|wtf|ffs|omg|damn|dammit|bruh|meh|smh|seriously|come\s+on|frustrat\w*|annoying|ridiculous"
    r"|terrible|awful|horrible|sigh)\b",
    r"\?\?",
    r"\bthird\s+time\b|\bagain\?",
)

# The user says the assistant's question was unnecessary.
_QUESTION_UNNECESSARY: tuple[str, ...] = (
    # I already told you / as I said
    r"\b(already|literally\s+just|just)\s+(told|said|mentioned|explained|answered|gave|specified|wrote|stated|"
    r"asked|replied)\b",
    r"\bi('ve|\s+have)?\s+(already\s+)?(told|said|mentioned|explained|answered|gave|specified|wrote|stated)\b"
    r"[^.!?]{0,50}\b(already|before|earlier|twice|\d+\s+times|multiple\s+times|at\s+the\s+start|at\s+the\s+beginning"
    r"|in\s+my|first|original|above|again)\b",
    r"\b(as|like)\s+i\s+(said|mentioned|explained|told\s+(you|u)|wrote|stated|specified)\b",
    r"\btold\s+(you|u)\s+(this\s+|that\s+)?(already|twice|before|\d+\s+times|multiple\s+times|again)\b",
    r"\b(same\s+as|like)\s+(i\s+said\s+)?before\b",
    r"\b(it|that|this)\s+(was|is)\s+in\s+my\s+(first|original|initial|previous|last)?\s*(message|request|prompt"
    r"|question|description)",
    r"\bin\s+(my|the)\s+(first|original|initial)\s+(message|request|prompt)",
    r"\bi\s+(wrote|said|put)\b[^.!?]{0,40}\b(in|at)\s+the\s+(task|description|issue|ticket|start|beginning|first)",
    r"\b(re-?read|read\s+(my|the)\s+(message|request|prompt|question)|read\s+more\s+carefully)\b",
    r"\b(asked|ask)\s+(me\s+)?(this|that|the\s+same)\s+(same\s+)?question\b",
    # obviously / of course
    r"\b(obviously|of\s+course|duh|self[- ]explanatory|it'?s\s+obvious|clearly\s+yes|that'?s\s+a\s+yes)\b",
    r"\bwhy\s+(would|wouldn'?t)\s+i\b",
    r"\b(that|this)('s|\s+is|\s+was)\s+the\s+(whole\s+)?point\b",
    r"^\W*(i\s+mean\W+)?(yes|yeah|yep)\s*\?",
    # stop asking / just do it
    r"\b(why|what)\s+(are|do)\s+(you|u)\s+(keep\s+)?ask",
    r"\bwhy\s+do\s+(you|u)\s+keep\b",
    r"\b(stop|quit)\s+(asking|checking\s+in|bothering)",
    r"\b(don'?t|do\s+not|no\s+need\s+to|didn'?t\s+need\s+to|don'?t\s+need\s+to|don'?t\s+have\s+to|no\s+reason\s+to"
    r"|shouldn'?t\s+(need|have)\s+to|never\s+need\s+to)\s+(ask|check\s+with\s+me|confirm)",
    r"\bno\s+need\s+to\s+(ask|check|confirm)",
    r"\b(don'?t|do\s+not)\s+(need|want)\s+(my|to\s+ask\s+for)?\s*(permission|confirmation|approval)",
    r"\b(ask|asking)\s+(me\s+)?(for\s+)?(to\s+)?(confirm\w*|permission|approval)",
    r"\b(check|checking)\s+(in\s+)?with\s+me\b",
    r"\bjust\s+(do\s+it|go\s+ahead|pick\s+(one|something|any)|make\s+(it\s+work|a\s+reasonable|something|a\s+call)"
    r"|use\s+your|decide|get\s+on\s+with\s+it)\b",
    r"\buse\s+your\s+(best\s+)?(own\s+)?judge?ment\b",
    r"\b(pick|choose|make)\s+(a\s+)?(reasonable|sensible)\b",
    r"\bdoes\s+it\s+(really\s+)?matter\s*\?",
    r"\bi\s+don'?t\s+care\b",
    r"\bwhatever\s+(you\s+think|works|is\s+fine)\b",
    # you could have looked it up
    r"\b(you\s+could\s+have|you\s+can|you\s+could)\s+(just\s+)?(check\w*|look\w*|read|find|figure|run|see|open"
    r"|grep)\b[^.!?]{0,40}",
    r"\b(look\s+it\s+up|check\s+(it\s+|that\s+)?yourself|figure\s+(it|that)\s+out|yourself)\b",
    r"\b(read|check|open)\s+the\s+(file|docs|code|readme|error|config|logs?)\b",
    r"\b(it'?s|it\s+is|that'?s|it\s+was|answer\s+is)\s+(all\s+)?(right\s+|literally\s+)?(there|in\s+the\s+(readme"
    r"|config|docs|issue|file|error|stack|code|description|ticket|signature|task))\b",
    r"\bright\s+there\s+in\b|\bliterally\s+in\b",
    r"\b(you\s+have|you'?ve\s+got)\s+(the\s+file|access|it)\b",
)


def _alternation(patterns: tuple[str, ...]) -> str:
    return "(?i)" + "|".join(f"(?:{p})" for p in patterns)


def _as_string_series(texts: pl.Series | list | tuple) -> pl.Series:
    if not isinstance(texts, pl.Series):
        texts = pl.Series("text", list(texts), dtype=pl.String)
    if texts.dtype == pl.Null:
        return pl.Series(texts.name, [None] * len(texts), dtype=pl.String)
    return texts.cast(pl.String)


class KeywordClassifier:
    """The default hand-built rule set (see the pattern tables above); vectorized polars regexes."""

    name = "keywords"

    def __init__(self,
                 dissatisfied: tuple[str, ...] = _DISSATISFIED,
                 question_unnecessary: tuple[str, ...] = _QUESTION_UNNECESSARY,
                 neutralise: tuple[str, ...] = _NEUTRALISE) -> None:
        self._dissatisfied = _alternation(dissatisfied)
        self._question = _alternation(question_unnecessary)
        self._neutralise = _alternation(neutralise)
        blob = json.dumps({"d": list(dissatisfied), "q": list(question_unnecessary), "n": list(neutralise),
                           "normalise": [list(p) for p in _NORMALISE]}, sort_keys=True).encode()
        self.version = "kw-" + hashlib.sha256(blob).hexdigest()[:12]

    @staticmethod
    def _normalised(col: pl.Expr) -> pl.Expr:
        col = col.fill_null("").str.to_lowercase()
        for pattern, replacement in _NORMALISE:
            col = col.str.replace_all(pattern, replacement)
        return col.str.strip_chars()

    def classify(self, texts: pl.Series) -> pl.DataFrame:
        s = _as_string_series(texts)
        norm = self._normalised(pl.col("t"))
        neutral = norm.str.replace_all(self._neutralise, " ~ ")
        return pl.DataFrame({"t": s}).select(
            dissatisfied=neutral.str.contains(self._dissatisfied).fill_null(False),
            question_unnecessary=norm.str.contains(self._question).fill_null(False),
        )


# --------------------------------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------------------------------

_REGISTRY: dict[str, Callable[[], FollowupClassifier]] = {}


def register_classifier(cls):
    """Register a classifier class (or zero-argument factory) under its `name`; usable as a decorator.

    Re-registering a name replaces the previous entry (so a user can override "keywords")."""
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name:
        raise ValueError(f"a follow-up classifier needs a non-empty str `name`; got {name!r} on {cls!r}")
    if not callable(getattr(cls, "classify", None)):
        raise ValueError(f"follow-up classifier {name!r} has no classify(texts) method")
    _REGISTRY[name] = cls
    return cls


def known_classifiers() -> list[str]:
    return sorted(_REGISTRY)


def get_classifier(name: str) -> FollowupClassifier:
    """A fresh instance of the classifier registered as `name`; ValueError listing the known names if none."""
    try:
        factory = _REGISTRY[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown follow-up classifier {name!r}; known: {', '.join(known_classifiers())}. "
                         "Register one with pipelines.rewards.classifiers.register_classifier.") from None
    clf = factory()
    if not isinstance(getattr(clf, "version", None), str):
        raise ValueError(f"follow-up classifier {name!r} has no str `version`")
    return clf


register_classifier(KeywordClassifier)
