"""What secrets look like: provider token formats and the shapes of credentials in code, config and headers.

Every pattern starts with a literal where it can, so `re` scans with its fast literal-prefix search (a leading
look-behind or `(?i)` makes a pattern about 50x slower); boundaries are checked by `instrumentation.redaction`.
Patterns marked "lowered" run on an ASCII-lowercased copy of the text (same length, same offsets).

No secret is cut at a length cap: a cap leaves the tail of a longer value in the text. A pattern whose scan is
unbounded starts only where no earlier scan of that rule can have passed (a token boundary, a quote, a literal
the scanned class excludes), or is bounded, and `redaction` extends a value that reaches the bound to its
delimiter once per value: a text costs a bounded number of scans per rule.
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
    ("github_token", ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"), token("gh", r"[pousr]_[A-Za-z0-9]{36,}+")),
    ("github_token", ("github_pat_",), token("github_pat_", r"[A-Za-z0-9_]{22,}+")),
    ("gitlab_token", ("glpat-", "gldt-", "glptt-", "glrt-"),
     token("gl", r"(?:pat|dt|ptt|rt)-[A-Za-z0-9_-]{20,}+")),
    ("slack_token", ("xox",), token("xox", r"[abprs]-[A-Za-z0-9-]{10,}+")),
    ("slack_token", ("xapp-",), token("xapp-", r"\d-[A-Za-z0-9-]{10,}+")),
    ("slack_webhook", ("hooks.slack.com",),
     r"https://hooks\.slack\.com/(?:services|workflows)/[A-Za-z0-9_/+-]{20,}+"),
    ("stripe_key", ("sk_live_", "sk_test_"), token("sk_", r"(?:live|test)_[A-Za-z0-9]{16,}+")),
    ("stripe_key", ("rk_live_", "rk_test_"), token("rk_", r"(?:live|test)_[A-Za-z0-9]{16,}+")),
    ("stripe_key", ("whsec_",), token("whsec_", r"[A-Za-z0-9]{24,}+")),
    ("anthropic_key", ("sk-ant-",), token("sk-ant-", r"(?:api\d\d-|admin\d\d-)?[A-Za-z0-9_-]{20,}+")),
    ("openai_key", ("sk-",), token("sk-", rf"(?!ant-)(?:proj-|svcacct-|admin-)?{_MIXED}[A-Za-z0-9_-]{{20,}}+")),
    ("google_api_key", ("AIza",), token("AIza", r"[0-9A-Za-z_-]{35}+")),
    ("google_oauth", ("GOCSPX-",), token("GOCSPX-", r"[0-9A-Za-z_-]{20,}+")),
    ("google_oauth", ("ya29.",), token("ya29.", r"[0-9A-Za-z_-]{20,}+")),
    ("twilio_key", ("SK",), token("SK", r"[0-9a-fA-F]{32}+")),
    ("sendgrid_key", ("SG.",), token("SG.", r"[A-Za-z0-9_-]{16,32}+\.[A-Za-z0-9_-]{16,64}+")),
    ("npm_token", ("npm_",), token("npm_", r"[A-Za-z0-9]{36}+")),
    ("pypi_token", ("pypi-",), token("pypi-", r"[A-Za-z0-9_-]{50,}+")),
    ("huggingface_token", ("hf_",), token("hf_", rf"{_MIXED}[A-Za-z0-9]{{30,}}+")),
    ("heroku_key", ("HRKU-",), token("HRKU-", r"[0-9A-Za-z_-]{20,}+")),
    ("digitalocean_token", ("_v1_",), token("do", r"[opr]_v1_[a-f0-9]{64}+")),
    ("shopify_token", ("shp",), token("shp", r"(?:at|ca|pa|ss)_[a-fA-F0-9]{32}+")),
    ("square_token", ("sq0",), token("sq0", r"(?:atp|csp)-[0-9A-Za-z_-]{22,43}+")),
    ("square_token", ("EAAA",), token("EAAA", r"[A-Za-z0-9_-]{56,}+")),
    ("mailgun_key", ("key-",), token("key-", r"(?=[0-9a-z]{0,32}[0-9])[0-9a-z]{32}+")),
    ("databricks_token", ("dapi",), token("dapi", r"[a-f0-9]{32}+(?:-\d)?")),
    ("docker_hub_token", ("dckr_",), token("dckr_", r"(?:pat|oat)_[A-Za-z0-9_-]{20,}+")),
    ("vault_token", ("hvs.", "hvb."), token("hv", r"[sb]\.[A-Za-z0-9_-]{24,}+")),
    ("grafana_token", ("glsa_",), token("glsa_", r"[A-Za-z0-9]{32}_[A-Fa-f0-9]{8}+")),
]

# Telegram bot tokens are `<8-10 digits>:AA<33 chars>`; the digits are found by looking back from `:AA`.
TELEGRAM_TAIL = re.compile(rf":AA[A-Za-z0-9_-]{{33}}{_E}")
# Discord bot tokens are `<id part>.<6>.<27 or 38>`, the id part (24-26 chars) being the base64 of the bot's
# numeric id; found from the `.<6>.` middle, looking back for an id part that decodes to digits.
DISCORD_TAIL = re.compile(r"\.[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{27,}+")

PRIVATE_KEY = re.compile(  # key material must follow (code that names the marker is left alone); up to the END
    r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----"  # line, or to the end of the key material if cut off
    r"(?=(?:\\[rn]|\s)+(?:[\w-]+: [^\n]*?(?:\\[rn]|\n)+)*[A-Za-z0-9+/=]{8})"
    r"(?:(?:(?!-----BEGIN).)*?-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----"
    r"|(?:(?:[ \t]*(?:\\[rn]|\r?\n))+(?:[\w-]+: [^\n\\]*|[A-Za-z0-9+/=]+)(?=[ \t]*(?:\\[rn]|[\r\n\"'`,;)}\]]|\Z)))+)",
    re.S)
JWT = re.compile(token("eyJ", r"[A-Za-z0-9_-]{8,}+\.eyJ[A-Za-z0-9_-]{8,}+\.[A-Za-z0-9_-]*+"))

# Rules with a `secret` group: only that part is replaced (the user, host, key name, header name stay).
URL_PASSWORD = re.compile(r"://[^:/?#@\[\]\s]*:(?P<secret>[^@/?#\s]+)@")
URL_TOKEN = re.compile(r"://(?P<secret>[A-Za-z0-9_-]{20,}+)@")  # a key as the whole userinfo (Sentry DSNs)
AZURE_KEYS = tuple(re.compile(rf"{name}=(?P<secret>[A-Za-z0-9+/=]{{16,}}+)")
                   for name in ("AccountKey", "SharedAccessKey", "SharedSecretValue"))
AZURE_SAS = re.compile(r"sig=(?P<secret>[A-Za-z0-9%+/=]{16,}+)")  # preceded by ? or &
AUTH_HEADER = re.compile(  # lowered
    r"authorization[\"']?[ \t]*[:=][ \t]*[\"']?[ \t]*(?P<scheme>(?:bearer|token|basic|digest|apikey)[ \t]+)?"
    r"(?P<secret>[a-z0-9._~+/=-]{8,}+)")
BEARER = re.compile(r"bearer[ \t]+(?P<secret>[a-z0-9._~+/-]{16,}+=*)")  # lowered
API_KEY_HEADERS = tuple(re.compile(rf"{name}[ \t]*:[ \t]*(?P<secret>[^\s\"',;`]{{8,}}+)")  # lowered
                        for name in ("x-api-key", "x-auth-token", "x-access-token", "api-key",
                                     "ocp-apim-subscription-key"))
CLI_FLAG = re.compile(  # lowered
    r"--(?:(?:(?!no-)[a-z]+-)?(?:password|passwd)|token|api-key|apikey|secret|client-secret|access-token|auth-token"
    r"|oauth2-bearer)(?:=|[ \t]+)"
    r"(?P<secret>[^\s\"'$-][^\s\"']{2,}+|\"[^\"\s$]{3,}\"|'[^'\s$]{3,}')")

# Short flags that take a password, and the command they must belong to (`-p` means other things elsewhere:
# `docker run -p 8080:80`, `ssh -p 2222`). The flag is found first, then its command is looked for on the flag's
# command line (back to the start of the line, `\`-continued lines included, or to a `|` or `;`; 512 characters
# at most), so each flag costs one bounded look back. (hint, command, flag).
_ARG = r"(?P<secret>'[^'\n]++'|\"[^\"\n]++\"|[^\s'\"$`-][^\s'\"`]*+)"  # quoted, or up to the next blank
COMMAND_FLAGS: list[tuple[str, re.Pattern[str], re.Pattern[str]]] = [
    (hint, re.compile(command), re.compile(flag)) for hint, command, flag in [
        ("mysql", r"(?<![\w-])mysql[\w-]*[ \t]", rf"[ \t]-p{_ARG}"),  # `-p X` prompts (X is the database)
        ("mariadb", r"(?<![\w-])mariadb[\w-]*[ \t]", rf"[ \t]-p{_ARG}"),
        ("curl", r"(?<![\w-])curl[ \t]", rf"[ \t](?:-u[ \t]*|--user(?:[ \t]+|=))['\"]?[^\s:'\"]*:{_ARG}"),
        ("login", r"(?<![\w-])(?:docker|podman)[ \t]+login[ \t]", rf"[ \t]-p[ \t]*{_ARG}"),
        ("redis-cli", r"(?<![\w-])redis-cli[ \t]", rf"[ \t]-a[ \t]+{_ARG}"),
        ("mongo", r"(?<![\w-])mongo(?:sh|dump|restore|import|export)?[ \t]", rf"[ \t]-p[ \t]+{_ARG}"),
    ]]
SSHPASS = re.compile(rf"sshpass[ \t]+(?:-v[ \t]+)*-p[ \t]*{_ARG}")  # its options come before the command it runs
OPENSSL_PASS = re.compile(rf"-pass(?:in|out)?[ \t]+pass:{_ARG}")
NETRC = re.compile(  # `machine host login user [account a] password secret`, on one line or several
    r"machine[ \t]+\S++\s+login[ \t]+\S++(?:\s+account[ \t]+\S++)?\s+password[ \t]+(?P<secret>\S++)")
# A `.pgpass` line `host:port:database:user:password`; found from `:<port>:`, the host is checked by looking back.
PGPASS = re.compile(r":(?:\d{1,5}|\*):(?P<db>[^:\s]++):(?P<user>[^:\s]++):(?P<secret>\S++)")

# An AWS secret access key pasted bare: 40 characters of base64 with no token character around it
# (`redaction._aws_secret` decides whether it is one).
# (A leading `^|` alternative would make `re` try it at every position, 5x slower: the text's start is matched
# separately.)
AWS_SECRET_BARE = re.compile(r"[^A-Za-z0-9/+=_.-](?P<secret>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=_-])")
AWS_SECRET_AT_START = re.compile(r"(?P<secret>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=_-])")

# Assignments to a secret-named key. The key is found by `str.find` of these words in the lowered text; a key
# ending in "key" must end in one of KEY_SUFFIXES (`cache_key`, `sort_key` are not secrets).
SECRET_WORDS = ("password", "passwd", "passphrase", "pwd", "secret", "token", "key", "credential", "credentials")
HUMAN_CHOSEN = frozenset({"password", "passwd", "passphrase", "pwd", "secret"})  # any literal may be one
KEY_SUFFIXES = ("apikey", "accesskey", "secretkey", "privatekey", "signingkey", "encryptionkey", "masterkey",
                "authkey", "accountkey", "subscriptionkey", "clientkey")
ASSIGN_TAIL = re.compile(  # what follows the key: closing quote, optional type annotation, separator, value
    r"\\?[\"']?(?P<ann>[ \t]*:[ \t]*[A-Za-z_][\w\[\].| ]{0,60}?(?=[ \t]*=[^=]))?"
    r"(?P<sep>[ \t]*(?:=>|:=|=(?!=)|:(?!:))[ \t]*)"
    r"(?P<value>\\\"[^\"\n]*?\\\"|[bBrRuUfF]{0,2}\"[^\"\n]*+\"|[bBrRuUfF]{0,2}'[^'\n]*+'"
    r"|`[^`\n]*+`|[^\s,;)}\]\"'`\\]{1,256}+)")
KEY_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
UNQUOTED_REST = re.compile(r"[^\s,;)}\]\"'`\\]*+")  # the rest of an unquoted value past ASSIGN_TAIL's 256
NON_BLANK = re.compile(r"\S*+")
CALL_OR_SUBSCRIPT = re.compile(r"[A-Za-z_][\w.]*+[(\[]")  # `get_password()`, `os.environ["X"]`: code
# An INI/conf section header alone on its line (`[client]`, `[default]`, `[profile dev]`); the `[` is checked to
# start its line by `redaction`.
INI_SECTION = re.compile(r"\[[A-Za-z0-9_. :\"'/-]{1,80}\][ \t]*\r?(?:\n|\Z)")
LINE_REST_IS_EMPTY = re.compile(r"[ \t]*(?:#.*)?(?:\n|\Z)|[ \t]*[,}]")

# Any assigned quoted literal of 20+ token characters: a candidate for the entropy rule.
QUOTED_LITERAL = re.compile(r"([\"'`])(?P<secret>[A-Za-z0-9+/=_.~-]{20,}+)\1")
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
LOWER_WORDS = re.compile(r"[A-Z]?[a-z]{3,}")
UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
SEPARATORS = re.compile(r"[-_.:/]")
HEX = re.compile(r"^[0-9a-fA-F-]+$")
