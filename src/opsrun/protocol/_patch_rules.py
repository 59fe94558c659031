"""The tolerance ladder of patch placement: how a hunk's lines compare with a file's.

Each :class:`Rung` is one comparison, strictest first; a tolerance level admits the
rungs of its tier and below, and a hunk is placed by the first rung that matches.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal, NamedTuple

from opsrun.errors import ConfigError

__all__ = [
    "RANK",
    "RUNGS",
    "TAB_SIZES",
    "MatchRule",
    "PatchTolerance",
    "Rung",
    "check_tolerance",
    "find_all",
    "fit_indent",
    "indent_of",
    "loose",
    "same",
    "width_of",
    "widths",
]

PatchTolerance = Literal["exact", "whitespace", "loose"]
MatchRule = Literal[
    "exact", "trailing_whitespace", "whitespace", "reindented", "loose_text", "edge_context"
]

RANK: dict[str, int] = {"exact": 0, "whitespace": 1, "loose": 2}
TAB_SIZES = (4, 8, 2)


def check_tolerance(tolerance: object) -> PatchTolerance:
    """Return ``tolerance`` when it is a tolerance level.

    Raises:
        ConfigError: any other value.
    """
    if tolerance == "exact" or tolerance == "whitespace" or tolerance == "loose":
        return tolerance
    raise ConfigError(
        f"tolerance must be 'exact', 'whitespace' or 'loose', got {tolerance!r}",
        details={"field": "tolerance"},
    )


_PUNCT = str.maketrans(
    {
        **dict.fromkeys("\u2010\u2011\u2012\u2013\u2014\u2015\u2212", "-"),
        **dict.fromkeys("\u2018\u2019\u201a\u201b\u2032", "'"),
        **dict.fromkeys("\u201c\u201d\u201e\u201f\u2033", '"'),
        **dict.fromkeys("\u00a0\u2007\u2009\u200a\u202f\u205f\u3000", " "),
        **dict.fromkeys("\u200b\u200c\u200d\u2060\ufeff", None),
        "\u2026": "...",
    }
)


def same(line: str) -> str:
    """The line as it is (the ``exact`` rule's key)."""
    return line


def _rstrip(line: str) -> str:
    return line.rstrip()


def _strip(line: str) -> str:
    return line.strip()


def loose(line: str) -> str:
    """The line with punctuation look-alikes folded and runs of spaces joined."""
    return " ".join(line.translate(_PUNCT).split())


class Rung(NamedTuple):
    """One rule of the ladder: how lines compare and how indentation may differ."""

    rule: MatchRule
    tier: PatchTolerance
    key: Callable[[str], str]
    indent: Literal["same", "tabs", "shift", "any"]
    drop: tuple[int, int] = (0, 0)  # context lines left out at the start and at the end


RUNGS = (
    Rung("exact", "exact", same, "same"),
    Rung("trailing_whitespace", "whitespace", _rstrip, "same"),
    Rung("whitespace", "whitespace", _strip, "tabs"),
    Rung("reindented", "loose", _strip, "shift"),
    Rung("loose_text", "loose", loose, "any"),
    Rung("edge_context", "loose", loose, "any", (1, 0)),
    Rung("edge_context", "loose", loose, "any", (0, 1)),
    Rung("edge_context", "loose", loose, "any", (1, 1)),
)


def indent_of(line: str) -> str:
    """The line's leading spaces and tabs."""
    return line[: len(line) - len(line.lstrip(" \t"))]


def width_of(indent: str, tab: int) -> int:
    """How many columns ``indent`` spans with tab stops every ``tab`` columns."""
    col = 0
    for char in indent:
        col = (col // tab + 1) * tab if char == "\t" else col + 1
    return col


def fit_indent(kind: str, pattern: Sequence[str], lines: Sequence[str]) -> int | None:
    """Return the tab size under which the indentations agree as ``kind`` asks, or None.

    ``tabs``: every non-blank line is as wide in the file as in the hunk; ``shift``:
    every one is wider or narrower by the same amount.
    """
    if kind in ("same", "any"):
        return TAB_SIZES[0]
    pairs = [(indent_of(p), indent_of(f)) for p, f in zip(pattern, lines, strict=True) if p.strip()]
    for tab in TAB_SIZES:
        deltas = {width_of(f, tab) - width_of(p, tab) for p, f in pairs}
        if deltas == {0} or (kind == "shift" and len(deltas) == 1):
            return tab
    return None


def find_all(text: Sequence[object], pattern: Sequence[object]) -> list[int]:
    """Every index where ``pattern`` occurs in ``text`` (Knuth-Morris-Pratt, linear)."""
    size = len(pattern)
    if size == 0 or size > len(text):
        return []
    fail = [0] * size
    k = 0
    for i in range(1, size):
        while k and pattern[i] != pattern[k]:
            k = fail[k - 1]
        if pattern[i] == pattern[k]:
            k += 1
        fail[i] = k
    found: list[int] = []
    k = 0
    for i, item in enumerate(text):
        while k and item != pattern[k]:
            k = fail[k - 1]
        if item == pattern[k]:
            k += 1
            if k == size:
                found.append(i - size + 1)
                k = fail[k - 1]
    return found


def widths(lines: Sequence[str], tab: int, *, relative: bool) -> list[int | None]:
    """Each line's indentation width (None for a blank line); ``relative``: less the previous
    non-blank line's, None for the first one (it matches nothing)."""
    out: list[int | None] = []
    previous: int | None = None
    for line in lines:
        if not line.strip():
            out.append(None)
            continue
        width = width_of(indent_of(line), tab)
        if not relative:
            out.append(width)
        else:
            out.append(None if previous is None else width - previous)
            previous = width
    return out
