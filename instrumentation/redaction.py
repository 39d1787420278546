"""Secret redaction for free text that leaves the client (docs/security.md: secrets never leave the client).

`redact(text) -> (text, n)` replaces each secret with `[REDACTED:<kind>]` and says how many it replaced. It runs
on the SDK's sender thread, so every pattern is compiled once and most are anchored on a literal prefix.

What counts as a secret (in the order the rules run):
  * private key blocks (`-----BEGIN ... PRIVATE KEY-----` to the matching END, or to the end of a cut-off text);
  * JWTs (three base64url parts, the first two starting `eyJ`);
  * tokens of common providers, recognised by their documented prefixes (AWS, GitHub, GitLab, Slack, Stripe,
    OpenAI, Anthropic, Google, Twilio, SendGrid, npm, PyPI, Hugging Face, Azure, Heroku, DigitalOcean, Shopify,
    Square, Mailgun, Databricks, Docker Hub, Vault, Grafana), Telegram bot tokens (also inside
    `api.telegram.org/bot<token>/` URLs) and Discord bot tokens (whose first part must decode to a numeric id);
  * the password in a URL (`scheme://user:pass@host` keeps user and host), and a key that is the whole userinfo
    (`https://<32 hex>@o1.ingest.sentry.io/2`, a Sentry DSN);
  * the credential in an `Authorization:` header or after `Bearer`;
  * passwords on command lines: `--password=`-style flags, and the short flags of the commands that take one
    (`mysql -pX`, `sshpass -p X`, `curl -u user:X`, `docker login -p X`, `redis-cli -a X`, `openssl -passin
    pass:X`...); `.netrc` `password` entries and `.pgpass` lines;
  * the value assigned to a secret-named key (`password`, `secret`, `token`, `api_key`, `SECRET_KEY`, `clientSecret`...)
    in code, JSON, YAML, INI or env files -- when the value is a literal, not code (see `_assigned_secret`). On a
    `KEY=value` env line, and on a `key = value` line under an INI `[section]`, the value is the whole rest of the
    line (or up to the first blank for env), punctuation included (see `_line_value`);
  * an AWS secret access key pasted bare (see `_aws_secret` for why it is told from other base64);
  * any other assigned string literal of 20+ characters that looks random (Shannon entropy, mixed classes).

No rule stops at a length cap: the whole value, up to its delimiter, is replaced, however long.

Decisions about ordinary text, so that code survives unchanged:
  * a secret-named key whose value is code (`password = get_password()`, `token = request.token`,
    `password: str`, `token = None`, `{password: password}`) is not touched; a line `password = word` with a
    plain identifier value is read as code for the same reason, unless the value has characters no identifier has
    or the line is under an INI `[section]` header (config, where a value is never code);
  * keys that merely contain a secret word are not secret-named (`token_count`, `max_tokens`, `secret_name`,
    `password_hash`, `author`); placeholders (`<your-key>`, `${TOKEN}`, `{{ secret }}`, `xxxx`, `****`) stay;
  * tokenizer specials (`eos_token = "</s>"`, `unk_token: "[UNK]"`) are placeholders by this rule;
  * hex strings (git SHAs, checksums, UUIDs) are not caught by the entropy rule: they are usually hashes. Hex
    secrets are caught by their provider prefix or by a secret-named key. Keys naming hashes or ids (`sha`,
    `digest`, `checksum`, `integrity`, `commit`, `*_id`) are skipped by the entropy rule.
"""

from __future__ import annotations

import base64
import binascii
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
_HOST_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.*-")
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
    """`<8-10 digits>:AA<33>`, standing alone or after `bot` (the Bot API's URLs: `/bot<token>/sendMessage`)."""
    for m in P.TELEGRAM_TAIL.finditer(text):
        j = m.start()
        while j > 0 and m.start() - j <= 10 and text[j - 1] in _DIGITS:
            j -= 1
        if 8 <= m.start() - j <= 10 and (j == 0 or not text[j - 1].isalnum() or low[j - 3:j] == "bot"):
            yield j, m.end()


def _discord(text: str, low: str) -> Iterator[Span]:
    """`<id part>.<6>.<27+>` where the id part (24-26 base64url characters, a token start) decodes to the 17-20
    digits of a Discord id: that decoding, not the shape, tells a token from other dotted base64."""
    for m in P.DISCORD_TAIL.finditer(text):
        j = s = m.start()
        while j > 0 and s - j <= 26 and text[j - 1] in _TOKEN_CHARS:
            j -= 1
        if 24 <= s - j <= 26 and (j == 0 or text[j - 1] not in _TOKEN_CHARS) and _is_numeric_id(text[j:s]):
            yield j, m.end()


def _is_numeric_id(part: str) -> bool:
    if part[0] not in "MNO":  # base64 of an ASCII digit starts M, N or O
        return False
    try:
        raw = base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
    except (binascii.Error, ValueError):
        return False
    return 17 <= len(raw) <= 20 and raw.isdigit()


