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

import bisect
import hashlib
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from opsrun._redact_rules import (
    BUILTIN_RULES,
    MASK,
    NETRC_MAX_CHARS,
    NETRC_MAX_WORDS,
    NETRC_OPENER,
    NETRC_PASSWORD,
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

# A key names a secret when its last words do, however it is spelled: "password",
# "DB_PASSWORD", "userPassword", "x-auth-token", "AWS_SECRET_ACCESS_KEY". Words are split
# at "_", "-", ".", spaces and camelCase humps, then compared joined.
_KEY_WORDS = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
_SECRET_NAMES = frozenset(
    {
        "apikey",
        "apisecret",
        "accesstoken",
        "refreshtoken",
        "authtoken",
        "sessiontoken",
        "clientsecret",
        "secretkey",
        "secretaccesskey",
        "accountkey",
        "sharedaccesskey",
        "privatekey",
        "secret",
        "password",
        "passwd",
        "pwd",
        "passphrase",
        "token",
        "authorization",
        "cookie",
        "setcookie",
        "credential",
        "credentials",
        "credentialref",
    }
)
_LONGEST_NAME = 3  # words: "shared access key", "secret access key"
# Glued to a word (PGPASSWORD, userpassword), only these still read as secrets.
_SECRET_SUFFIXES = ("password", "passwd", "passphrase")
# A count or a limit of tokens is a setting, not a token.
_NOT_TOKENS = frozenset({"max", "min", "num", "total", "count", "limit"})


def _names_secret(key: str) -> bool:
    """Whether a mapping key names a secret (``password``, ``DB_PASSWORD``, ``apiKey``…)."""
    words = [w.lower() for w in _KEY_WORDS.findall(key)]
    if not words:
        return False
    if words[-1].endswith(_SECRET_SUFFIXES):
        return True
    if words[-1] == "token" and len(words) > 1 and words[-2] in _NOT_TOKENS:
        return False
    return any(
        "".join(words[-n:]) in _SECRET_NAMES for n in range(1, min(len(words), _LONGEST_NAME) + 1)
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

        Mappings, lists, tuples and sets are walked. Under a key that names a secret,
        however it is spelled (``password``, ``DB_PASSWORD``, ``userPassword``,
        ``apiKey``, ``X-Auth-Token``…), every string and number is masked whole, also
        inside lists and mappings; ``None``, booleans and empty strings are kept. Other
        objects are returned unchanged. Raises nothing.
        """
        return self._walk(value, 0)

    def _walk(self, value: Any, depth: int, *, secret: bool = False) -> Any:
        """Redact ``value``; under a key that names a secret (``secret``), mask whole."""
        if isinstance(value, str):
            if secret:
                return MASK if value else value
            return self.redact(value)
        if value is None or isinstance(value, bool):
            return value  # not a secret, whatever its key says
        if isinstance(value, int | float | bytes | bytearray):
            return MASK if secret else value
        if depth >= self.max_depth:
            return _DEPTH_MARKER
        if isinstance(value, Mapping):
            out: dict[Any, Any] = {}
            for key, item in value.items():
                new_key = self.redact(key) if isinstance(key, str) else key
                hidden = secret or (isinstance(key, str) and _names_secret(key))
                out[new_key] = self._walk(item, depth + 1, secret=hidden)
            return out
        if isinstance(value, list):
            return [self._walk(item, depth + 1, secret=secret) for item in value]
        if isinstance(value, tuple):
            return tuple(self._walk(item, depth + 1, secret=secret) for item in value)
        if isinstance(value, set | frozenset):
            return type(value)(self._walk(item, depth + 1, secret=secret) for item in value)
        return value


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
_PEM_BEGIN = "-----BEGIN"
_PEM_END = "-----END"
# Cost control. A cut is checked by redacting the pending text (and the two sides of the
# cut), so while something is held every check costs the length of what is held. Up to
# _FREE_CHECK characters a check runs on every feed; beyond, each character fed pays
# _CREDIT characters of checking, so the total work stays linear in the input however
# long a construct stays open (a "Cookie:" line, an open quote, a passphrase).
_FREE_CHECK = 256
_CREDIT = 24
# Cuts tried per check: the newest few, then older ones at doubling distances.
_NEWEST_CUTS = 4
# On overflow, at least this much stays pending: more than any built-in rule needs to see
# after a cut (a URL's user:password@ reads about 800 characters).
_OVERFLOW_TAIL = 1024


_CUT_WORD = 8
"""A word cut off at least this long may be the start of a secret."""


class StreamRedactor:
    """Masks secrets in text that arrives in pieces (a streamed reply).

    A secret can be split across two deltas, so deltas cannot be redacted one by one.
    :meth:`feed` holds back the newest ``lookahead`` complete words (and the word still
    arriving) and releases a word-aligned prefix whose redaction does not depend on the
    text after it: the redaction of the pending text must equal the redaction of the
    prefix followed by the redaction of the rest. A key, a ``Bearer`` token or an ``api_key = …``
    assignment is therefore released only once it is whole, already masked; an
    unterminated PEM block is held until its END line, a netrc entry until its
    password. :meth:`flush` releases the rest.

    Joined, the released pieces equal ``redactor.redact`` of the whole text: with the
    built-in rules (and ``lookahead`` at least 3) always, with host secrets and patterns
    whenever none of their matches spans more than ``lookahead`` words. Once more than
    ``max_pending`` characters are held (text without whitespace), the pending text is
    cut anywhere the same test allows, keeping at least 1,024 characters pending.

    The work per feed is amortised: while a long construct stays open, cuts are
    checked less often, so the total cost stays linear in the length of the stream.
    """

    def __init__(self, redactor: Redactor, *, lookahead: int = 3, max_pending: int = 8192) -> None:
        self.redactor = redactor
        self.lookahead = lookahead
        self.max_pending = max_pending
        self._pending = ""
        self._starts: list[int] = []  # word starts in _pending (after whitespace)
        self._pem = -1  # where an unterminated "-----BEGIN" starts in _pending
        self._credit = 0
        self._work = 0  # characters redacted so far, paid for by _credit

    def feed(self, delta: str) -> str:
        """Add ``delta``; return the redacted text that is now safe to release (maybe "").

        Raises nothing of its own; a host pattern that fails propagates its error.
        """
        if not delta:
            return ""
        old = len(self._pending)
        pending = self._pending + delta
        self._pending = pending
        self._starts.extend(m.start() for m in _WORD_START.finditer(pending, max(old, 1)))
        self._track_pem(pending, old)
        self._credit += _CREDIT * len(delta)
        if len(pending) > _FREE_CHECK and self._credit < 0:
            return ""  # the last checks used up what this text paid for: wait
        before = self._work
        released = self._release(pending)
        if len(pending) > _FREE_CHECK:
            self._credit -= self._work - before
        return released

    def flush(self, *, cut_off: bool = False) -> str:
        """Return the redacted rest of the stream and reset.

        With ``cut_off`` (the stream broke off: an error, an abort) a word of at least
        8 characters that was still arriving is masked whole: it may be the start of a
        key whose rest never came, which no rule recognises on its own; so is an
        unterminated PEM block.
        """
        pending, starts, pem = self._pending, self._starts, self._pem
        self._pending, self._starts, self._pem, self._credit = "", [], -1, 0
        if not pending:
            return ""
        if cut_off:
            cut = len(pending)
            if not pending[-1].isspace():  # the word still arriving, when long enough
                word = starts[-1] if starts else 0
                if cut - word >= _CUT_WORD:
                    cut = word
            if pem >= 0:
                cut = min(cut, pem)  # an unterminated PEM block, from its header
            if cut < len(pending):
                return self.redactor.redact(pending[:cut]) + MASK
        return self.redactor.redact(pending)

    def _redact(self, text: str) -> str:
        self._work += len(text)
        return self.redactor.redact(text)

    def _track_pem(self, pending: str, old: int) -> None:
        """Keep ``_pem`` on the newest "-----BEGIN" that has no "-----END" after it yet."""
        begin = pending.rfind(_PEM_BEGIN, max(0, old - len(_PEM_BEGIN) + 1))
        if begin >= 0:
            self._pem = -1 if _PEM_END in pending[begin:] else begin
        elif self._pem >= 0 and _PEM_END in pending[max(self._pem, old - len(_PEM_END) + 1) :]:
            self._pem = -1

    def _release(self, pending: str) -> str:
        """Cut ``pending`` at the best safe point found; return the redacted head."""
        # Candidate cuts: word starts that leave ``lookahead`` whole words pending. A word
        # still arriving does not count: it may yet complete a secret ("Basic dXN…").
        keep = self.lookahead - (1 if pending[-1].isspace() else 0)
        candidates = len(self._starts) - keep
        if candidates <= 0 and len(pending) <= self.max_pending:
            return ""  # too few words for a cut, and no overflow: nothing to release yet
        limit = len(pending)
        if self._pem >= 0:
            limit = self._pem  # a PEM header is five words long: hold the block until it ends
        limit = min(limit, _netrc_hold(pending, self._starts))
        cuts = self._starts[: max(0, candidates)]
        cuts = cuts[: bisect.bisect_right(cuts, limit)]
        whole: list[str] = []  # redact(pending), computed at most once
        for cut in _newest_first(cuts):
            head = self._safe_head(pending, cut, whole)
            if head is not None:
                return self._cut(cut, head)
        if len(pending) > self.max_pending:
            # No word-aligned cut: cut inside the text, keeping enough of it pending.
            last = min(limit, len(pending) - _OVERFLOW_TAIL)
            for cut in _newest_first(range(1, last + 1)):
                head = self._safe_head(pending, cut, whole)
                if head is not None:
                    return self._cut(cut, head)
        return ""

    def _safe_head(self, pending: str, cut: int, whole: list[str]) -> str | None:
        """``redact(pending[:cut])`` when the rest's redaction does not depend on it."""
        if not whole:
            whole.append(self._redact(pending))
        head = self._redact(pending[:cut])
        redacted = whole[0]
        if not redacted.startswith(head):
            return None
        if redacted[len(head) :] != self._redact(pending[cut:]):
            return None
        return head

    def _cut(self, cut: int, head: str) -> str:
        self._pending = self._pending[cut:]
        self._starts = [s - cut for s in self._starts[bisect.bisect_right(self._starts, cut) :]]
        if self._pem >= 0:
            self._pem -= cut
        return head


def _newest_first(cuts: Sequence[int]) -> Iterator[int]:
    """The newest few of ``cuts`` (ascending), then older ones at doubling distances."""
    n = len(cuts)
    for back in range(1, min(n, _NEWEST_CUTS) + 1):
        yield cuts[n - back]
    step = 1
    back = _NEWEST_CUTS + 1
    while back <= n:
        yield cuts[n - back]
        back += step
        step *= 2


def _netrc_hold(pending: str, starts: list[int]) -> int:
    """Where an unfinished netrc entry starts in ``pending`` (``len`` when there is none).

    An entry is unfinished while its password has no value yet and it is still short
    enough to be one; only the last few words can hold such an entry.
    """
    lo = len(pending) - NETRC_MAX_CHARS
    if len(starts) >= NETRC_MAX_WORDS:
        lo = max(lo, starts[-NETRC_MAX_WORDS])
    lo = max(lo, 0)
    openers = [m.start() for m in NETRC_OPENER.finditer(pending, lo)]
    if not openers:
        return len(pending)
    answered = [m.start() for m in NETRC_PASSWORD.finditer(pending, openers[0])]
    last_password = answered[-1] if answered else -1
    for opener in openers:
        if opener >= last_password:
            return opener
    return len(pending)
