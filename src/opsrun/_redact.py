"""Mask secrets in text and nested data before it reaches logs, summaries or snapshots.

Built-in rules recognise the common credential shapes (OpenAI and Anthropic keys,
bearer and basic auth, AWS, Google, GitHub, Slack, Stripe, JWTs, PEM private keys
and ``api_key=``/``password=``-style assignments); hosts add literal secrets (a
resolved credential) and regular expressions of their own.

A masked token keeps only its family prefix, then a fixed mask::

    sk-proj-…[REDACTED]     AKIA…[REDACTED]     Bearer …[REDACTED]
    password=[REDACTED]     "apiKey": "[REDACTED]"

Every built-in expression runs in linear time: each token rule starts only at a
token boundary (a look-behind excludes the token's own alphabet) and repeats a
single character class, so there is nothing to backtrack into.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from opsrun.errors import ConfigError

__all__ = [
    "DEFAULT_REDACTOR",
    "MASK",
    "Redactor",
    "StreamRedactor",
    "redact_text",
    "redact_value",
    "sha256_text",
]

MASK = "[REDACTED]"
"""What replaces a secret's body."""

_ELLIPSIS = "…"
_MIN_LITERAL = 4
_DEPTH_MARKER = "[REDACTED: too deep]"

_Rule = tuple[re.Pattern[str], Callable[[re.Match[str]], str]]
_ANCHORS: dict[str, tuple[str, ...]] = {}  # pattern source -> lowercase literals, one must occur


def _keep_prefix(match: re.Match[str]) -> str:
    """Keep group ``prefix`` (the key family), mask the rest."""
    return f"{match.group('prefix')}{_ELLIPSIS}{MASK}"


def _has_digit_and_letter(text: str) -> bool:
    return any(c.isdigit() for c in text) and any(c.isalpha() for c in text)


def _keep_prefix_if_random(match: re.Match[str]) -> str:
    """Like :func:`_keep_prefix`, but leave word-like bodies (``sk-learn-…``) alone."""
    if not _has_digit_and_letter(match.group("body")):
        return match.group(0)
    return _keep_prefix(match)


def _mask_bearer(match: re.Match[str]) -> str:
    token = match.group("body")
    # "Bearer tokens", "bearer authentication": words, not credentials.
    if not any(c.isdigit() for c in token) and len(token) < 24:
        return match.group(0)
    return f"{match.group('prefix')}{_ELLIPSIS}{MASK}"


def _mask_assignment(match: re.Match[str]) -> str:
    value = match.group("body")
    # An already masked value stays as it is ("[REDACTED" stops short of its "]").
    already = match.string.startswith(MASK, match.start("body"))
    if already or MASK in value or not value.strip():
        return match.group(0)
    return f"{match.group('prefix')}{MASK}{match.group('close') or ''}"


# A token starts where the previous character is not part of a token.
_B = r"(?<![A-Za-z0-9_\-])"
_TOKEN = r"[A-Za-z0-9_\-]"

# Names that may end an identifier (DB_PASSWORD, OPENAI_API_KEY); a bare "token" may
# not, so that "max_token=100" and the like stay readable.
_KEY_NAMES = (
    r"(?<![A-Za-z0-9\-])(?:x[_-]api[_-]key|api[_-]?key|api[_-]?secret|access[_-]?token"
    r"|refresh[_-]?token|auth[_-]?token|client[_-]?secret|secret[_-]?key|secret|password"
    r"|passwd|pwd)|(?<![A-Za-z0-9_\-])token"
)