def _url_token(m, value: str) -> bool:
    """A whole userinfo is a key when it is 32+ hex (Sentry's DSN key) or looks random; a user name is neither."""
    return (len(value) >= 32 and bool(P.HEX.match(value))) or looks_random(value)


def _literal_arg(m, value: str) -> bool:
    """A command-line argument that is a literal, not `$VAR`, `"$VAR"`, `$(cmd)` or a backtick command."""
    inner = value.strip("\"'")
    return bool(inner) and inner[0] != "$" and "$(" not in inner and "`" not in inner


def _command_flag(command: Pattern[str], flag: Pattern[str]) -> Finder:
    """The literal argument of `flag` when `command` is the command it was given to (on the same command line)."""
    def find(text: str, low: str) -> Iterator[Span]:
        for m in flag.finditer(text):
            value = m.group("secret")
            if (not _is_placeholder(value.strip("\"'")) and _literal_arg(m, value)
                    and command.search(text, _command_line_start(text, m.start()), m.start() + 1)):
                yield m.span("secret")
    return find


def _command_line_start(text: str, pos: int) -> int:
    """Where the shell command that `pos` is part of starts: its line and the lines it continues (those ending in
    a backslash), after any `|` or `;`; at most 512 characters back."""
    lo, j = max(0, pos - 512), pos
    while True:
        k = text.rfind("\n", lo, j)
        if k == -1:
            start = lo
            break
        if text[k - 1:k] == "\\" or text[k - 2:k] == "\\\r":
            j = k - 1
            continue
        start = k + 1
        break
    return max(start, text.rfind("|", start, pos) + 1, text.rfind(";", start, pos) + 1)


def _netrc_or_pgpass_value(value: str) -> bool:
    return not _is_placeholder(value) and value[0] != "$" and not value.isdigit()


def _pgpass(text: str, low: str) -> Iterator[Span]:
    """`host:port:database:user:password` alone on a line; the host is what precedes `:port:` on the line."""
    for m in P.PGPASS.finditer(text):
        s, e = m.span("secret")
        j = m.start()
        while j > 0 and m.start() - j <= 253 and text[j - 1] in _HOST_CHARS:
            j -= 1
        if (j < m.start() and (j == 0 or text[j - 1] == "\n") and (e == len(text) or text[e] in "\r\n")
                and not m.group("db").isdigit() and not m.group("user").isdigit()
                and _netrc_or_pgpass_value(text[s:e])):
            yield s, e


def _aws_secret(text: str, low: str) -> Iterator[Span]:
    """A bare 40-character AWS secret access key (`wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY`).

    Why this rule holds: AWS secret keys are 30 random bytes in base64, exactly 40 characters of [A-Za-z0-9/+] with
    no padding. Hashes written as text are hex (no mixed case: git SHAs, SHA-1 are 40 hex characters) or base64 of
    16/20/32/64 bytes (24/28/44/88 characters, padded with `=`), so none has this length unpadded. A run of 40 such
    characters in ordinary text is otherwise a path or a long identifier, which is made of words and has little
    entropy. So a candidate must stand alone (no token character on either side), mix upper case, lower case and
    digits, not be mostly lowercase words, have high entropy (random base64 of 40 scores about 4.9 bits per
    character), contain few separators (a path has many), and either contain `/` or `+` (an identifier has none)
    or follow the words `aws` or `secret` within 80 characters."""
    first = P.AWS_SECRET_AT_START.match(text)
    for m in ([first] if first else []) + list(P.AWS_SECRET_BARE.finditer(text)):
        value, (s, e) = m.group("secret"), m.span("secret")
        if (sum(ch.isupper() for ch in value) < 2 or sum(ch.islower() for ch in value) < 2
                or not _has_digit(value) or value.count("/") + value.count("+") > 4):
            continue
        if sum(map(len, P.LOWER_WORDS.findall(value))) * 2 >= len(value) or shannon_entropy(value) < 4.3:
            continue
        context = low[max(0, s - 80):s]
        if "/" in value or "+" in value or "aws" in context or "secret" in context:
            yield s, e


def _assignments(text: str, low: str) -> Iterator[Span]:
    """Values assigned to secret-named keys (see `_assigned_secret`), in order of position. A key inside a value
    already found is not looked at again, so each long value is scanned once."""
    candidates = []
    for word in P.SECRET_WORDS:
        i = low.find(word)
        while i != -1:
            end = i + len(word)
            if end >= len(low) or low[end] not in _TOKEN_CHARS or low[end] == "-":
                candidates.append((i, end, word))
            i = low.find(word, end)
    found, covered, scan = [], 0, _Scan(text)
    for i, end, word in sorted(candidates):
        if i < covered:
            continue
        span = _assignment_at(text, low, i, end, word, scan)
        if span is not None:
            found.append(span)
            covered = span[1]
    return found


