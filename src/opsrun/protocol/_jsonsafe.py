"""Hostile-input-safe JSON decoding and best-effort extraction from LLM text.

``json.loads`` alone is not safe on untrusted text: deep nesting raises
``RecursionError``, a million-digit integer costs seconds, ``NaN`` and duplicate
keys are accepted silently and ``"\\ud800"`` yields a lone surrogate. Here:

* nesting deeper than ``max_json_depth`` is refused: the decoded value's
  containers are counted after decoding (the C decoder itself stops at the
  interpreter's recursion limit, and a linear scan that skips string literals runs
  before decoding when that limit has been raised above a safe bound, and to
  locate the offending bracket for the message);
* number literals longer than ``max_number_chars`` are refused before they are
  converted; non-finite floats (``1e999``) and ``NaN``/``Infinity`` are refused;
* duplicate object keys are refused;
* lone surrogates, raw or escaped, are refused.

Every refusal is a :class:`~opsrun.errors.PlanError` with ``ERR_INVALID_JSON``.

A raw control character (usually a newline) inside a string is the commonest
mistake in JSON written by a model. It is reported with its line and column;
:func:`candidate_spans` can also decode such a candidate a second time with
control characters allowed inside strings (the same as escaping them), for the
caller to accept when the result is a valid plan.
"""

from __future__ import annotations

import functools
import json
import math
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from opsrun.errors import PlanError

from ._limits import PlanLimits

__all__ = [
    "Candidate",
    "candidate_spans",
    "control_character_error",
    "is_control_character_error",
    "is_hostile",
    "loads_strict_json",
]

_STRUCTURAL = re.compile(r'[\[\]{}"]')
_ESCAPED_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")
_FENCE_OPEN = re.compile(r"^[ \t]{0,3}(`{3,})[ \t]*([^`\r\n]*)\r?$", re.MULTILINE)
_LEADING_WS = re.compile(r"[ \t\n\r]*")
# Above this recursion limit the C decoder could exhaust the C stack on deep input
# before raising RecursionError, so depth is then measured before decoding.
_SAFE_RECURSION_LIMIT = 4000
_CONTROL_NAMES = {"\n": "a newline", "\r": "a carriage return", "\t": "a tab"}


def _invalid(message: str, **details: Any) -> PlanError:
    return PlanError(message, code="ERR_INVALID_JSON", details=details)


def check_depth(text: str, start: int, max_depth: int) -> None:
    """Refuse text whose first JSON value (from ``start``) nests deeper than ``max_depth``.

    The scan stops when the first value closes, so trailing prose is not counted.

    Raises:
        PlanError: ``ERR_INVALID_JSON`` if the nesting is too deep.
    """
    depth = 0
    pos = start
    while True:
        match = _STRUCTURAL.search(text, pos)
        if match is None:
            return
        char = match.group()
        pos = match.end()
        if char == '"':
            # Skip the string: find the next quote not escaped by an odd run of
            # backslashes. Each character is looked at a bounded number of times.
            pos = _string_end(text, pos)
            if pos < 0:
                raise _invalid("unterminated JSON string", syntax_error_at=match.start())
        elif char in "[{":
            depth += 1
            if depth > max_depth:
                raise _invalid(
                    f"JSON nesting is deeper than {max_depth} levels",
                    offset=match.start(),
                    max_depth=max_depth,
                )
        elif char in "]}":
            depth -= 1
            if depth <= 0:
                return


def _string_end(text: str, pos: int) -> int:
    """Return the index after the closing quote of a string whose body starts at ``pos``."""
    while True:
        quote = text.find('"', pos)
        if quote < 0:
            return -1
        slashes = 0
        k = quote - 1
        while k >= pos and text[k] == "\\":
            slashes += 1
            k -= 1
        if slashes % 2 == 0:
            return quote + 1
        pos = quote + 1


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) == len(pairs):
        return out
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            raise _invalid(f"duplicate object key {key!r}", key=key)
        seen.add(key)
    return out  # pragma: no cover - unequal lengths mean a duplicate


def _no_constant(name: str) -> Any:
    raise _invalid(f"{name} is not valid JSON", constant=name)


