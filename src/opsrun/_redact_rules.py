"""The built-in secret rules: one expression per credential family, each linear-time.

A rule is a compiled expression, the function that masks one match, and the lowercase
literals one of which a text must contain for the rule to run at all (a substring test
is much cheaper than a regex pass over clean text).

Why every expression stays linear: a token rule is a literal family prefix followed by
one repeated character class with nothing required after it (or a fixed count), so an
attempt that fails has read at most the minimum length, and an attempt that succeeds is
consumed by ``re.sub``, which resumes after it. Rules are therefore free to start
anywhere — after a word (``keysk-proj-…``), after a JSON escape (``\\nsk-proj-…``) —
and decide in Python, on the match alone, whether a key glued to a word is random
enough to be one. The JWT rule, whose three segments would otherwise be retried from
every ``eyJ`` of a long run, matches the whole dotted run once and splits it.
Assignment-style rules start at the key name, read a bounded separator and one class
of value characters.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable
from typing import NamedTuple

__all__ = [
    "BUILTIN_RULES",
    "ELLIPSIS",
    "MASK",
    "NETRC_MAX_CHARS",
    "NETRC_MAX_WORDS",
    "NETRC_OPENER",
    "NETRC_PASSWORD",
    "Rule",
    "apply_rules",
    "redact_builtin",
    "redact_private_keys",
]

MASK = "[REDACTED]"
"""What replaces a secret's body."""

ELLIPSIS = "…"

Replace = Callable[[re.Match[str]], str]


class Rule(NamedTuple):
    """One masking rule: ``pattern.sub(replace, text)`` when an anchor occurs."""

    name: str
    pattern: re.Pattern[str]
    replace: Replace
    anchors: tuple[str, ...] | None = None
    """Lowercase literals, one of which must occur in the text; None: always run."""
    gate: re.Pattern[str] | None = None
    """A cheap expression the lowercased text must match somewhere for the rule to run
    (rules whose own expression cannot start with a literal scan slowly over clean text)."""


_WORD_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")


def _glued(match: re.Match[str]) -> bool:
    """Whether the match continues a word (``xsk-…``), not counting an escape (``\\n``)."""
    text, start = match.string, match.start()
    if start == 0 or text[start - 1] not in _WORD_CHARS:
        return False
    return not (start >= 2 and text[start - 2] == "\\" and text[start - 1] in "nrtbf")


def _digit_and_letter(text: str) -> bool:
    return any(c.isdigit() for c in text) and any(c.isalpha() for c in text)


def _mixed_case(text: str) -> bool:
    return any(c.isupper() for c in text) and any(c.islower() for c in text)


def _random(text: str) -> bool:
    """A digit, an upper- and a lower-case letter: what a random key body has."""
    return any(c.isdigit() for c in text) and _mixed_case(text)


def _always(text: str) -> bool:
    return True


def _never(text: str) -> bool:
    return False


def _token(
    body_ok: Callable[[str], bool] = _always, glued_ok: Callable[[str], bool] = _always
) -> Replace:
    """Keep group ``prefix``, mask the rest — if the body looks like a key.

    ``body_ok`` judges every match; ``glued_ok`` also judges a match glued to a word,
    where a prose word is likelier than a key.
    """

    def replace(match: re.Match[str]) -> str:
        body = match.group("body")
        if not body_ok(body) or (_glued(match) and not glued_ok(body)):
            return match.group(0)
        return f"{match.group('prefix')}{ELLIPSIS}{MASK}"

    return replace


def _long_random(text: str) -> bool:
    return len(text) >= 32 and _random(text)


# What a value a token rule already masked looks like: at most a family prefix, then the
# mask ("sk-proj-…[REDACTED]"), or the mask alone (a value masked before).
_ALREADY = re.compile(r"(?:[A-Za-z0-9_\-.:/]{0,12}" + ELLIPSIS + r")?\[REDACTED\]")


def mask_assignment(match: re.Match[str]) -> str:
    """Keep ``prefix`` (key, separator, quote) and ``close``; mask the value."""
    value = match.group("body")
    # A value a token rule already masked stays as it is (it keeps its family prefix). A
    # bare value stops short of the mask's "]", so look one character past it. A value
    # that holds more than that (words, an unclosed quote, a key glued to a password) is
    # masked whole: what else it holds must not depend on the key inside it.
    already = _ALREADY.match(match.string, match.start("body"))
    if (already and already.end() >= match.end("body")) or not value.strip():
        return match.group(0)
    return f"{match.group('prefix')}{MASK}{match.group('close') or ''}"


