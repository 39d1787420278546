"""Secret redaction for free text that leaves the client (docs/reliability-security.md: secrets never leave the client).

`redact(text) -> (text, n)` replaces each secret with `[REDACTED:<kind>]` and says how many it replaced. It runs
on the SDK's sender thread, so every pattern is compiled once and most are anchored on a literal prefix.

What counts as a secret (in the order the rules run):
  * private key blocks (`-----BEGIN ... PRIVATE KEY-----` to the matching END, or to the end of a cut-off text);
  * JWTs (three base64url parts, the first two starting `eyJ`);
  * tokens of common providers, recognised by their documented prefixes (AWS, GitHub, GitLab, Slack, Stripe,
    OpenAI, Anthropic, Google, Twilio, SendGrid, npm, PyPI, Hugging Face, Azure, Heroku, DigitalOcean, Shopify,
    Square, Mailgun, Databricks, Telegram);
  * the password in a URL (`scheme://user:pass@host` keeps user and host);
  * the credential in an `Authorization:` header or after `Bearer`;
  * the value assigned to a secret-named key (`password`, `secret`, `token`, `api_key`, `SECRET_KEY`, `clientSecret`...)
    in code, JSON, YAML, INI or env files -- when the value is a literal, not code (see `_assigned_secret`);
  * any other assigned string literal of 20+ characters that looks random (Shannon entropy, mixed classes).

Decisions about ordinary text, so that code survives unchanged:
  * a secret-named key whose value is code (`password = get_password()`, `token = request.token`,
    `password: str`, `token = None`, `{password: password}`) is not touched; an INI line `password = word` with a
    plain identifier value is read as code for the same reason, unless the value has characters no identifier has;
  * keys that merely contain a secret word are not secret-named (`token_count`, `max_tokens`, `secret_name`,
    `password_hash`, `author`); placeholders (`<your-key>`, `${TOKEN}`, `{{ secret }}`, `xxxx`, `****`) stay;
  * tokenizer specials (`eos_token = "</s>"`, `unk_token: "[UNK]"`) are placeholders by this rule;
  * hex strings (git SHAs, checksums, UUIDs) are not caught by the entropy rule: they are usually hashes. Hex
    secrets are caught by their provider prefix or by a secret-named key. Keys naming hashes or ids (`sha`,
    `digest`, `checksum`, `integrity`, `commit`, `*_id`) are skipped by the entropy rule.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Callable, Iterable, Iterator, Pattern

from instrumentation import secret_patterns as P

MARK = "[REDACTED:{}]"
_MARK_PREFIX = "[REDACTED:"
ENTROPY_MIN_LEN = 20
ENTROPY_THRESHOLD = 3.8  # bits per character; random base62 of 20 chars scores about 4.0, English-ish words < 3.5
_TOKEN_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")
_DIGITS = frozenset("0123456789")
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")

Span = tuple[int, int]
Finder = Callable[[str, str], Iterable[Span]]  # (text, ASCII-lowered text) -> spans of secrets


def shannon_entropy(s: str) -> float:
    """Bits per character of `s` under its own character frequencies."""
    n = len(s)
    return -sum(c / n * math.log2(c / n) for c in Counter(s).values()) if n else 0.0


def looks_random(value: str) -> bool:
    """The entropy rule: long, not hex, letters mixed with digits, not mostly words, high Shannon entropy."""
    if len(value) < ENTROPY_MIN_LEN or P.HEX.match(value) or "://" in value:
        return False
    digits = sum(ch in _DIGITS for ch in value)
    if digits < 2 or sum(ch.isalpha() for ch in value) < 4:
        return False
    if value.count(".") >= 2 and all(part.isidentifier() for part in value.split(".")):
        return False  # a dotted module path
    if sum(map(len, P.WORDISH.findall(value))) * 2 >= len(value):
        return False  # mostly words (`meta-llama/Llama-3.1-8B`, `handleUserLogin2`): a name, not a key
    if P.UUID.search(value):
        return False  # an id with a UUID in it (`alarm-fc0e4183-23ac-497e-9992-691c9980c38e`)
    longest = max(P.SEPARATORS.split(value), key=len)
    if len(longest) < 16:
        return False  # short segments between separators: a path or a generated name, not one random key
    return shannon_entropy(value) >= ENTROPY_THRESHOLD


def _is_placeholder(value: str) -> bool:
    return not value or _MARK_PREFIX in value or bool(P.PLACEHOLDER.match(value))


def _has_digit(value: str) -> bool:
    return not _DIGITS.isdisjoint(value)


# -- finders ------------------------------------------------------------------------------------------------
def _whole_token(pattern: Pattern[str]) -> Finder:
    """The whole match, when it is not the tail of a longer token."""
    def find(text: str, low: str) -> Iterator[Span]:
        for m in pattern.finditer(text):
            s = m.start()
            if (s == 0 or text[s - 1] not in _TOKEN_CHARS) and _MARK_PREFIX not in m.group(0):
                yield m.span()
    return find


def _secret_group(patterns: Pattern[str] | tuple[Pattern[str], ...], lowered: bool = False, before: str = "",
                  word_start: bool = False, accept: Callable[[re.Match, str], bool] | None = None) -> Finder:
    """The `secret` group of each match (on the lowered text if `lowered`), unless it is a placeholder."""
    patterns = patterns if isinstance(patterns, tuple) else (patterns,)

    def find(text: str, low: str) -> Iterator[Span]:
        matches = [m for p in patterns for m in p.finditer(low if lowered else text)]
        for m in sorted(matches, key=lambda m: m.start()) if len(patterns) > 1 else matches:
            s, e = m.span("secret")
            if before and (m.start() == 0 or text[m.start() - 1] not in before):
                continue
            if word_start and m.start() and (text[m.start() - 1].isalnum() or text[m.start() - 1] == "_"):
                continue  # `EndpointAuthorization`, `nobearer`: the name is the tail of a longer word
            if _is_placeholder(text[s:e].strip("\"'`")) or (accept is not None and not accept(m, text[s:e])):
                continue
            yield s, e
    return find


def _auth_value(m, value: str) -> bool:
    """Without a scheme word an Authorization value must look like a credential, not code."""
    return m.group("scheme") is not None or (_has_digit(value) and "." not in value)


def _telegram(text: str, low: str) -> Iterator[Span]:
    for m in P.TELEGRAM_TAIL.finditer(text):
        j = m.start()
        while j > 0 and m.start() - j <= 10 and text[j - 1] in _DIGITS:
            j -= 1
        if 8 <= m.start() - j <= 10 and (j == 0 or not text[j - 1].isalnum()):
            yield j, m.end()


def _assignments(text: str, low: str) -> Iterator[Span]:
    """Values assigned to secret-named keys (see `_assigned_secret`), in order of position."""
    found = []
    for word in P.SECRET_WORDS:
        i = low.find(word)
        while i != -1:
            end = i + len(word)
            if end >= len(low) or low[end] not in _TOKEN_CHARS or low[end] == "-":
                span = _assignment_at(text, low, i, end, word)
                if span is not None:
                    found.append(span)
            i = low.find(word, end)
    return sorted(found)


def _assignment_at(text: str, low: str, i: int, end: int, word: str) -> Span | None:
    start = i
    while start > 0 and i - start < 40 and text[start - 1] in P.KEY_CHARS:
        start -= 1
    key = text[start:end]
    if word == "key" and not low[start:end].replace("_", "").replace("-", "").replace(".", "").endswith(
            P.KEY_SUFFIXES):
        return None
    m = P.ASSIGN_TAIL.match(text, end)
    if m is None:
        return None
    return _assigned_secret(m, key, human=word in P.HUMAN_CHOSEN)


def _credential_like(value: str) -> bool:
    """A machine-made credential (token, key) has digits or is long and not made of words; it is not a dotted
    name (`keyword.$0`, `type.identifier`: JWTs and other dotted tokens are caught by their own rules)."""
    if len(value) < 8 or ("." in value and not looks_random(value)):
        return False
    return _has_digit(value) or (len(value) >= 16 and looks_random(value + "00"))


def _assigned_secret(m, key: str, human: bool) -> Span | None:
    """Where the secret is in `key <sep> value`, or None when the value is code or a placeholder, not a literal."""
    raw, start, sep = m.group("value"), m.start("value"), m.group("sep").strip()
    body = raw[2:-2] if raw.startswith('\\"') else raw.lstrip("bBrRuUfF")
    if raw.startswith('\\"') or (body[:1] in ("\"", "'", "`") and len(body) >= 2):
        inner = body if raw.startswith('\\"') else body[1:-1]
        prefix = raw[:len(raw) - len(body)].lower()
        if _is_placeholder(inner.strip()) or ("{" in inner and ("f" in prefix or body[0] == "`")):
            return None  # empty, a placeholder, or an interpolated template (f"{...}", `${...}`)
        if not human and not _credential_like(inner):
            return None  # `upgrade_token = "upgrades"`: a word, not a machine-made credential
        if (inner.upper() == inner and inner.replace("_", "").isalpha() and len(inner) > 3) or \
                inner.lower() == key.strip("\"'").lower():
            return None  # `USERNAME_PASSWORD = "USERNAME_PASSWORD"`: an enum-style constant or the key's own name
        offset = 2 if raw.startswith('\\"') else len(raw) - len(body) + 1
        return start + offset, start + offset + len(inner)
    if (_is_placeholder(raw) or len(raw) < 3 or raw[0] in "$%&*@!#(-?:/~<" or "(" in raw or "[" in raw
            or "{" in raw or raw.lstrip("-").replace(".", "").isdigit() or raw.endswith(":")
            or P.OPERATORS.search(raw)):
        return None  # a reference, call, subscript, expression, path, number or placeholder: code
    if not human and not _credential_like(raw):
        return None
    if P.CODE_VALUE.match(raw):
        tight = m.group("sep") == "="  # `KEY=value` (.env, shell, URLs, logs) rather than `key = value` (code)
        if not (tight and (key.isupper() or _has_digit(raw))):  # a literal even if wordy, or if it has digits
            if "." in raw or raw in P.TYPE_NAMES or sep in ("=", ":=", "=>"):
                return None  # a reference (`token = request.token`) or an annotation (`password: str`)
            if any(w in raw.lower() for w in ("pass", "secret", "token", "key", "cred", "auth", "pwd")):
                return None  # `{password: password}`, `apiKey: userApiKey`
            if P.CAMEL_CASE.match(raw) or not P.LINE_REST_IS_EMPTY.match(m.string, m.end()):
                return None  # a camelCase variable, or prose (`:param token: the token to use`)
    return start, start + len(raw)


def _random_literals(text: str, low: str) -> Iterator[Span]:
    """Assigned string literals that look random (the entropy rule), whatever the key is called."""
    for m in P.QUOTED_LITERAL.finditer(text):
        value = m.group("secret")
        if not looks_random(value) or value[:3].lower() == "sha":
            continue
        km = P.ASSIGNED_BEFORE.search(text, max(0, m.start() - 80), m.start())
        if km is not None and not P.HASH_KEYS.search(km.group("key")):
            yield m.span("secret")


RULES: list[tuple[str, Finder, tuple[str, ...], bool]] = [
    ("private_key", _whole_token(P.PRIVATE_KEY), ("-----BEGIN",), False),
    ("jwt", _whole_token(P.JWT), ("eyJ",), False),
    *[(kind, _whole_token(re.compile(pattern)), hints, False) for kind, hints, pattern in P.PROVIDER_TOKENS],
    ("telegram_bot_token", _telegram, (":AA",), False),
    ("url_password", _secret_group(P.URL_PASSWORD), ("://",), False),
    ("azure_key", _secret_group(P.AZURE_KEYS), ("AccountKey=", "SharedAccessKey=", "SharedSecretValue="), False),
    ("azure_sas", _secret_group(P.AZURE_SAS, before="?&"), ("sig=",), False),
    ("authorization", _secret_group(P.AUTH_HEADER, lowered=True, word_start=True, accept=_auth_value),
     ("authorization",), True),
    ("bearer_token", _secret_group(P.BEARER, lowered=True, word_start=True, accept=lambda m, v: _has_digit(v)),
     ("bearer",), True),
    ("api_key_header", _secret_group(P.API_KEY_HEADERS, lowered=True, word_start=True),
     ("api-key", "auth-token", "access-token", "subscription-key"), True),
    ("cli_secret", _secret_group(P.CLI_FLAG, lowered=True), ("--",), False),
    ("assignment", _assignments, (), False),
    ("high_entropy", _random_literals, ("\"", "'", "`"), False),
]
"""(kind, finder, hints, hints_are_lowercase) in the order they run, each on the text as the rules before it
left it. A rule runs only if one of its hints occurs in the text (or in the lowered text); () = always."""


def _lower(text: str) -> str:
    return text.lower() if text.isascii() else text.translate(_ASCII_LOWER)  # same length either way


def redact(text: str) -> tuple[str, int]:
    """`text` with every secret replaced by `[REDACTED:<kind>]`, and the number of replacements."""
    if not text:
        return text, 0
    total, low = 0, _lower(text)
    for kind, find, hints, on_lowered in RULES:
        if hints and not any(h in (low if on_lowered else text) for h in hints):
            continue
        spans = list(find(text, low))
        if not spans:
            continue
        mark, out, pos = MARK.format(kind), [], 0
        for s, e in spans:
            if s < pos or e <= s:
                continue  # overlaps a span already replaced by this rule
            out += (text[pos:s], mark)
            pos = e
            total += 1
        out.append(text[pos:])
        text = "".join(out)
        low = _lower(text)
    return text, total