def _has_lone_surrogate(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _too_deep(value: Any, max_depth: int) -> bool:
    """Whether a decoded value nests containers deeper than ``max_depth``."""
    if type(value) is not dict and type(value) is not list:
        return False
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > max_depth:
            return True
        children = item.values() if type(item) is dict else item
        stack.extend(
            (child, depth + 1) for child in children if type(child) is dict or type(child) is list
        )
    return False


def _line_column(text: str, pos: int) -> tuple[int, int]:
    line = text.count("\n", 0, pos) + 1
    return line, pos - text.rfind("\n", 0, pos)


def control_character_error(text: str, pos: int) -> PlanError:
    """The error for a raw control character at ``text[pos]`` inside a JSON string."""
    char = text[pos] if 0 <= pos < len(text) else "\0"
    code = f"U+{ord(char):04X}"
    name = _CONTROL_NAMES.get(char, "a control character")
    escape = json.dumps(char)[1:-1]
    line, column = _line_column(text, pos)
    return _invalid(
        f"not valid JSON: raw {name} ({code}) inside a string at line {line}, column {column}; "
        f"write it as the escape {escape}",
        syntax_error_at=pos,
        line=line,
        column=column,
        control_character=code,
    )


def is_control_character_error(value: Any) -> bool:
    """Whether ``value`` is the refusal of a raw control character inside a string."""
    return isinstance(value, PlanError) and "control_character" in value.details


class _Decoder:
    """A ``json.JSONDecoder`` configured with the limit-enforcing hooks.

    ``lenient`` allows raw control characters inside strings (``strict=False``),
    which decodes exactly what escaping them would.
    """

    def __init__(self, limits: PlanLimits, *, lenient: bool = False) -> None:
        max_chars = limits.max_number_chars

        def parse_int(literal: str) -> int:
            if len(literal) > max_chars:
                raise _invalid(f"integer literal longer than {max_chars} characters")
            return int(literal)

        def parse_float(literal: str) -> float:
            if len(literal) > max_chars:
                raise _invalid(f"number literal longer than {max_chars} characters")
            value = float(literal)
            if not math.isfinite(value):
                raise _invalid(f"number {literal[:40]!r} is out of range")
            return value

        self.limits = limits
        self.decoder = json.JSONDecoder(
            object_pairs_hook=_no_duplicates,
            parse_int=parse_int,
            parse_float=parse_float,
            parse_constant=_no_constant,
            strict=not lenient,
        )

    def _decode(self, text: str, start: int, *, whole: bool) -> tuple[Any, int]:
        max_depth = self.limits.max_json_depth
        if sys.getrecursionlimit() > _SAFE_RECURSION_LIMIT:
            check_depth(text, start, max_depth)
        try:
            if whole:
                value = self.decoder.decode(text)
                end = len(text)
            else:
                value, end = self.decoder.raw_decode(text, start)
        except PlanError:
            raise
        except json.JSONDecodeError as exc:
            if exc.msg.startswith("Invalid control character"):
                raise control_character_error(text, exc.pos) from exc
            raise _invalid(f"not valid JSON: {exc}", syntax_error_at=exc.pos) from exc
        except RecursionError as exc:
            check_depth(text, start, max_depth)  # raises the depth error, with its offset
            raise _invalid(f"not valid JSON: {exc}") from exc
        except ValueError as exc:
            raise _invalid(f"not valid JSON: {exc}") from exc
        if _too_deep(value, max_depth):
            check_depth(text, start, max_depth)  # raises the depth error, with its offset
            raise _invalid(f"JSON nesting is deeper than {max_depth} levels", max_depth=max_depth)
        if _ESCAPED_SURROGATE.search(text, start, end) and _has_lone_surrogate(value):
            raise _invalid("JSON text contains a lone UTF-16 surrogate")
        return value, end

    def loads(self, text: str) -> Any:
        """Decode ``text`` as exactly one JSON value (surrounding whitespace allowed)."""
        match = _LEADING_WS.match(text)
        return self._decode(text, match.end() if match else 0, whole=True)[0]

    def raw_decode(self, text: str, start: int) -> tuple[Any, int]:
        """Decode the JSON value that begins at ``start``; return it and where it ends."""
        return self._decode(text, start, whole=False)


@functools.lru_cache(maxsize=8)
def _decoder(limits: PlanLimits, *, lenient: bool = False) -> _Decoder:
    return _Decoder(limits, lenient=lenient)


def loads_strict_json(text: str, limits: PlanLimits) -> Any:
    """Decode one JSON value with every hostile-input guard on.

    Raises:
        PlanError: ``ERR_INVALID_JSON`` for anything that is not plain, finite,
            duplicate-free JSON within the limits; a raw control character inside
            a string is reported with its line and column.
    """
    return _decoder(limits).loads(text)


def _fenced_blocks(text: str, limit: int) -> Iterator[tuple[str, int, str]]:
    """Yield ``(tag, offset, body)`` of line-anchored fenced blocks (3+ backticks), in order."""
    pos = 0
    seen = 0
    while seen < limit:
        opening = _FENCE_OPEN.search(text, pos)
        if opening is None:
            return
        seen += 1
        fence = opening.group(1)
        closing = re.compile(rf"^[ \t]{{0,3}}`{{{len(fence)},}}[ \t]*\r?$", re.MULTILINE)
        body_start = opening.end() + 1
        close = closing.search(text, body_start)
        if close is None:
            pos = body_start  # an unclosed fence: keep looking for later, shorter ones
            continue
        yield opening.group(2).strip().lower(), body_start, text[body_start : close.start()]
        pos = close.end()


@dataclass(frozen=True, slots=True)
class Candidate:
    """One place of an answer that may hold the plan, and what decoding it gave."""

    where: str
    """Where in the answer: ``whole text``, a fenced block, or ``JSON at offset N``."""
    value: Any
    """The decoded JSON value, or the :class:`PlanError` that refused the candidate."""
    repaired_from: PlanError | None = None
    """When set, ``value`` was decoded with raw control characters inside strings
    allowed, and this is the error the candidate gave as written."""


def candidate_spans(text: str, limits: PlanLimits, *, repair: bool = False) -> Iterator[Candidate]:
    """Yield the JSON values found in LLM text, best first.

    Order: the whole text; fenced blocks tagged ``json`` (any case); other fenced
    blocks; then values starting at the first few ``{`` or ``[`` characters.
    Candidates that fail to decode carry their :class:`PlanError` as the value
    so the caller can report the most relevant failure. A candidate refused by a
    hostile-input guard (anything but a plain syntax error) ends the search: the
    answer holds a dangerous JSON value and nothing inside it is trusted. A raw
    value is never looked for inside an earlier candidate (before its end or
    its syntax error), so a fragment of a broken plan is not taken for a plan.

    With ``repair``, a candidate refused only for a raw control character inside
    a string is decoded again with such characters allowed; if that succeeds
    (every other guard still on) the candidate carries the repaired value and the
    original error in ``repaired_from``, and a raw candidate's extent is the
    repaired value's.
    """
    decoder = _decoder(limits)
    lenient = _decoder(limits, lenient=True)

    def attempt(where: str, chunk: str, offset: int) -> Candidate:
        try:
            return Candidate(where, decoder.loads(chunk))
        except PlanError as exc:
            error = exc
        if not is_control_character_error(error):
            return Candidate(where, error)
        # Line and column in the whole answer, not in the fenced block.
        error = control_character_error(text, offset + int(error.details["syntax_error_at"]))
        if repair:
            try:
                return Candidate(where, lenient.loads(chunk), repaired_from=error)
            except PlanError as exc:
                if is_hostile(exc):
                    return Candidate(where, exc)
        return Candidate(where, error)

    found = attempt("whole text", text, 0)
    yield found
    if is_hostile(found.value):
        return
    blocks = list(_fenced_blocks(text, limits.max_fence_candidates))
    ordered = [b for b in blocks if b[0] == "json"] + [b for b in blocks if b[0] != "json"]
    for tag, offset, body in ordered:
        found = attempt(f"```{tag} block" if tag else "``` block", body, offset)
        yield found
        if is_hostile(found.value):
            return
    yield from _raw_candidates(text, limits, repair=repair)


def _raw_candidates(text: str, limits: PlanLimits, *, repair: bool) -> Iterator[Candidate]:
    """The values starting at the first few ``{`` / ``[`` (see :func:`candidate_spans`)."""
    decoder = _decoder(limits)
    resume = 0
    tried = 0
    for match in re.finditer(r"[\[{]", text):
        start = match.start()
        if start < resume:
            continue
        if tried >= limits.max_fence_candidates:
            return
        tried += 1
        where = f"JSON at offset {start}"
        try:
            value, resume = decoder.raw_decode(text, start)
        except PlanError as exc:
            error = exc
        else:
            yield Candidate(where, value)
            continue
        if repair and is_control_character_error(error):
            try:
                value, resume = _decoder(limits, lenient=True).raw_decode(text, start)
            except PlanError as exc:
                if is_hostile(exc):
                    error = exc
            else:
                yield Candidate(where, value, repaired_from=error)
                continue
        yield Candidate(where, error)
        if is_hostile(error):
            return
        resume = max(start + 1, int(error.details.get("syntax_error_at", start + 1)))


def is_hostile(value: Any) -> bool:
    """Whether ``value`` is a decoding failure other than a plain syntax error."""
    return isinstance(value, PlanError) and "syntax_error_at" not in value.details