_BUILTIN_RULES: tuple[_Rule, ...] = (
    # Anthropic first: its keys also start with "sk-".
    (re.compile(rf"{_B}(?P<prefix>sk-ant-){_TOKEN}{{20,}}"), _keep_prefix),
    (
        re.compile(rf"{_B}(?P<prefix>sk-(?:proj|svcacct|admin|None)-)(?P<body>{_TOKEN}{{20,}})"),
        _keep_prefix_if_random,
    ),
    (re.compile(rf"{_B}(?P<prefix>sk-)(?P<body>[A-Za-z0-9]{{20,}})"), _keep_prefix_if_random),
    (
        re.compile(rf"{_B}(?P<prefix>(?:sk|rk|pk)_(?:live|test)_)[A-Za-z0-9]{{16,}}"),
        _keep_prefix,
    ),
    (re.compile(r"(?<![A-Za-z0-9])(?P<prefix>gh[pousr]_)[A-Za-z0-9]{36,}"), _keep_prefix),
    (re.compile(r"(?<![A-Za-z0-9])(?P<prefix>github_pat_)[A-Za-z0-9_]{22,}"), _keep_prefix),
    (re.compile(rf"{_B}(?P<prefix>xox[abpr]-)[A-Za-z0-9\-]{{10,}}"), _keep_prefix),
    (re.compile(rf"{_B}(?P<prefix>AIza){_TOKEN}{{35}}"), _keep_prefix),
    (
        re.compile(r"(?<![A-Za-z0-9])(?P<prefix>AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}(?![A-Za-z0-9])"),
        _keep_prefix,
    ),
    (
        re.compile(rf"{_B}(?P<prefix>eyJ){_TOKEN}{{8,}}\.{_TOKEN}{{8,}}\.{_TOKEN}{{8,}}"),
        _keep_prefix,
    ),
    (
        re.compile(
            r"(?i)(?P<prefix>aws_secret_access_key[\"']?[ \t]{0,10}[:=][ \t]{0,10}[\"']?)"
            r"(?P<body>[A-Za-z0-9/+=]{40})(?P<close>)(?![A-Za-z0-9/+=])"
        ),
        _mask_assignment,
    ),
    (
        re.compile(
            r"(?i)(?P<prefix>authorization[\"']?[ \t]{0,10}[:=][ \t]{0,10}[\"']?basic[ \t]{1,10})"
            r"(?P<body>[A-Za-z0-9+/=._~\-]{4,})(?P<close>)"
        ),
        _mask_assignment,
    ),
    (
        re.compile(
            r"(?i)(?<![A-Za-z0-9])(?P<prefix>bearer[ \t]{1,10})(?P<body>[A-Za-z0-9._~+/=\-]{8,})"
        ),
        _mask_bearer,
    ),
    (
        re.compile(
            rf"(?i)(?P<prefix>(?:{_KEY_NAMES})[\"']?"
            r"[ \t]{0,10}[:=][ \t]{0,10}(?P<quote>[\"'])?)"
            r"(?P<body>(?(quote)[^\"'\n]{1,512}|[^\s\"',;&<>)}\]]{1,512}))(?P<close>[\"']?)"
        ),
        _mask_assignment,
    ),
)

_ANCHORS.update(
    zip(
        (rule[0].pattern for rule in _BUILTIN_RULES),
        (
            ("sk-ant-",),
            ("sk-",),
            ("sk-",),
            ("_live_", "_test_"),
            ("gh",),
            ("github_pat_",),
            ("xox",),
            ("aiza",),
            ("akia", "asia", "abia", "acca"),
            ("eyj",),
            ("aws_secret_access_key",),
            ("basic",),
            ("bearer",),
            ("key", "secret", "token", "pass", "pwd"),
        ),
        strict=True,
    )
)

_PEM_BEGIN = re.compile(
    r"-----BEGIN (?P<label>[A-Z0-9]{1,20}(?: [A-Z0-9]{1,20}){0,3} )?PRIVATE KEY-----"
)
_PEM_END = re.compile(r"-----END (?:[A-Z0-9]{1,20} ){0,4}PRIVATE KEY-----")
_PEM_BODY = re.compile(r"[A-Za-z0-9+/=:,\- \t\r\n]*")

_SENSITIVE_KEY = re.compile(
    r"(?:x[_-]?)?(?:api[_-]?key|api[_-]?secret|access[_-]?token|refresh[_-]?token"
    r"|auth[_-]?token|client[_-]?secret|secret[_-]?key|secret|password|passwd|pwd|token"
    r"|authorization|cookie|set[_-]?cookie|credential|credential[_-]?ref"
    r"|aws[_-]?secret[_-]?access[_-]?key|private[_-]?key)",
    re.IGNORECASE,
)


