"""The filters the sandbox adds to or replaces in Liquid's own: ``last: n``, ``transcript``,
and linear-time ``uniq`` and ``strip_html``."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from liquid import Environment, Undefined
from liquid.builtin.filters.array import last as _liquid_last
from liquid.exceptions import FilterArgumentError
from liquid.filter import int_arg, sequence_filter, string_filter, with_environment
from liquid.stringify import to_liquid_string

from ._html import strip_tags

__all__ = ["last", "strip_html_filter", "transcript", "uniq"]

# --- opsrun filters ----------------------------------------------------------------

_NO_COUNT = object()


@with_environment
def last(sequence: Any, count: object = _NO_COUNT, *, environment: Environment) -> object:
    """``last`` keeps its standard meaning; ``last: n`` returns the last n items as a list."""
    if count is _NO_COUNT:
        return _liquid_last(sequence, environment=environment)
    n = int_arg(count)
    if n < 0:
        raise FilterArgumentError(f"last: expected a count >= 0, found {n}", token=None)
    if isinstance(sequence, list | tuple | range):
        return list(sequence[-n:]) if n else []
    if isinstance(sequence, Undefined) or sequence is None:
        return []
    return None


def _content_text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        # Multi-part message content: keep the text parts, in order.
        return "".join(
            str(part.get("text", ""))
            if isinstance(part, Mapping)
            else to_liquid_string(part, False)
            for part in content
        )
    return to_liquid_string(content, False)


def transcript(messages: object, separator: object = "\n", **role_labels: object) -> str:
    """Format chat messages as ``role: content`` lines joined by ``separator``."""
    if isinstance(messages, Mapping) and not isinstance(messages, Undefined):
        messages = [messages]
    if not isinstance(messages, list | tuple):
        return ""
    sep = separator if isinstance(separator, str) else to_liquid_string(separator, False)
    lines = []
    for message in messages:
        if not isinstance(message, Mapping):
            continue
        role = to_liquid_string(message.get("role"), False)
        label = role_labels.get(role, role)
        lines.append(f"{to_liquid_string(label, False)}: {_content_text(message.get('content'))}")
    return sep.join(lines)


@sequence_filter
def uniq(sequence: Sequence[Any], key: object = None) -> list[object]:
    """liquid's ``uniq`` in linear time for hashable items (the original is quadratic)."""
    seen: set[Any] = set()
    seen_unhashable: list[object] = []
    result: list[object] = []
    for item in sequence:
        probe = item
        if key is not None:
            try:
                probe = item[key] if isinstance(item, Mapping) else None
            except (KeyError, TypeError):
                probe = None
        try:
            if probe in seen:
                continue
            seen.add(probe)
        except TypeError:
            if probe in seen_unhashable:
                continue
            if len(seen_unhashable) >= 1_000:
                raise FilterArgumentError(
                    "uniq: more than 1000 distinct unhashable items", token=None
                ) from None
            seen_unhashable.append(probe)
        result.append(item)
    return result


def strip_html_filter(tick: Callable[[], None]) -> Callable[..., str]:
    """liquid's ``strip_html`` in linear time (the original is quadratic on unterminated
    markup, see :mod:`._html`), calling ``tick`` as it goes so a time budget can stop it."""

    @string_filter
    def strip_html(value: str) -> str:
        """``value`` without its HTML tags, comments and script or style contents."""
        return strip_tags(value, tick=tick)

    return strip_html