# Bare values that are not secrets: JSON/YAML/Python literals, and in JSON or a dict repr
# (the key was quoted) numbers; an identifier that is called or indexed is code.
_LITERALS = frozenset({"null", "true", "false", "none", "nil", "undefined"})
_TYPES = frozenset(
    {"str", "string", "bytes", "int", "integer", "float", "number", "bool", "boolean"}
    | {"any", "object", "secretstr", "secretbytes"}
)
"""Type names: after ``:`` the value is an annotation (``password: str``), not a secret."""
_NUMBER = re.compile(r"-?[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_EXPRESSION = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*[(\[]")
_REST_OF_WORD = re.compile(r"\S{0,256}")


def _is_code_or_literal(match: re.Match[str]) -> bool:
    """Whether an unquoted assigned value is a literal, a JSON number or an expression.

    An expression (``tokens[0]``, ``get_password(user)``, ``os.environ['KEY']``) must
    close its bracket within the same word, so that the decision never depends on text
    more than a word away (the streamed text is held a few words only).
    """
    value = match.group("body")
    if value.lower() in _LITERALS:
        return True
    if value.lower() in _TYPES and match.group("prefix").rstrip().endswith(":"):
        return True
    if match.group("kq") is not None and _NUMBER.fullmatch(value):
        return True
    call = _EXPRESSION.match(value)
    if call is None:
        return False
    closer = ")" if call.group(0).endswith("(") else "]"
    rest = _REST_OF_WORD.match(match.string, match.end("body"))
    return rest is not None and closer in rest.group(0)


def _mask_assigned(match: re.Match[str]) -> str:
    """:func:`mask_assignment` for ``key = value`` pairs, leaving literals and code alone."""
    unquoted = all(match.group(q) is None for q in ("dq", "edq", "sq"))
    if unquoted and _is_code_or_literal(match):
        return match.group(0)
    return mask_assignment(match)


def _mask_line(match: re.Match[str]) -> str:
    """Like :func:`mask_assignment` for values that run to the end of the line (cookies,
    passphrases): a key masked inside them does not make them count as masked."""
    if match.group("body").startswith(MASK):
        return match.group(0)
    return f"{match.group('prefix')}{MASK}{match.group('close') or ''}"


def _mask_bearer(match: re.Match[str]) -> str:
    token = match.group("body")
    # "Bearer tokens", "bearer authentication": words, not credentials.
    if not any(c.isdigit() for c in token) and len(token) < 24:
        return match.group(0)
    return f"{match.group('prefix')}{ELLIPSIS}{MASK}"