def _redact_pem(text: str) -> str:
    """Mask private key blocks; linear, because END is searched at most once per gap."""
    if "PRIVATE KEY-----" not in text:
        return text
    out: list[str] = []
    pos = 0
    no_end_after = len(text) + 1  # an END search that failed from here on fails again
    for begin in _PEM_BEGIN.finditer(text):
        if begin.start() < pos:
            continue
        out.append(text[pos : begin.start()])
        header = begin.group(0)
        end = _PEM_END.search(text, begin.end()) if begin.end() < no_end_after else None
        if end is None:
            no_end_after = begin.end()
            body = _PEM_BODY.match(text, begin.end())
            pos = body.end() if body else begin.end()
        else:
            pos = end.end()
        out.append(f"{header}{_ELLIPSIS}{MASK}")
    out.append(text[pos:])
    return "".join(out)


@dataclass(frozen=True, kw_only=True)
class Redactor:
    """Immutable redaction settings: built-in rules plus host secrets and patterns.

    Attributes:
        secrets: Literal secret values (a resolved API key…), masked wherever they
            occur; each must be at least 4 characters.
        patterns: Extra regular expressions; a match is replaced by ``[REDACTED]``,
            or only its ``secret`` group when the pattern has one. The host keeps
            these linear-time.
        builtin: Apply the built-in rules.
        max_depth: How deep :meth:`redact_value` walks; deeper values are replaced.
    """

    secrets: tuple[str, ...] = ()
    patterns: tuple[str | re.Pattern[str], ...] = ()
    builtin: bool = True
    max_depth: int = 32
    _rules: tuple[_Rule, ...] = field(init=False, repr=False, compare=False)
    _prefilter: re.Pattern[str] | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        """Compile the rules.

        Raises:
            ConfigError: A literal secret is too short, a pattern does not compile,
                or ``max_depth`` is not positive.
        """
        if self.max_depth <= 0:
            raise ConfigError("Redactor.max_depth must be positive")
        rules: list[_Rule] = []
        literals = sorted(set(self.secrets), key=len, reverse=True)
        for secret in literals:
            if not isinstance(secret, str) or len(secret) < _MIN_LITERAL:
                raise ConfigError(
                    f"literal secrets must be strings of at least {_MIN_LITERAL} characters"
                )
        if literals:
            rules.append((re.compile("|".join(map(re.escape, literals))), lambda m: MASK))
        if self.builtin:
            rules.extend(_BUILTIN_RULES)
        for pattern in self.patterns:
            try:
                compiled = re.compile(pattern) if isinstance(pattern, str) else pattern
            except re.error as exc:
                raise ConfigError(f"invalid redaction pattern {pattern!r}: {exc}") from exc
            rules.append((compiled, _mask_secret_group))
        object.__setattr__(self, "_rules", tuple(rules))
        # Every anchored rule needs one of its literals in the text: one search for any
        # of them tells whether a clean text can skip all of those rules at once.
        anchors = sorted({a for r, _ in rules for a in _ANCHORS.get(r.pattern, ())})
        prefilter = re.compile("|".join(map(re.escape, anchors))) if anchors else None
        object.__setattr__(self, "_prefilter", prefilter)

    def with_secrets(self, *secrets: str) -> Redactor:
        """Return a copy that also masks ``secrets``.

        Raises:
            ConfigError: A secret is shorter than 4 characters.
        """
        return Redactor(
            secrets=(*self.secrets, *secrets),
            patterns=self.patterns,
            builtin=self.builtin,
            max_depth=self.max_depth,
        )

    def redact(self, text: str) -> str:
        """Return ``text`` with every recognised secret masked."""
        if self.builtin:
            text = _redact_pem(text)
        lowered = text.lower()
        anchored = self._prefilter is not None and self._prefilter.search(lowered) is not None
        for pattern, replace in self._rules:
            anchors = _ANCHORS.get(pattern.pattern)
            # A substring test is far cheaper than a regex pass over clean text.
            if anchors is not None and (not anchored or not any(a in lowered for a in anchors)):
                continue
            text = pattern.sub(replace, text)
        return text

    def redact_value(self, value: Any) -> Any:
        """Return a copy of ``value`` with secrets masked in every string, key included.

        Mappings, lists, tuples and sets are walked; a value stored under a key that
        names a secret (``password``, ``apiKey``, ``Authorization``…) is masked whole.
        Other objects are returned unchanged.
        """
        return self._walk(value, 0)

    def _walk(self, value: Any, depth: int) -> Any:
        if isinstance(value, str):
            return self.redact(value)
        if value is None or isinstance(value, bool | int | float):
            return value
        if depth >= self.max_depth:
            return _DEPTH_MARKER
        if isinstance(value, Mapping):
            out: dict[Any, Any] = {}
            for key, item in value.items():
                new_key = self.redact(key) if isinstance(key, str) else key
                if isinstance(key, str) and _SENSITIVE_KEY.fullmatch(key) and _is_scalar(item):
                    out[new_key] = MASK if item not in (None, "") else item
                else:
                    out[new_key] = self._walk(item, depth + 1)
            return out
        if isinstance(value, list):
            return [self._walk(item, depth + 1) for item in value]
        if isinstance(value, tuple):
            return tuple(self._walk(item, depth + 1) for item in value)
        if isinstance(value, set | frozenset):
            return type(value)(self._walk(item, depth + 1) for item in value)
        return value


