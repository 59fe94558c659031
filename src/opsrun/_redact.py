"""Mask secrets in text and nested data before it reaches logs, summaries or snapshots.

Built-in rules (:mod:`opsrun._redact_rules`, listed in docs/redaction.md) recognise the
common credential shapes — LLM, cloud, code-hosting, chat, payment and package-registry
keys, JWTs, bearer and basic auth, credentials in URLs, cookies, netrc entries, private
key blocks and ``api_key=``/``password=``-style assignments; hosts add literal secrets (a
resolved credential) and regular expressions of their own.

A masked token keeps only its family prefix, then a fixed mask::

    sk-proj-…[REDACTED]     AKIA…[REDACTED]     Bearer …[REDACTED]
    password=[REDACTED]     "apiKey": "[REDACTED]"

Every built-in expression runs in linear time (the rules module says why), also on a
key glued to a word or following a JSON escape such as ``\\n``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from opsrun._redact_rules import (
    BUILTIN_RULES,
    MASK,
    Rule,
    RulePlan,
    apply_rules,
    plan_rules,
    redact_private_keys,
)
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

_MIN_LITERAL = 4
_DEPTH_MARKER = "[REDACTED: too deep]"

_SENSITIVE_KEY = re.compile(
    r"(?:x[_-]?)?(?:api[_-]?key|api[_-]?secret|access[_-]?token|refresh[_-]?token"
    r"|auth[_-]?token|client[_-]?secret|secret[_-]?key|secret|password|passwd|pwd|token"
    r"|passphrase|authorization|cookie|set[_-]?cookie|credential|credential[_-]?ref"
    r"|(?:aws[_-]?)?secret[_-]?access[_-]?key|(?:aws[_-]?)?session[_-]?token"
    r"|account[_-]?key|shared[_-]?access[_-]?key|private[_-]?key)",
    re.IGNORECASE,
)


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
    _rules: RulePlan = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        """Compile the rules.

        Raises:
            ConfigError: A literal secret is too short, a pattern does not compile,
                or ``max_depth`` is not positive.
        """
        if self.max_depth <= 0:
            raise ConfigError("Redactor.max_depth must be positive")
        rules: list[Rule] = []
        literals = sorted(set(self.secrets), key=len, reverse=True)
        for secret in literals:
            if not isinstance(secret, str) or len(secret) < _MIN_LITERAL:
                raise ConfigError(
                    f"literal secrets must be strings of at least {_MIN_LITERAL} characters"
                )
        if literals:
            either = re.compile("|".join(map(re.escape, literals)))
            rules.append(Rule("literal", either, _mask_literal))
        if self.builtin:
            rules.extend(BUILTIN_RULES)
        for pattern in self.patterns:
            try:
                compiled = re.compile(pattern) if isinstance(pattern, str) else pattern
            except re.error as exc:
                raise ConfigError(f"invalid redaction pattern {pattern!r}: {exc}") from exc
            rules.append(Rule("pattern", compiled, _mask_secret_group))
        object.__setattr__(self, "_rules", plan_rules(tuple(rules)))

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
            text = redact_private_keys(text)
        return apply_rules(text, self._rules)

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


def _mask_literal(match: re.Match[str]) -> str:
    return MASK


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
# A netrc entry ("machine h login u password p") is longer than the lookahead: from its
# first word on, text is held until its password has arrived (or it cannot be netrc).
_NETRC_OPEN = re.compile(r"(?i)(?:(?<!\S)|(?<=\\[nrt]))(?:machine|default)(?=\s|\\t)")
_NETRC_PASSWORD = re.compile(r"(?i)(?:(?<!\S)|(?<=\\[nrt]))password(?:\s|\\t)+\S")
_NETRC_WORDS = 10  # machine, login, account, port and password, each with a value


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
        limit = min(limit, _netrc_hold(pending))
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


def _netrc_hold(pending: str) -> int:
    """Where an unfinished netrc entry starts in ``pending`` (``len`` when there is none)."""
    openers = [m.start() for m in _NETRC_OPEN.finditer(pending)]
    if not openers:
        return len(pending)
    entry = pending[openers[-1] :]
    if _NETRC_PASSWORD.search(entry) or len(entry.split(None, _NETRC_WORDS)) > _NETRC_WORDS:
        return len(pending)
    return openers[-1]
