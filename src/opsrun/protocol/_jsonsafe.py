"""Hostile-input-safe JSON decoding and best-effort extraction from LLM text.

``json.loads`` alone is not safe on untrusted text: deep nesting raises
``RecursionError``, a million-digit integer costs seconds, ``NaN`` and duplicate
keys are accepted silently and ``"\\ud800"`` yields a lone surrogate. Here:

* nesting depth is measured first, without recursion, by a linear regex scan
  that skips string literals; deeper than ``max_json_depth`` is refused;
* number literals longer than ``max_number_chars`` are refused before they are
  converted; non-finite floats (``1e999``) and ``NaN``/``Infinity`` are refused;
* duplicate object keys are refused;
* lone surrogates, raw or escaped, are refused.

Every refusal is a :class:`~opsrun.errors.PlanError` with ``ERR_INVALID_JSON``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from typing import Any

from opsrun.errors import PlanError

from ._limits import PlanLimits

__all__ = ["candidate_spans", "is_hostile", "loads_strict_json"]

_STRUCTURAL = re.compile(r'[\[\]{}"]')
_ESCAPED_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")
_FENCE_OPEN = re.compile(r"^[ \t]{0,3}(`{3,})[ \t]*([^`\r\n]*)\r?$", re.MULTILINE)


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
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _invalid(f"duplicate object key {key!r}", key=key)
        out[key] = value
    return out


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


class _Decoder:
    """A ``json.JSONDecoder`` configured with the limit-enforcing hooks."""

    def __init__(self, limits: PlanLimits) -> None:
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
        )

    def _finish(self, value: Any, text: str) -> Any:
        if _ESCAPED_SURROGATE.search(text) and _has_lone_surrogate(value):
            raise _invalid("JSON text contains a lone UTF-16 surrogate")
        return value

    def loads(self, text: str) -> Any:
        """Decode ``text`` as exactly one JSON value (surrounding whitespace allowed)."""
        start = len(text) - len(text.lstrip())
        check_depth(text, start, self.limits.max_json_depth)
        try:
            value = self.decoder.decode(text)
        except PlanError:
            raise
        except json.JSONDecodeError as exc:
            raise _invalid(f"not valid JSON: {exc}", syntax_error_at=exc.pos) from exc
        except (ValueError, RecursionError) as exc:
            raise _invalid(f"not valid JSON: {exc}") from exc
        return self._finish(value, text)

    def raw_decode(self, text: str, start: int) -> tuple[Any, int]:
        """Decode the JSON value that begins at ``start``; return it and where it ends."""
        check_depth(text, start, self.limits.max_json_depth)
        try:
            value, end = self.decoder.raw_decode(text, start)
        except PlanError:
            raise
        except json.JSONDecodeError as exc:
            raise _invalid(f"not valid JSON: {exc}", syntax_error_at=exc.pos) from exc
        except (ValueError, RecursionError) as exc:
            raise _invalid(f"not valid JSON: {exc}") from exc
        return self._finish(value, text[start:end]), end


def loads_strict_json(text: str, limits: PlanLimits) -> Any:
    """Decode one JSON value with every hostile-input guard on.

    Raises:
        PlanError: ``ERR_INVALID_JSON`` for anything that is not plain, finite,
            duplicate-free JSON within the limits.
    """
    return _Decoder(limits).loads(text)


def _fenced_blocks(text: str, limit: int) -> Iterator[tuple[str, str]]:
    """Yield ``(tag, body)`` of line-anchored fenced blocks (3+ backticks), in order."""
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
        yield opening.group(2).strip().lower(), text[body_start : close.start()]
        pos = close.end()


def candidate_spans(text: str, limits: PlanLimits) -> Iterator[tuple[str, Any]]:
    """Yield ``(where, value)`` for each JSON value found in LLM text, best first.

    Order: the whole text; fenced blocks tagged ``json`` (any case); other fenced
    blocks; then values starting at the first few ``{`` or ``[`` characters.
    Candidates that fail to decode yield their :class:`PlanError` as the value
    so the caller can report the most relevant failure. A candidate refused by a
    hostile-input guard (anything but a plain syntax error) ends the search: the
    answer holds a dangerous JSON value and nothing inside it is trusted. A raw
    value is never looked for inside an earlier candidate (before its end or
    its syntax error), so a fragment of a broken plan is not taken for a plan.
    """
    decoder = _Decoder(limits)

    def attempt(where: str, chunk: str) -> tuple[str, Any]:
        try:
            return where, decoder.loads(chunk)
        except PlanError as exc:
            return where, exc

    found = attempt("whole text", text)
    yield found
    if is_hostile(found[1]):
        return
    blocks = list(_fenced_blocks(text, limits.max_fence_candidates))
    ordered = [b for b in blocks if b[0] == "json"] + [b for b in blocks if b[0] != "json"]
    for tag, body in ordered:
        found = attempt(f"```{tag} block" if tag else "``` block", body)
        yield found
        if is_hostile(found[1]):
            return
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
            yield where, exc
            if is_hostile(exc):
                return
            resume = max(start + 1, int(exc.details.get("syntax_error_at", start + 1)))
            continue
        yield where, value


def is_hostile(value: Any) -> bool:
    """Whether ``value`` is a decoding failure other than a plain syntax error."""
    return isinstance(value, PlanError) and "syntax_error_at" not in value.details