def _is_scalar(value: object) -> bool:
    return value is None or isinstance(value, str | int | float | bytes)


def _mask_secret_group(match: re.Match[str]) -> str:
    if "secret" in match.re.groupindex and match.group("secret") is not None:
        start, end = match.span("secret")
        whole = match.group(0)
        offset = match.start()
        return whole[: start - offset] + MASK + whole[end - offset :]
    return MASK


DEFAULT_REDACTOR = Redactor()
"""Built-in rules only; immutable, so safe to share."""


def redact_text(text: str, *, extra: Iterable[str] = ()) -> str:
    """Mask secrets in ``text`` with the built-in rules plus literal ``extra`` secrets.

    Raises:
        ConfigError: An ``extra`` secret is shorter than 4 characters.
    """
    extra = tuple(extra)
    redactor = DEFAULT_REDACTOR.with_secrets(*extra) if extra else DEFAULT_REDACTOR
    return redactor.redact(text)


def redact_value(value: Any, *, redactor: Redactor | None = None) -> Any:
    """Return a redacted copy of nested data (see :meth:`Redactor.redact_value`)."""
    return (redactor or DEFAULT_REDACTOR).redact_value(value)


def sha256_text(text: str) -> str:
    """Return the hex SHA-256 of ``text`` encoded as UTF-8 (for prompt hashes)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


_WORD_START = re.compile(r"(?<=\s)\S")


class StreamRedactor:
    """Masks secrets in text that arrives in pieces (a streamed reply).

    A secret can be split across two deltas, so deltas cannot be redacted one by one.
    :meth:`feed` holds back the newest ``lookahead`` words and releases the longest
    word-aligned prefix whose redaction does not depend on the text after it: the
    redaction of the pending text must equal the redaction of the prefix followed by
    the redaction of the rest. A key, a ``Bearer`` token or an ``api_key = …``
    assignment is therefore released only once it is whole, already masked; an
    unterminated PEM block is held until its END line. :meth:`flush` releases the rest.

    Joined, the released pieces equal ``redactor.redact`` of the whole text whenever
    no secret spans more than ``lookahead`` words. Text without whitespace is held up
    to ``max_pending`` characters, then released redacted.
    """

    def __init__(self, redactor: Redactor, *, lookahead: int = 3, max_pending: int = 8192) -> None:
        self.redactor = redactor
        self.lookahead = lookahead
        self.max_pending = max_pending
        self._pending = ""

    def feed(self, delta: str) -> str:
        """Add ``delta``; return the redacted text that is now safe to release (maybe "")."""
        pending = self._pending + delta
        starts = [m.start() for m in _WORD_START.finditer(pending)]
        redacted = self.redactor.redact(pending)
        limit = len(pending)
        begin = pending.rfind("-----BEGIN")
        if begin >= 0 and "-----END" not in pending[begin:]:
            limit = begin  # a PEM header is five words long: hold the block until it ends
        # Candidate cuts: word starts that leave ``lookahead`` words pending, newest first.
        for cut in reversed(starts[: max(0, len(starts) - self.lookahead + 1)]):
            if cut > limit:
                continue
            head = self.redactor.redact(pending[:cut])
            if redacted == head + self.redactor.redact(pending[cut:]):
                self._pending = pending[cut:]
                return head
        if len(pending) > self.max_pending:
            self._pending = ""
            return redacted
        self._pending = pending
        return ""

    def flush(self) -> str:
        """Return the redacted rest of the stream and reset."""
        pending, self._pending = self._pending, ""
        return self.redactor.redact(pending) if pending else ""
