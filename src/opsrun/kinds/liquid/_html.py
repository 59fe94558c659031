"""Removing HTML markup in one linear pass, for the ``strip_html`` filter.

python-liquid's ``strip_html`` runs the standard library's ``html.parser``, which takes
quadratic time on unterminated markup (``">" + "<a " * 20_000`` takes seconds), and one
filter call cannot be interrupted by the render's time budget. This module gives the
same result on ordinary HTML:

- start and end tags are removed; a ``>`` inside a quoted attribute value does not end
  a start tag;
- comments (``<!-- … -->``), declarations (``<!DOCTYPE …>``, ``<![CDATA[ … ]]>``) and
  processing instructions (``<? … >``) are removed;
- the contents of ``<script>`` and ``<style>`` elements are removed with their tags
  (an element that is never closed removes the rest of the text);
- a ``<`` that starts no markup (``a < b``) is text, and markup that never ends is text
  through the next ``>`` (or to the end when no ``>`` follows);
- everything else, character references included, is kept exactly as written.

Unlike ``html.parser`` it does not add a ``;`` to an unterminated reference (``AT&T``
stays ``AT&T``), does not stop at a malformed ``&#``, and ignores an end tag of
``script`` or ``style`` that closes nothing.

Every search either consumes the text it crosses or is remembered, so the work is
linear in the text's length. The one search that can run past what it consumes, the
quote-aware scan of a start tag that turns out unterminated, draws on a budget of twice
the text's length; once that is spent (only malformed markup spends it), a start tag
ends at its first ``>``.
"""

from __future__ import annotations

import re
from collections.abc import Callable

__all__ = ["strip_tags"]

_TAG_NAME = re.compile(r"[a-zA-Z][^\t\n\r\f />\x00]*")
_TAG_STOP = re.compile(r">|=+\s*")
"""Inside a start tag: its end, or the ``=`` before an attribute value."""
_BARE_VALUE = re.compile(r"[^>\s]*")
_SECTION_NAME = re.compile(r"[a-zA-Z][-_.a-zA-Z0-9]*")
_SECTIONS = frozenset({"temp", "cdata", "ignore", "include", "rcdata"})
_RAW_TEXT = ("script", "style")
_CLOSERS = {
    ">": re.compile(">"),
    "comment": re.compile(r"--\s*>"),
    "section": re.compile(r"]\s*]\s*>"),
    "ms_section": re.compile(r"]\s*>"),
    "script": re.compile(r"</\s*script\s*>", re.IGNORECASE),
    "style": re.compile(r"</\s*style\s*>", re.IGNORECASE),
}
"""What ends each kind of markup."""
_MARKUP_START = re.compile(r"<[a-zA-Z/!?]")
"""A ``<`` that may start markup; any other ``<`` is text."""
_UNTERMINATED = -1


def _no_tick() -> None:
    pass


def strip_tags(text: str, *, tick: Callable[[], None] = _no_tick) -> str:
    """``text`` without its HTML markup, in time linear in its length (see the module).

    ``tick`` is called before each piece of markup and each attribute value is looked
    at; whatever it raises (a time budget's error) stops the work and propagates.
    """
    if "<" not in text or ">" not in text:
        return text
    return _Stripper(text, tick).strip()


class _Stripper:
    """One pass over one text."""

    __slots__ = ("found", "scan_budget", "text", "tick")

    def __init__(self, text: str, tick: Callable[[], None]) -> None:
        self.text = text
        self.tick = tick
        self.found: dict[str, tuple[int, int, int]] = {}
        """Closer -> (searched from, match start, match end) of its latest search."""
        self.scan_budget = 2 * len(text) + 64

    def strip(self) -> str:
        """The text without its markup."""
        text = self.text
        kept: list[str] = []
        pos = 0
        while (start := _MARKUP_START.search(text, pos)) is not None:
            self.tick()
            lt = start.start()
            end, raw = self._markup_end(lt)
            if end == _UNTERMINATED:
                gt = self._find(">", lt + 1)[1]
                if gt < 0:
                    break  # no markup can end after here: the rest is text
                kept.append(text[pos:gt])  # the unterminated markup is text through '>'
                pos = gt
                continue
            kept.append(text[pos:lt])
            pos = end
            if raw is not None:
                pos = self._find(raw, pos)[1]
                if pos < 0:
                    return "".join(kept)  # an unclosed script or style: the rest is dropped
        kept.append(text[pos:])
        return "".join(kept)

    def _find(self, closer: str, pos: int) -> tuple[int, int]:
        """Start and end of the first match of ``closer`` at or after ``pos``, or
        ``(-1, -1)``; a search the latest one already answers is not repeated."""
        latest = self.found.get(closer)
        if latest is not None:
            origin, start, end = latest
            if origin <= pos and (start < 0 or pos <= start):
                return start, end
        match = _CLOSERS[closer].search(self.text, pos)
        start, end = (match.start(), match.end()) if match else (-1, -1)
        self.found[closer] = (pos, start, end)
        return start, end

    def _through(self, closer: str, pos: int) -> int:
        """The index after the first ``closer`` at or after ``pos``, or _UNTERMINATED."""
        end = self._find(closer, pos)[1]
        return end if end >= 0 else _UNTERMINATED

    def _markup_end(self, lt: int) -> tuple[int, str | None]:
        """The index after the markup starting at ``lt`` (or _UNTERMINATED) and, for an
        opening ``script`` or ``style`` tag, the element's name."""
        text = self.text
        kind = text[lt + 1]
        if kind.isalpha():
            end = self._start_tag_end(lt)
            name_match = _TAG_NAME.match(text, lt + 1)
            name = name_match.group().lower() if name_match else ""
            opens_raw = end != _UNTERMINATED and name in _RAW_TEXT and text[end - 2] != "/"
            return end, name if opens_raw else None
        if kind == "/" or kind == "?":
            return self._through(">", lt + 2), None
        if text.startswith("<!--", lt):
            return self._through("comment", lt + 4), None
        if text.startswith("<![", lt):
            name_match = _SECTION_NAME.match(text, lt + 3)
            standard = name_match is not None and name_match.group().lower() in _SECTIONS
            return self._through("section" if standard else "ms_section", lt + 3), None
        return self._through(">", lt + 2), None  # <!DOCTYPE …> and other declarations

    def _start_tag_end(self, lt: int) -> int:
        """The index after the start tag at ``lt``: after its first ``>`` outside a
        quoted attribute value (``title="a>b"``), or _UNTERMINATED."""
        if self.scan_budget <= 0:
            return self._through(">", lt + 2)
        text = self.text
        name = _TAG_NAME.match(text, lt + 1)
        pos = name.end() if name else lt + 2
        while (stop := _TAG_STOP.search(text, pos)) is not None:
            self.tick()
            pos = stop.end()
            if stop.group() == ">":
                return pos  # the scan crossed only the tag, which is consumed
            quote = text[pos : pos + 1]
            if quote == '"' or quote == "'":
                close = text.find(quote, pos + 1)
                if close < 0:
                    break
                pos = close + 1
            elif bare := _BARE_VALUE.match(text, pos):
                pos = bare.end()  # an unquoted value, which may hold quotes
        self.scan_budget -= len(text) - lt  # at most: the scan may have crossed the rest
        return _UNTERMINATED