def _jwt_header(segment: str) -> bool:
    """Whether ``segment`` (from ``eyJ``) decodes to a JWT header (``{"alg"…``)."""
    head = segment[: min(len(segment), 64) // 4 * 4]
    try:
        decoded = base64.urlsafe_b64decode(head)
    except (ValueError, binascii.Error):
        return False
    return b'"alg"' in decoded or b'"typ"' in decoded or b'"kid"' in decoded


def _mask_jwts(match: re.Match[str]) -> str:
    """Mask every ``eyJ….….…`` in one dotted run, in a single pass over its segments."""
    segments = match.group(0).split(".")
    start = match.start()
    escaped = start > 0 and match.string[start - 1] == "\\"
    out: list[str] = []
    i = 0
    while i < len(segments):
        segment = segments[i]
        at = segment.find("eyJ")
        whole = (
            at >= 0
            and len(segment) - at >= 11
            and i + 2 < len(segments)
            and len(segments[i + 1]) >= 8
            and len(segments[i + 2]) >= 8
        )
        # Glued to a word (not a JSON escape), it must really decode to a JWT header.
        boundary = at == 0 or (at == 1 and i == 0 and escaped and segment[0] in "nrtbf")
        if whole and (boundary or _jwt_header(segment[at:])):
            out.append(f"{segment[:at]}eyJ{ELLIPSIS}{MASK}")
            i += 3
        else:
            out.append(segment)
            i += 1
    return ".".join(out)


def _mask_userinfo(match: re.Match[str]) -> str:
    if MASK in match.group("body"):
        return match.group(0)
    return f"{match.group('prefix')}{MASK}"


_T = r"[A-Za-z0-9_\-]"
# After a token boundary or a JSON/repr escape (\n, \t, \r) — for words (bearer, cookie).
_START = r"(?:(?<![A-Za-z0-9_\-])|(?<=\\[nrt]))"
# Inside a netrc entry: between a keyword and its value a space or tab, or an escaped tab
# (\t, up to three backslashes); before a keyword also a line break.
_NETRC_GAP = r"(?:[ \t]|\\{1,3}t)"
_NETRC_BREAK = r"(?:[ \t\r\n]|\\{1,3}[nrt])"
# A key's closing quote, or a value's opening one, escaped in double-encoded JSON (\").
_Q = r"(?:\\{0,3}[\"'])?"
# "==" and ":=" compare or bind in code; they do not assign a value.
_SEP = r"[ \t]{0,10}[:=](?!=)[ \t]{0,10}"

# Names that may end an identifier or follow a dash (DB_PASSWORD, OPENAI_API_KEY,
# --password, X-Auth-Token, admin-password); "password" and "passwd" may also end a word
# (PGPASSWORD, userPassword). A bare "token" may only open a "--token" flag, so that
# "max_token=100" and the like stay readable.
_KEY_NAMES = (
    r"(?:(?<![A-Za-z0-9])|(?<=\\[nrt]))(?:x[_-]api[_-]key|api[_-]?key|api[_-]?secret"
    r"|access[_-]?token|refresh[_-]?token|auth[_-]?token|session[_-]?token|client[_-]?secret"
    r"|secret[_-]?access[_-]?key|secret[_-]?key|secret|account[_-]?key"
    r"|shared[_-]?access[_-]?key|passphrase|pwd)"
    r"|passw(?:or)?d"
    r"|(?:(?<![A-Za-z0-9_\-])|(?<=\\[nrt]))(?:--)?token"
)
# A quoted value runs to its own closing quote; a backslash inside it belongs to the
# value unless it escapes that quote (double-encoded JSON: \"…\").
_DQ_BODY = r"(?:[^\"\\\n]|\\(?!\\{0,3}\"))+"
# Opened by a plain double quote, the value is a JSON (or Python) string: an escape pair
# (\" \\ \n) belongs to it and only a plain quote ends it, so masking keeps it a string.
_JSON_BODY = r"(?:[^\"\\\n]|\\[^\n])+"
_SQ_BODY = r"(?:[^'\\\n]|\\(?!\\{0,3}'))+"
# A bare value does not open a bracket or an object ({"password": {…}}, {{ var }}). A quote
# or a closing bracket inside it, with more of the value after it (it's-a-secret,
# abc)def), does not end it; one that ends the value (f(password=x)) does.
_BARE_CHAR = r"[^\s\"',;&<>)}\]\\]"
_BARE_BODY = rf"[^\s\"',;&<>(){{}}\[\]\\=](?:{_BARE_CHAR}|['>)}}\]](?={_BARE_CHAR}))*"


def _rule(
    name: str,
    pattern: str,
    replace: Replace,
    anchors: tuple[str, ...] | None,
    gate: str | None = None,
) -> Rule:
    return Rule(name, re.compile(pattern), replace, anchors, re.compile(gate) if gate else None)


BUILTIN_RULES: tuple[Rule, ...] = (
    # Families that share "sk-" come first, the most specific one first.
    _rule(
        "anthropic",
        rf"(?P<prefix>sk-ant-)(?P<body>{_T}{{20,}})",
        _token(_digit_and_letter),
        ("sk-ant-",),
    ),
    _rule(
        "openrouter",
        r"(?P<prefix>sk-or-v1-)(?P<body>[0-9a-f]{32,})",
        _token(),
        ("sk-or-v1-",),
    ),
    _rule(
        "openai-project",
        rf"(?P<prefix>sk-(?:proj|svcacct|admin|None)-)(?P<body>{_T}{{20,}})",
        _token(_digit_and_letter),
        ("sk-proj-", "sk-svcacct-", "sk-admin-", "sk-none-"),
    ),
    _rule(
        "openai-legacy",
        r"(?P<prefix>sk-)(?P<body>[A-Za-z0-9]{20,})",
        _token(_digit_and_letter, _long_random),
        ("sk-",),
    ),
    _rule("xai", r"(?P<prefix>xai-)(?P<body>[A-Za-z0-9]{40,})", _token(_random), ("xai-",)),
    _rule(
        "stripe",
        r"(?P<prefix>(?:sk|rk|pk)_(?:live|test)_|whsec_)(?P<body>[A-Za-z0-9]{16,})",
        _token(),
        ("_live_", "_test_", "whsec_"),
    ),
    _rule(
        "github",
        r"(?P<prefix>gh[pousr]_)(?P<body>[A-Za-z0-9]{36,})",
        _token(),
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"),
    ),
    _rule(
        "github-fine-grained",
        r"(?P<prefix>github_pat_)(?P<body>[A-Za-z0-9_]{22,})",
        _token(),
        ("github_pat_",),
    ),
    _rule(
        "gitlab",
        rf"(?P<prefix>gl(?:pat|dt|rt|ptt)-)(?P<body>{_T}{{20,}})",
        _token(_digit_and_letter),
        ("glpat-", "gldt-", "glrt-", "glptt-"),
    ),
    _rule(
        "slack",
        r"(?P<prefix>xox[abpres]-|xapp-)(?P<body>[A-Za-z0-9\-]{10,})",
        _token(),
        ("xox", "xapp-"),
    ),
    _rule(
        "slack-webhook",
        r"(?P<prefix>hooks\.slack\.com/(?:services|workflows|triggers)/)"
        r"(?P<body>[A-Za-z0-9_/\-]{8,})",
        _token(),
        ("hooks.slack.com/",),
    ),
    _rule("google-api-key", rf"(?P<prefix>AIza)(?P<body>{_T}{{35}})", _token(), ("aiza",)),
    _rule(
        "google-oauth-token",
        rf"(?P<prefix>ya29\.)(?P<body>{_T}{{20,}})",
        _token(_digit_and_letter),
        ("ya29.",),
    ),
    _rule(
        "google-client-secret",
        rf"(?P<prefix>GOCSPX-)(?P<body>{_T}{{20,}})",
        _token(),
        ("gocspx-",),
    ),
    _rule(
        "aws-access-key-id",
        r"(?P<prefix>AKIA|ASIA|ABIA|ACCA)(?P<body>[A-Z0-9]{16})(?![A-Za-z0-9])",
        _token(),
        ("akia", "asia", "abia", "acca"),
    ),
    _rule(
        "huggingface",
        r"(?P<prefix>hf_)(?P<body>[A-Za-z0-9]{30,})",
        _token(_mixed_case),
        ("hf_",),
    ),
    _rule(
        "sendgrid",
        rf"(?P<prefix>SG\.)(?P<body>{_T}{{22}}\.{_T}{{43}})",
        _token(),
        ("sg.",),
    ),
    _rule("npm", r"(?P<prefix>npm_)(?P<body>[A-Za-z0-9]{36,})", _token(_random), ("npm_",)),
    _rule("pypi", rf"(?P<prefix>pypi-)(?P<body>AgE{_T}{{50,}})", _token(), ("pypi-age",)),
    _rule("groq", r"(?P<prefix>gsk_)(?P<body>[A-Za-z0-9]{40,})", _token(_random), ("gsk_",)),
    _rule(
        "replicate",
        r"(?P<prefix>r8_)(?P<body>[A-Za-z0-9]{30,})",
        _token(_digit_and_letter, _random),
        ("r8_",),
    ),
    _rule(
        "digitalocean",
        r"(?P<prefix>do[opr]_v1_)(?P<body>[a-f0-9]{64})",
        _token(),
        ("dop_v1_", "doo_v1_", "dor_v1_"),
    ),
    _rule(
        "shopify",
        r"(?P<prefix>shp(?:at|ca|pa|ss)_)(?P<body>[a-fA-F0-9]{32})",
        _token(),
        ("shpat_", "shpca_", "shppa_", "shpss_"),
    ),
    _rule(
        "twilio-api-key",
        r"(?P<prefix>SK)(?P<body>[0-9a-f]{32})(?![A-Za-z0-9])",
        _token(_digit_and_letter, _never),
        ("sk",),
    ),
    _rule(
        "twilio-auth-token",
        r"(?P<prefix>AC[0-9a-f]{32}:)(?P<body>[0-9a-f]{32})(?![A-Za-z0-9])",
        _token(),
        ("ac",),
    ),
    _rule(
        "telegram-bot-token",
        r"(?<![0-9])(?P<prefix>[0-9]{8,10}:)(?P<body>AA[A-Za-z0-9_\-]{33})(?![A-Za-z0-9_\-])",
        _token(),
        (":aa",),
    ),
    _rule(
        "databricks",
        r"(?P<prefix>dapi)(?P<body>[a-f0-9]{32}(?:-[0-9])?)",
        _token(_digit_and_letter),
        ("dapi",),
    ),
    _rule(
        "jwt",
        r"(?<![A-Za-z0-9_\-])[A-Za-z0-9_\-]*eyJ[A-Za-z0-9_.\-]*",
        _mask_jwts,
        ("eyj",),
    ),
    _rule(
        "url-credentials",
        r"(?i)(?<![a-z0-9+.\-])(?P<prefix>[a-z][a-z0-9+.\-]{0,30}://[^\s:/?#@\"'<>\\]{0,256}:)"
        r"(?P<body>[^\s/?#\"'<>\\]{1,512})(?=@)",
        _mask_userinfo,
        ("://",),
        r"://[^\s/?#\"'<>\\]{1,800}@",
    ),
    _rule(
        "azure-sas-signature",
        r"(?<![A-Za-z0-9_\-])(?P<prefix>sig=)(?P<body>[A-Za-z0-9%+/=]{16,})(?P<close>)",
        mask_assignment,
        ("sig=",),
    ),
    _rule(
        "aws-secret-access-key",
        rf"(?i)(?P<prefix>aws_secret_access_key{_Q}{_SEP}{_Q})"
        r"(?P<body>[A-Za-z0-9/+=]{40})(?P<close>)(?![A-Za-z0-9/+=])",
        mask_assignment,
        ("aws_secret_access_key",),
    ),
    _rule(
        "basic-auth",
        rf"(?i)(?P<prefix>authorization{_Q}{_SEP}{_Q}basic[ \t]{{1,10}})"
        r"(?P<body>[A-Za-z0-9+/=._~\-]{4,})(?P<close>)",
        mask_assignment,
        ("basic",),
    ),
    _rule(
        "bearer",
        r"(?i)(?:(?<![A-Za-z0-9])|(?<=\\[nrt]))(?P<prefix>bearer[ \t]{1,10})"
        r"(?P<body>[A-Za-z0-9._~+/=\-]{8,})",
        _mask_bearer,
        ("bearer",),
        r"bearer[ \t]{1,10}[a-z0-9._~+/=\-]{8}",
    ),
    _rule(
        "netrc",
        rf"(?i){_START}(?P<prefix>(?:machine{_NETRC_GAP}{{1,16}}[^\s\\\"']{{1,256}}"
        rf"|default(?={_NETRC_GAP}{{1,16}}login))"
        rf"(?:{_NETRC_BREAK}{{1,16}}(?:login|account|port){_NETRC_GAP}{{1,16}}"
        rf"[^\s\\\"']{{1,256}}){{0,4}}{_NETRC_BREAK}{{1,16}}password{_NETRC_GAP}{{1,16}})"
        r"(?P<body>[^\s\\\"']+)(?P<close>)",
        mask_assignment,
        ("machine", "default"),
    ),
    _rule(
        "cookie",
        rf"(?i){_START}(?P<prefix>(?:set-)?cookie{_Q}[ \t]{{0,10}}:[ \t]{{0,10}}{_Q})"
        r"(?P<body>[^\s=;,\"'\\]{1,256}=[^\r\n\"'\\]*)(?P<close>)",
        _mask_line,
        ("cookie",),
    ),
    _rule(
        "passphrase",
        # A passphrase is words: the value runs to the end of the line (or its quote).
        r"(?i)(?:(?<![A-Za-z0-9])|(?<=\\[nrt]))"
        rf"(?P<prefix>passphrase{_Q}{_SEP}{_Q})(?P<body>[^\r\n\"'\\]+)(?P<close>)",
        _mask_line,
        ("passphrase",),
    ),
    _rule(
        "assignment",
        rf"(?i)(?P<prefix>(?:{_KEY_NAMES})(?P<kq>\\{{0,3}}[\"'])?{_SEP}"
        r"(?:(?P<dq>\")|\\{1,3}(?P<edq>\")|\\{0,3}(?P<sq>'))?)"
        rf"(?P<body>(?(dq){_JSON_BODY}|(?(edq){_DQ_BODY}|(?(sq){_SQ_BODY}|{_BARE_BODY}))))"
        r"(?P<close>\\{0,3}[\"']|)",
        _mask_assigned,
        ("key", "secret", "token", "pass", "pwd"),
        # How every key name ends, then its separator.
        r"(?:key|secret|token|password|passwd|passphrase|pwd)[\"'\\]{0,4}[ \t]{0,10}[:=]",
    ),
)
"""Token families first (their masks keep a prefix), then the assignment-style rules,
which leave a value already masked by a token rule alone."""

NETRC_OPENER = re.compile(rf"(?i)(?:machine|default)(?={_NETRC_GAP})")
"""Where the netrc rule may start an entry: its keyword and separator, after any
character (the rule's boundary is judged after the token rules ran: a key masked just
before ``machine`` ends in "]")."""
NETRC_PASSWORD = re.compile(rf"(?i){_NETRC_BREAK}password{_NETRC_GAP}+[^\s\\\"']*[\s\\\"']")
"""An entry's password keyword and its whole value (what ends the value follows it)."""
NETRC_MAX_WORDS = 11
"""Words of the longest entry before its password's value: machine, host, four
keyword/value pairs, password."""
NETRC_MAX_CHARS = 4096
"""Longer than any entry the netrc rule matches up to its password (about 2,000 chars)."""

_PRIVATE_BEGIN = re.compile(
    r"-----BEGIN (?P<label>[A-Z0-9]{1,20}(?: [A-Z0-9]{1,20}){0,3} )?PRIVATE KEY(?: BLOCK)?-----"
)
_PRIVATE_END = re.compile(r"-----END (?:[A-Z0-9]{1,20} ){0,4}PRIVATE KEY(?: BLOCK)?-----")
# The base64 body, armor headers (PGP "Version: …") and escaped newlines (JSON "\n").
_PRIVATE_BODY = re.compile(r"[A-Za-z0-9+/=:,.\-\\ \t\r\n]*")


def redact_private_keys(text: str) -> str:
    """Mask private key blocks (PEM, OpenSSH, PGP); linear, because END is searched at
    most once per gap."""
    if "PRIVATE KEY" not in text:
        return text
    out: list[str] = []
    pos = 0
    no_end_after = len(text) + 1  # an END search that failed from here on fails again
    for begin in _PRIVATE_BEGIN.finditer(text):
        if begin.start() < pos:
            continue
        out.append(text[pos : begin.start()])
        header = begin.group(0)
        end = _PRIVATE_END.search(text, begin.end()) if begin.end() < no_end_after else None
        if end is None:
            no_end_after = begin.end()
            body = _PRIVATE_BODY.match(text, begin.end())
            pos = body.end() if body else begin.end()
        else:
            pos = end.end()
        out.append(f"{header}{ELLIPSIS}{MASK}")
    out.append(text[pos:])
    return "".join(out)


_GUARDS = "_-.:="


class RulePlan(NamedTuple):
    """A rule list prepared for clean text: one search tells whether any anchor occurs."""

    rules: tuple[Rule, ...]
    """Every rule, in order."""
    prefilter: re.Pattern[str] | None
    """Matches any anchor of any anchored rule; None when no rule has anchors."""
    unanchored: tuple[Rule, ...]
    """The rules that run whatever the text holds, in order."""


def plan_rules(rules: tuple[Rule, ...]) -> RulePlan:
    """Prepare ``rules`` for :func:`apply_rules`."""
    anchors = sorted({a for r in rules if r.anchors for a in r.anchors}, key=len, reverse=True)
    prefilter = re.compile("|".join(map(re.escape, anchors))) if anchors else None
    return RulePlan(rules, prefilter, tuple(r for r in rules if r.anchors is None))


def apply_rules(text: str, plan: RulePlan) -> str:
    """``text`` with each rule applied in turn (a rule whose anchors are absent is skipped)."""
    lowered = text.lower()
    rules = plan.rules
    if plan.prefilter is not None and plan.prefilter.search(lowered) is None:
        rules = plan.unanchored  # the common case: clean text, one search
        if not rules:
            return text
    # Most anchors hold punctuation ("ghp_", "sk-", "://"): one test per character tells
    # which anchors cannot occur, before one substring test per anchor.
    missing = frozenset(c for c in _GUARDS if c not in lowered)
    for rule in rules:
        # A substring test is far cheaper than a regex pass over clean text.
        if rule.anchors is not None and not any(
            missing.isdisjoint(a) and a in lowered for a in rule.anchors
        ):
            continue
        if rule.gate is not None and rule.gate.search(lowered) is None:
            continue
        text = rule.pattern.sub(rule.replace, text)
    return text


_BUILTIN_PLAN = plan_rules(BUILTIN_RULES)


def redact_builtin(text: str) -> str:
    """``text`` masked with the built-in rules alone (``DEFAULT_REDACTOR.redact``)."""
    return apply_rules(redact_private_keys(text), _BUILTIN_PLAN)
