"""Where a hunk goes: GNU ``patch -F0`` placement, a tolerance ladder, and the ambiguity rule.

A hunk is first tried at its stated line (plus the offset the previous hunk was
found at) under every rule the tolerance allows; when it matches there, it applies
there. Otherwise the rules are tried strictest first over every line it may go;
the first rule that matches anywhere decides, and it must match in exactly one
place: several places are ``ERR_PATCH_AMBIGUOUS`` with the candidate lines, never
the first or the nearest one. No match at all names the closest region.

A hunk whose last old line is marked ``\\ No newline at end of file`` only matches
with that line on the file's last line, at every level (GNU reads the marker so).

Rules by tolerance:

- ``exact``: identical lines (the line ending aside), with GNU's placement limits
  (a hunk with less leading than trailing context sits at the start of the file,
  one with less trailing context at the end).
- ``whitespace``: also trailing whitespace, then leading whitespace when the two
  indentations are as wide under one tab size (tabs against spaces).
- ``loose``: also a block indented by a constant amount, Unicode punctuation
  (dashes, quotes, non-breaking and zero-width spaces) and runs of spaces, a wrong
  or missing context line at either edge of the hunk, hunks without line numbers,
  and no placement limits.

Added lines of a hunk matched with its indentation ignored are re-indented to the
file's indentation, in the file's tabs-or-spaces style.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from opsrun.errors import PatchError

from ._patch_rules import (
    RANK,
    RUNGS,
    TAB_SIZES,
    MatchRule,
    PatchTolerance,
    Rung,
    check_tolerance,
    find_all,
    fit_indent,
    indent_of,
    loose,
    same,
    width_of,
    widths,
)

__all__ = [
    "HunkPlacement",
    "MatchRule",
    "PatchResult",
    "PatchTolerance",
    "check_tolerance",
]

_MAX_CANDIDATES = 20
_MAX_SHOWN = 200
_COMMON = 500  # a line seen more often than this says nothing about where a hunk is


class HunkPlacement(BaseModel):
    """Where one hunk of a patch applied, and which rule matched it there."""

    model_config = ConfigDict(frozen=True)

    hunk: int = Field(description="The hunk's number in the patch, from 1.")
    header: str = Field(description="The hunk's '@@' line as written.")
    stated_line: int | None = Field(
        description="The old-file line the header states; None when it has no numbers."
    )
    line: int = Field(description="The old-file line (1-based) where the hunk's context begins.")
    offset: int = Field(
        description="How many lines the hunk moved from its stated line (0 without numbers)."
    )
    level: PatchTolerance = Field(description="The least tolerance that accepts this placement.")
    rule: MatchRule = Field(description="The comparison that matched the hunk's context.")

    @property
    def relocated(self) -> bool:
        """Whether the hunk did not apply exactly at its stated line."""
        return self.offset != 0 or self.level != "exact" or self.stated_line is None


class PatchResult(BaseModel):
    """A patched text and, per hunk, where it applied."""

    model_config = ConfigDict(frozen=True)

    text: str = Field(description="The patched text.")
    hunks: tuple[HunkPlacement, ...] = Field(description="One placement per hunk, in order.")

    @property
    def relocated(self) -> tuple[HunkPlacement, ...]:
        """The hunks that moved or needed more than an exact match."""
        return tuple(h for h in self.hunks if h.relocated)


class Hunk(NamedTuple):
    """One hunk, ready to place: its pattern (old side) and its edit operations."""

    number: int
    header: str
    first: int  # GNU's p_first: the stated old start, +1 for a hunk with no old lines
    old: list[str]  # context and removed lines, without line endings
    ops: tuple[tuple[str, str, bool], ...]  # (" " | "-" | "+", text, lacks a final newline)
    prefix: int  # context lines before the first change
    suffix: int  # context lines after the last change
    numbered: bool = True  # False: the header states no line (accepted when loose)
    at_end: bool = False  # its last old line has no newline: it can only be the file's last


def _show(line: str | None) -> str:
    if line is None:
        return "<end of file>"
    return repr(line if len(line) <= _MAX_SHOWN else line[:_MAX_SHOWN] + "…")


def _trim(hunk: Hunk, drop: tuple[int, int]) -> Hunk | None:
    """The hunk without ``drop`` context lines at its edges, or None when it cannot lose them."""
    start, end = drop
    if drop == (0, 0):
        return hunk
    if hunk.prefix < start or hunk.suffix < end or len(hunk.old) <= start + end:
        return None
    ops = hunk.ops[start : len(hunk.ops) - end]
    return hunk._replace(
        first=hunk.first + start,
        old=hunk.old[start : len(hunk.old) - end],
        ops=ops,
        prefix=hunk.prefix - start,
        suffix=hunk.suffix - end,
        at_end=hunk.at_end and not end,
    )


class Placer:
    """Places the hunks of one patch in one file's lines, under one tolerance."""

    __slots__ = (
        "_idcache",
        "_index",
        "_keys",
        "_tabs",
        "_widthcache",
        "examined",
        "label",
        "lines",
        "report",
        "rungs",
        "tolerance",
    )

    def __init__(
        self, lines: list[str], tolerance: PatchTolerance, label: str, *, report: bool = True
    ) -> None:
        self.lines = lines  # the file's lines without line endings
        self.report = report  # build a HunkPlacement per hunk (apply_patch needs none)
        self.tolerance = tolerance
        self.label = label
        self.rungs = [r for r in RUNGS if RANK[r.tier] <= RANK[tolerance]]
        self._keys: dict[Callable[[str], str], list[str]] = {same: lines}
        self._index: dict[Callable[[str], str], dict[str, list[int]]] = {}
        self._tabs: bool | None = None
        self._idcache: dict[Callable[[str], str], list[int]] = {}
        self._widthcache: dict[tuple[int, bool], list[int | None]] = {}
        # File lines compared with a hunk so far: linear in the file per hunk and rule.
        self.examined = 0

    def keys(self, key: Callable[[str], str]) -> list[str]:
        found = self._keys.get(key)
        if found is None:
            found = self._keys[key] = [key(s) for s in self.lines]
        return found

    def index(self, key: Callable[[str], str]) -> dict[str, list[int]]:
        found = self._index.get(key)
        if found is None:
            found = {}
            for i, k in enumerate(self.keys(key)):
                found.setdefault(k, []).append(i + 1)
            self._index[key] = found
        return found

    def file_uses_tabs(self) -> bool:
        if self._tabs is None:
            tabs = sum(1 for s in self.lines if s.startswith("\t"))
            spaces = sum(1 for s in self.lines if s.startswith(" ") and s.strip())
            self._tabs = tabs > spaces
        return self._tabs

    # -- one hunk -------------------------------------------------------------------------

    def place(
        self, hunk: Hunk, in_offset: int, frozen: int
    ) -> tuple[Hunk, int, HunkPlacement | None]:
        """Return the hunk to apply (trimmed, re-indented), its line, and its placement.

        Raises:
            PatchError: ``ERR_PATCH_AMBIGUOUS`` when the stated line does not decide and
                the hunk matches in several places; ``ERR_PATCH_APPLY_FAILED`` when it
                matches nowhere it may go.
        """
        guess = hunk.first + in_offset
        if not hunk.old:
            if not hunk.numbered:
                raise self.failure(hunk, None, "it has neither context lines nor line numbers")
            return hunk, guess, self._placement(hunk, guess, RUNGS[0])
        stated = guess if hunk.numbered else None
        lo = frozen + 1
        for rung in self.rungs:
            part = _trim(hunk, rung.drop)
            if part is None:
                continue
            pattern = part.old if rung.key is same else [rung.key(s) for s in part.old]
            # A hunk cut short at its edges has lost what pins it to its stated line.
            at = None if stated is None or rung.drop != (0, 0) else stated
            if at is not None and at in self._allowed(part, rung, lo, at):
                fit = self._fits(pattern, part, rung, at)
                if fit is not None:
                    return self._done(hunk, part, at, rung, fit)
            near = None if stated is None else stated + rung.drop[0]
            found = self._matches(pattern, part, rung, self._allowed(part, rung, lo, near))
            if len(found) == 1:
                return self._done(hunk, part, found[0][0], rung, found[0][1])
            if found:
                raise self._ambiguous(hunk, stated, rung, [pos for pos, _ in found])
        raise self.failure(hunk, stated, "its context matches nowhere it may go")

    def _anchored(self) -> bool:
        return self.tolerance != "loose"

    def _allowed(self, part: Hunk, rung: Rung, lo: int, guess: int | None) -> range:
        """The lines the hunk may start at: GNU's limits, none of them when loose.

        As in GNU ``patch``, a hunk stated before the end of the previous one is also
        looked for as far before it as it was stated (and then fails as overlapping).
        """
        hi = len(self.lines) - len(part.old) + 1
        allowed = range(max(lo if guess is None else min(lo, 2 * guess - lo), 1), hi + 1)
        if self._anchored() and rung.drop == (0, 0):
            if part.prefix < part.suffix and part.first <= 1:
                allowed = range(1, 2) if lo - 1 <= part.prefix and hi >= 1 else range(0)
            elif part.suffix < part.prefix:
                allowed = range(hi, hi + 1) if hi >= lo else range(0)
        if part.at_end:  # "\ No newline at end of file" on the old side, as GNU reads it
            return range(hi, hi + 1) if hi in allowed else range(0)
        return allowed

    def _matches(
        self, pattern: list[str], part: Hunk, rung: Rung, allowed: range
    ) -> list[tuple[int, int]]:
        """Every line in ``allowed`` where the hunk matches under ``rung``, with its tab size.

        The lines where the hunk's rarest pattern line would put its start are checked one
        by one while that costs no more than a scan of the allowed lines; otherwise (a hunk
        made of common lines) the pattern is searched for in one linear pass.
        """
        if len(allowed) <= 1:
            found = [(pos, self._fits(pattern, part, rung, pos)) for pos in allowed]
            return [(pos, tab) for pos, tab in found if tab is not None]
        index = self.index(rung.key)
        size = len(pattern)
        counts = [len(index.get(k, ())) for k in pattern]
        best = min(range(size), key=counts.__getitem__)
        if counts[best] * size <= 2 * (len(allowed) + size):
            found = [
                (p - best, self._fits(pattern, part, rung, p - best))
                for p in index.get(pattern[best], ())
                if p - best in allowed
            ]
            return [(pos, tab) for pos, tab in found if tab is not None]
        return self._search(pattern, part, rung, allowed)

    def _search(
        self, pattern: list[str], part: Hunk, rung: Rung, allowed: range
    ) -> list[tuple[int, int]]:
        """:meth:`_matches` in linear time: a Knuth-Morris-Pratt search per sequence."""
        if not allowed:
            return []
        ids = self._ids(rung.key)
        of = self._index[rung.key]
        wanted = [of[k][0] - 1 for k in pattern]  # a line's id: its first line, 0-based
        lo, stop = allowed.start - 1, allowed[-1] - 1 + len(pattern)  # 0-based, the window
        self.examined += stop - lo + len(pattern)
        hits = [lo + 1 + at for at in find_all(ids[lo:stop], wanted)]
        if rung.indent in ("same", "any"):
            return [(pos, TAB_SIZES[0]) for pos in hits]
        # Indentation as a sequence too: each non-blank line's width ("tabs"), or its width
        # less the previous non-blank line's ("shift"), under each tab size in turn.
        first = next((j for j, text in enumerate(part.old) if text.strip()), None)
        if first is None:
            return []
        left = set(hits)
        tabs: dict[int, int] = {}
        for tab in TAB_SIZES:
            if not left:
                break
            skip = 0 if rung.indent == "tabs" else first + 1
            want = widths(part.old, tab, relative=rung.indent == "shift")[skip:]
            have = self._widths(tab, relative=rung.indent == "shift")
            self.examined += stop - lo + len(want)
            if want:
                starts = {lo + 1 + at for at in find_all(have[lo + skip : stop], want)}
            else:
                starts = set(left)
            for pos in left & starts:
                tabs[pos] = tab
            left -= starts
        return sorted(tabs.items())

    def _ids(self, key: Callable[[str], str]) -> list[int]:
        """Each line's key as a number (the first line with that key, 0-based)."""
        found = self._idcache.get(key)
        if found is None:
            index = self.index(key)
            found = self._idcache[key] = [index[k][0] - 1 for k in self.keys(key)]
        return found

    def _widths(self, tab: int, *, relative: bool) -> list[int | None]:
        found = self._widthcache.get((tab, relative))
        if found is None:
            found = self._widthcache[tab, relative] = widths(self.lines, tab, relative=relative)
        return found

    def _fits(self, pattern: list[str], part: Hunk, rung: Rung, pos: int) -> int | None:
        """The tab size the match at ``pos`` uses under ``rung``, or None when it does not match."""
        size = len(part.old)
        keys = self.keys(rung.key)
        if pos < 1 or pos - 1 + size > len(keys):
            return None
        self.examined += size
        if keys[pos - 1 : pos - 1 + size] != pattern:
            return None
        return fit_indent(rung.indent, part.old, self.lines[pos - 1 : pos - 1 + size])

    def _done(
        self, hunk: Hunk, part: Hunk, pos: int, rung: Rung, tab: int
    ) -> tuple[Hunk, int, HunkPlacement | None]:
        if rung.indent != "same":
            part = self._reindent(hunk, part, pos, tab)
        return part, pos, self._placement(hunk, pos - rung.drop[0], rung)

    def _placement(self, hunk: Hunk, line: int, rung: Rung) -> HunkPlacement | None:
        if not self.report:
            return None
        level = rung.tier
        if not hunk.numbered or (
            rung.drop == (0, 0)
            and hunk.old
            and line not in _gnu_allowed(hunk, len(self.lines), line)
        ):
            level = "loose"
        # Built from checked values on every hunk of every patch: skip re-validation.
        return HunkPlacement.model_construct(
            hunk=hunk.number,
            header=hunk.header,
            stated_line=hunk.first if hunk.numbered else None,
            line=line,
            offset=line - hunk.first if hunk.numbered else 0,
            level=level,
            rule=rung.rule,
        )

    def _reindent(self, hunk: Hunk, part: Hunk, pos: int, tab: int) -> Hunk:
        """Give the added lines the file's indentation, relative to the nearest matched line."""
        refs: list[tuple[str, str] | None] = []
        at = pos - 1
        for kind, text, _ in part.ops:
            if kind == "+":
                refs.append(None)
            else:
                refs.append((indent_of(text), indent_of(self.lines[at])) if text.strip() else None)
                at += 1
        ops = list(part.ops)
        for i, (kind, text, lacks_nl) in enumerate(part.ops):
            if kind != "+":
                continue
            if not text.strip():
                ops[i] = (kind, "", lacks_nl)
                continue
            before = next((r for r in reversed(refs[:i]) if r is not None), None)
            after = next((r for r in refs[i + 1 :] if r is not None), None)
            shifts = {width_of(r[1], tab) - width_of(r[0], tab) for r in (before, after) if r}
            ref = before or after
            if ref is None:
                continue
            if len(shifts) > 1:
                raise self.failure(
                    hunk,
                    pos,
                    f"the lines around its added line {text.strip()[:60]!r} are re-indented "
                    "by different amounts, so its indentation in the file is unknown",
                )
            mine, theirs, added = ref[0], ref[1], indent_of(text)
            tabs = "\t" in theirs if theirs else self.file_uses_tabs()
            if mine == theirs and ("\t" in added) == tabs:
                continue
            width = max(0, width_of(theirs, tab) + width_of(added, tab) - width_of(mine, tab))
            new = "\t" * (width // tab) + " " * (width % tab) if tabs else " " * width
            ops[i] = (kind, new + text[len(added) :], lacks_nl)
        return part._replace(ops=tuple(ops))

    # -- errors ---------------------------------------------------------------------------

    def _ambiguous(
        self, hunk: Hunk, stated: int | None, rung: Rung, candidates: list[int]
    ) -> PatchError:
        where = f"{self.label}: " if self.label else ""
        shown = ", ".join(str(c) for c in candidates[:_MAX_CANDIDATES])
        if len(candidates) > _MAX_CANDIDATES:
            shown += f" and {len(candidates) - _MAX_CANDIDATES} more"
        why = (
            f"it does not match at its stated line {stated}"
            if stated is not None
            else "it states no line"
        )
        return PatchError(
            f"{where}hunk #{hunk.number} ({hunk.header}) is ambiguous: {why}, and its "
            f"context matches ({rung.rule.replace('_', ' ')}) at lines {shown}; add context "
            "lines that tell them apart or correct the line numbers",
            code="ERR_PATCH_AMBIGUOUS",
            details={
                "path": self.label,
                "hunk": hunk.number,
                "header": hunk.header,
                "stated_line": stated,
                "rule": rung.rule,
                "candidates": candidates[:_MAX_CANDIDATES],
                "count": len(candidates),
            },
        )

    def failure(self, hunk: Hunk, guess: int | None, why: str) -> PatchError:
        """``ERR_PATCH_APPLY_FAILED`` naming the hunk, its first difference, the closest region."""
        keys = self.lines
        closest = self._closest(hunk, guess)
        line = max(guess if guess is not None else (closest[0] if closest else 1), 1)
        expected: str | None = None
        actual: str | None = None
        for n, want in enumerate(hunk.old):
            have = keys[line - 1 + n] if 0 <= line - 1 + n < len(keys) else None
            if have != want:
                expected, actual, line = want, have, line + n
                break
        where = f"{self.label}: " if self.label else ""
        message = f"{where}hunk #{hunk.number} ({hunk.header}) does not apply: {why}"
        if expected is not None and guess is not None:
            message += (
                f"; at line {line} expected {_show(expected)} but the file has {_show(actual)}"
            )
        details: dict[str, object] = {
            "path": self.label,
            "hunk": hunk.number,
            "header": hunk.header,
            "line": line,
            "expected": expected,
            "actual": actual,
        }
        if closest is not None:
            start, same, differences = closest
            end = start + len(hunk.old) - 1
            message += (
                f"; the closest region is lines {start}-{end} ({same} of {len(hunk.old)} "
                "lines alike up to whitespace and punctuation)"
            )
            if differences:
                at, want, have = differences[0]
                message += (
                    f"; did you mean line {at} {_show(have)} where the patch has {_show(want)}"
                )
            details["closest"] = {
                "line": start,
                "alike": same,
                "differences": [
                    {"line": at, "expected": want, "actual": have} for at, want, have in differences
                ],
            }
        return PatchError(message, code="ERR_PATCH_APPLY_FAILED", details=details)

    def _closest(
        self, hunk: Hunk, guess: int | None
    ) -> tuple[int, int, list[tuple[int, str, str | None]]] | None:
        """The start of the region most like the hunk's old side, with its differing lines."""
        if not hunk.old or not self.lines:
            return None
        index = self.index(loose)
        votes: dict[int, int] = {}
        for j, text in enumerate(hunk.old):
            key = loose(text)
            found = index.get(key, ()) if key else ()
            if len(found) > _COMMON:
                continue
            for p in found:
                votes[p - j] = votes.get(p - j, 0) + 1
        if not votes:
            return None
        near = guess if guess is not None else 0
        start = max(votes, key=lambda s: (votes[s], -abs(s - near), -s))
        differences: list[tuple[int, str, str | None]] = []
        for j, want in enumerate(hunk.old):
            at = start + j
            have = self.lines[at - 1] if 1 <= at <= len(self.lines) else None
            if have != want and len(differences) < 5:
                differences.append((at, want, have))
        return max(start, 1), votes[start], differences


def _gnu_allowed(hunk: Hunk, lines: int, line: int) -> range:
    """Lines GNU ``patch -F0`` could start ``hunk`` at, ignoring the previous hunks."""
    hi = lines - len(hunk.old) + 1
    if hunk.prefix < hunk.suffix and hunk.first <= 1:
        return range(1, 2)
    if hunk.suffix < hunk.prefix:
        return range(hi, hi + 1)
    return range(1, max(hi, line) + 1)