class _Scan:
    """What `_assignments` learns about a text once: where its first INI `[section]` header line is (found only
    if asked), and the last unquoted value longer than ASSIGN_TAIL's bound that was judged whole. A key inside
    that value has the same end (the characters between are all value characters), so it is judged on its first
    256 characters, as a value within the bound is: no part of the text is judged whole twice."""

    def __init__(self, text: str):
        self.text, self._first = text, None
        self.long_start = self.long_end = 0

    def ini_before(self, pos: int) -> bool:
        if self._first is None:
            self._first = len(self.text)
            for m in P.INI_SECTION.finditer(self.text):
                j = m.start()
                while j > 0 and self.text[j - 1] in " \t":
                    j -= 1
                if j == 0 or self.text[j - 1] == "\n":
                    self._first = m.start()
                    break
        return self._first < pos


def _assignment_at(text: str, low: str, i: int, end: int, word: str, scan: _Scan) -> Span | None:
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
    human, raw = word in P.HUMAN_CHOSEN, m.group("value")
    if raw[0] not in "\"'`\\" and m.group("ann") is None and _starts_line(text, start):
        sep = m.group("sep")
        if sep == "=" and key.isupper():
            return _line_value(text, m, key, human, P.NON_BLANK.match(text, m.start("value")).end())
        if sep.strip() in ("=", ":") and scan.ini_before(start):
            line_end = text.find("\n", m.start("value"))
            return _line_value(text, m, key, human, len(text) if line_end == -1 else line_end)
    end = m.end()
    if len(raw) == 256 and raw[0] not in "\"'`\\":  # an unquoted value that goes on past the regex's bound
        if scan.long_start < m.start("value") and end < scan.long_end:  # inside one judged whole already
            span = _assigned_secret(m, key, human, end)
            return None if span is None else (span[0], scan.long_end)
        end = P.UNQUOTED_REST.match(text, end).end()
        scan.long_start, scan.long_end = m.start("value"), end
    return _assigned_secret(m, key, human, end)


def _starts_line(text: str, start: int) -> bool:
    """Whether the key at `start` begins its line (after blanks and an `export ` or a YAML `- `)."""
    j = text.rfind("\n", max(0, start - 16), start) + 1
    if j == 0 and start > 16:
        return False
    return text[j:start].strip() in ("", "export", "-")


def _line_value(text: str, m, key: str, human: bool, stop: int) -> Span | None:
    """The value of a `KEY=value` env line (up to the first blank) or of a `key = value` line under an INI
    section (up to the end of the line): a literal, punctuation and all, unless it is a placeholder, a shell
    expansion, a file path, a call or subscript, a dotted reference, or (for a token or key) too short or wordy
    to be one."""
    s = m.start("value")
    value = text[s:stop].rstrip()
    if (_is_placeholder(value) or value[0] in "$`" or value.startswith(("/", "./", "~/"))
            or P.CALL_OR_SUBSCRIPT.match(value) or ("." in value and P.CODE_VALUE.match(value))
            or value.lower() == key.lower()):
        return None
    if not human and (len(value) < 8 or not (_has_digit(value) or looks_random(value + "00"))):
        return None
    return s, s + len(value)


def _credential_like(value: str) -> bool:
    """A machine-made credential (token, key) has digits or is long and not made of words; it is not a dotted
    name (`keyword.$0`, `type.identifier`: JWTs and other dotted tokens are caught by their own rules)."""
    if len(value) < 8 or ("." in value and not looks_random(value)):
        return False
    return _has_digit(value) or (len(value) >= 16 and looks_random(value + "00"))


def _assigned_secret(m, key: str, human: bool, end: int) -> Span | None:
    """Where the secret is in `key <sep> value` (the value ending at `end`), or None when the value is code or a
    placeholder, not a literal."""
    raw, start, sep = m.string[m.start("value"):end], m.start("value"), m.group("sep").strip()
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
            if P.CAMEL_CASE.match(raw) or not P.LINE_REST_IS_EMPTY.match(m.string, end):
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
    ("discord_bot_token", _discord, (".",), False),
    ("url_token", _secret_group(P.URL_TOKEN, accept=_url_token), ("://",), False),
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
    *[("cli_secret", _command_flag(command, flag), (hint,), False) for hint, command, flag in P.COMMAND_FLAGS],
    ("cli_secret", _secret_group(P.SSHPASS, word_start=True, accept=_literal_arg), ("sshpass",), False),
    ("cli_secret", _secret_group(P.OPENSSL_PASS, accept=_literal_arg), ("pass:",), False),
    ("netrc_password", _secret_group(P.NETRC, word_start=True, accept=lambda m, v: _netrc_or_pgpass_value(v)),
     ("machine",), False),
    ("pgpass_password", _pgpass, (":",), False),
    ("assignment", _assignments, (), False),
    ("aws_secret_access_key", _aws_secret, (), False),
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
