"""What secrets look like: provider token formats and the shapes of credentials in code, config and headers.

Every pattern starts with a literal where it can, so `re` scans with its fast literal-prefix search (a leading
look-behind or `(?i)` makes a pattern about 50x slower); boundaries are checked by `instrumentation.redaction`.
Patterns marked "lowered" run on an ASCII-lowercased copy of the text (same length, same offsets).
"""

from __future__ import annotations

import re

_E = r"(?![A-Za-z0-9_-])"  # no further token character
_MIXED = r"(?=[A-Za-z0-9_-]{0,200}?[0-9])(?=[A-Za-z0-9_-]{0,200}?[A-Za-z])"  # a real token has letters and digits


def token(prefix: str, rest: str) -> str:
    """A token that starts with the literal `prefix`, refused inside a longer token. The look-behind sits after
    the prefix so `re` keeps its fast literal search, and `rest` uses possessive quantifiers: no start position
    costs more than one scan of its token, so a long run of prefixes (`sk-sk-sk-...`) stays linear."""
    p = re.escape(prefix)
    return rf"{p}(?<![A-Za-z0-9_-]{p}){rest}{_E}"


# (kind, hints, pattern): tokens recognised by a documented prefix; the whole match is the secret. A pattern runs
# only on texts that contain one of its hints (a substring test is far cheaper than a regex scan).
PROVIDER_TOKENS: list[tuple[str, tuple[str, ...], str]] = [
    ("aws_access_key_id", ("AKIA", "ASIA", "ABIA", "ACCA", "A3T"),
     token("A", r"(?:KIA|SIA|BIA|CCA|3T[A-Z0-9])[A-Z0-9]{16}+")),
    ("github_token", ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"), token("gh", r"[pousr]_[A-Za-z0-9]{36,255}+")),
    ("github_token", ("github_pat_",), token("github_pat_", r"[A-Za-z0-9_]{22,255}+")),
    ("gitlab_token", ("glpat-", "gldt-", "glptt-", "glrt-"),
     token("gl", r"(?:pat|dt|ptt|rt)-[A-Za-z0-9_-]{20,512}+")),
    ("slack_token", ("xox",), token("xox", r"[abprs]-[A-Za-z0-9-]{10,512}+")),
    ("slack_token", ("xapp-",), token("xapp-", r"\d-[A-Za-z0-9-]{10,512}+")),
    ("slack_webhook", ("hooks.slack.com",),
     r"https://hooks\.slack\.com/(?:services|workflows)/[A-Za-z0-9_/+-]{20,512}+"),
    ("stripe_key", ("sk_live_", "sk_test_"), token("sk_", r"(?:live|test)_[A-Za-z0-9]{16,512}+")),
    ("stripe_key", ("rk_live_", "rk_test_"), token("rk_", r"(?:live|test)_[A-Za-z0-9]{16,512}+")),
    ("stripe_key", ("whsec_",), token("whsec_", r"[A-Za-z0-9]{24,512}+")),
    ("anthropic_key", ("sk-ant-",), token("sk-ant-", r"(?:api\d\d-|admin\d\d-)?[A-Za-z0-9_-]{20,512}+")),
    ("openai_key", ("sk-",), token("sk-", rf"(?!ant-)(?:proj-|svcacct-|admin-)?{_MIXED}[A-Za-z0-9_-]{{20,512}}+")),
    ("google_api_key", ("AIza",), token("AIza", r"[0-9A-Za-z_-]{35}+")),
    ("google_oauth", ("GOCSPX-",), token("GOCSPX-", r"[0-9A-Za-z_-]{20,512}+")),
    ("google_oauth", ("ya29.",), token("ya29.", r"[0-9A-Za-z_-]{20,4096}+")),
    ("twilio_key", ("SK",), token("SK", r"[0-9a-fA-F]{32}+")),
    ("sendgrid_key", ("SG.",), token("SG.", r"[A-Za-z0-9_-]{16,32}+\.[A-Za-z0-9_-]{16,64}+")),
    ("npm_token", ("npm_",), token("npm_", r"[A-Za-z0-9]{36}+")),
    ("pypi_token", ("pypi-",), token("pypi-", r"[A-Za-z0-9_-]{50,1024}+")),
    ("huggingface_token", ("hf_",), token("hf_", rf"{_MIXED}[A-Za-z0-9]{{30,512}}+")),
    ("heroku_key", ("HRKU-",), token("HRKU-", r"[0-9A-Za-z_-]{20,512}+")),
    ("digitalocean_token", ("_v1_",), token("do", r"[opr]_v1_[a-f0-9]{64}+")),
    ("shopify_token", ("shp",), token("shp", r"(?:at|ca|pa|ss)_[a-fA-F0-9]{32}+")),
    ("square_token", ("sq0",), token("sq0", r"(?:atp|csp)-[0-9A-Za-z_-]{22,43}+")),
    ("square_token", ("EAAA",), token("EAAA", r"[A-Za-z0-9_-]{56,512}+")),
    ("mailgun_key", ("key-",), token("key-", r"(?=[0-9a-z]{0,32}[0-9])[0-9a-z]{32}+")),
    ("databricks_token", ("dapi",), token("dapi", r"[a-f0-9]{32}+(?:-\d)?")),
]

# Telegram bot tokens are `<8-10 digits>:AA<33 chars>`; the digits are found by looking back from `:AA`.
TELEGRAM_TAIL = re.compile(rf":AA[A-Za-z0-9_-]{{33}}{_E}")

PRIVATE_KEY = re.compile(  # key material must follow (code that names the marker is left alone); up to the END
    r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----"  # line, or to the end of the key material if cut off
    r"(?=(?:\\[rn]|\s)+(?:[\w-]+: [^\n]*?(?:\\[rn]|\n)+)*[A-Za-z0-9+/=]{8})"
    r"(?:(?:(?!-----BEGIN).)*?-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----"
    r"|(?:(?:[ \t]*(?:\\[rn]|\r?\n))+(?:[\w-]+: [^\n\\]*|[A-Za-z0-9+/=]+)(?=[ \t]*(?:\\[rn]|[\r\n\"'`,;)}\]]|\Z)))+)",
    re.S)
JWT = re.compile(token("eyJ", r"[A-Za-z0-9_-]{8,}+\.eyJ[A-Za-z0-9_-]{8,}+\.[A-Za-z0-9_-]*+"))

# Rules with a `secret` group: only that part is replaced (the user, host, key name, header name stay).
URL_PASSWORD = re.compile(r"://[^:/?#@\[\]\s]*:(?P<secret>[^@/?#\s]+)@")
AZURE_KEYS = tuple(re.compile(rf"{name}=(?P<secret>[A-Za-z0-9+/=]{{16,1024}}+)")
                   for name in ("AccountKey", "SharedAccessKey", "SharedSecretValue"))
AZURE_SAS = re.compile(r"sig=(?P<secret>[A-Za-z0-9%+/=]{16,1024}+)")  # preceded by ? or &
AUTH_HEADER = re.compile(  # lowered
    r"authorization[\"']?[ \t]*[:=][ \t]*[\"']?[ \t]*(?P<scheme>(?:bearer|token|basic|digest|apikey)[ \t]+)?"
    r"(?P<secret>[a-z0-9._~+/=-]{8,4096}+)")
BEARER = re.compile(r"bearer[ \t]+(?P<secret>[a-z0-9._~+/-]{16,4096}+=*)")  # lowered
API_KEY_HEADERS = tuple(re.compile(rf"{name}[ \t]*:[ \t]*(?P<secret>[^\s\"',;`]{{8,1024}}+)")  # lowered
                        for name in ("x-api-key", "x-auth-token", "x-access-token", "api-key",
                                     "ocp-apim-subscription-key"))
CLI_FLAG = re.compile(  # lowered
    r"--(?:password|passwd|token|api-key|secret|client-secret)(?:=|[ \t]+)"
    r"(?P<secret>[^\s\"'$-][^\s\"']{2,1024}+|\"[^\"\s$]{3,}\"|'[^'\s$]{3,}')")

# Assignments to a secret-named key. The key is found by `str.find` of these words in the lowered text; a key
# ending in "key" must end in one of KEY_SUFFIXES (`cache_key`, `sort_key` are not secrets).
SECRET_WORDS = ("password", "passwd", "passphrase", "pwd", "secret", "token", "key", "credential", "credentials")
HUMAN_CHOSEN = frozenset({"password", "passwd", "passphrase", "pwd", "secret"})  # any literal may be one
KEY_SUFFIXES = ("apikey", "accesskey", "secretkey", "privatekey", "signingkey", "encryptionkey", "masterkey",
                "authkey", "accountkey", "subscriptionkey", "clientkey")
ASSIGN_TAIL = re.compile(  # what follows the key: closing quote, optional type annotation, separator, value
    r"\\?[\"']?(?P<ann>[ \t]*:[ \t]*[A-Za-z_][\w\[\].| ]{0,60}?(?=[ \t]*=[^=]))?"
    r"(?P<sep>[ \t]*(?:=>|:=|=(?!=)|:(?!:))[ \t]*)"
    r"(?P<value>\\\"[^\"\n]{0,1024}?\\\"|[bBrRuUfF]{0,2}\"[^\"\n]{0,1024}+\"|[bBrRuUfF]{0,2}'[^'\n]{0,1024}+'"
    r"|`[^`\n]{0,1024}+`|[^\s,;)}\]\"'`\\]{1,256}+)")
KEY_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
LINE_REST_IS_EMPTY = re.compile(r"[ \t]*(?:#.*)?(?:\n|\Z)|[ \t]*[,}]")

# Any assigned quoted literal of 20+ token characters: a candidate for the entropy rule.
QUOTED_LITERAL = re.compile(r"([\"'`])(?P<secret>[A-Za-z0-9+/=_.~-]{20,1024}+)\1")
ASSIGNED_BEFORE = re.compile(r"(?P<key>[A-Za-z_][\w.-]{0,63})\\?[\"']?[ \t]*(?<![=!<>])(?:=>|:=|=|:)[ \t]*\Z")
HASH_KEYS = re.compile(  # keys whose values are hashes, ids or encoded data: skipped by the entropy rule
    r"(?i)(?:sha\d*|md5|hash|digest|checksum|integrity|commit|etag|revision|rev|id|uuid|guid|bytes|b64|base64)$")

PLACEHOLDER = re.compile(
    r"(?ix)^(?: \$\{?[\w.:-]*\}? | \{.*\} | <[^>]*> | \[[^\]]*\] | %\(?\w*\)?s | %\w+% | "
    r"(?P<rep>.)(?P=rep)+ | (?:your|my|the)[_-].* | .*[_-]here | (?:changeme|placeholder|dummy|example|redacted|"
    r"none|null|nil|undefined|true|false|secret|password|token|todo|tbd|\*+|x+|\.\.\.|…) )$")
CODE_VALUE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*$")  # a name or dotted reference
OPERATORS = re.compile(r"\|\||&&|\?\?|\?\.|=>|->|::|![01]\b")  # in a bare value: an expression, not a literal
CAMEL_CASE = re.compile(r"^[a-z]+[A-Z]")
TYPE_NAMES = frozenset(
    "str string String int integer bool boolean Boolean float double number bytes bytearray char any Any object "
    "Object SecretStr SecretBytes Optional Union None null undefined".split())
WORDISH = re.compile(r"[A-Z]?[a-z]{3,}|[A-Z]{4,}")
UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
SEPARATORS = re.compile(r"[-_.:/]")
HEX = re.compile(r"^[0-9a-fA-F-]+$")
