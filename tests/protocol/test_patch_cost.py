"""Hunk placement costs linear work in the file, at every tolerance: counted, not timed.

The hard case is a file of repeated lines and a hunk made of them: every line is a
candidate, and checking each one against the whole hunk would be quadratic.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opsrun.errors import PatchError
from opsrun.protocol import PatchTolerance, _patch, apply_patch
from opsrun.protocol._patch_place import Hunk, Placer
from opsrun.protocol._patch_rules import RUNGS

LEVELS: tuple[PatchTolerance, ...] = ("exact", "whitespace", "loose")


class CountingPlacer(Placer):
    """A Placer that also counts the file lines its one-place checks compare."""

    made: list[CountingPlacer] = []  # noqa: RUF012 - test bookkeeping, reset per test

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.fit_lines = 0
        CountingPlacer.made.append(self)

    def _fits(self, pattern: list[str], part: Hunk, rung: object, pos: int) -> int | None:
        self.fit_lines += len(part.old)
        return super()._fits(pattern, part, rung, pos)  # type: ignore[arg-type]


@pytest.fixture
def counting(monkeypatch: pytest.MonkeyPatch) -> list[CountingPlacer]:
    CountingPlacer.made = []
    monkeypatch.setattr(_patch, "Placer", CountingPlacer)
    return CountingPlacer.made


def ambiguous(n: int) -> tuple[str, str]:
    """n copies of one line; a hunk of n/10 of them stated past the end: matches everywhere."""
    half = n // 20
    body = " x\n" * half + "-x\n+z\n" + " x\n" * half
    return "x\n" * n, f"@@ -{2 * n},{2 * half + 1} +1,{2 * half} @@\n{body}"


def out_of_phase(n: int) -> tuple[str, str]:
    """Alternating lines; a hunk whose middle breaks the rhythm: almost matches everywhere."""
    quarter = n // 40
    body = " a\n b\n" * quarter + "-a\n+z\n" + " a\n b\n" * quarter
    return "a\nb\n" * (n // 2), f"@@ -1,{4 * quarter + 1} +1,{4 * quarter} @@\n{body}"


def tabs_for_spaces(n: int) -> tuple[str, str]:
    """Indented with tabs, the hunk with spaces: only the whitespace rule's widths tell."""
    half = n // 20
    body = "     x\n" * half + "-    x\n+    z\n" + "     x\n" * half
    return "\tx\n" * n, f"@@ -{2 * n},{2 * half + 1} +1,{2 * half} @@\n{body}"


def reindented(n: int) -> tuple[str, str]:
    """A nested block quoted at another indentation: only the reindented rule matches it."""
    quarter = n // 40
    block = "   x\n       y\n" * quarter
    body = f"{block}-  x\n+  z\n       y\n{block}"
    return "\t\tx\n\t\t\ty\n" * (n // 2), (
        f"@@ -{2 * n},{4 * quarter + 2} +1,{4 * quarter + 2} @@\n{body}"
    )


CASES: dict[str, Callable[[int], tuple[str, str]]] = {
    "ambiguous": ambiguous,
    "out_of_phase": out_of_phase,
    "tabs_for_spaces": tabs_for_spaces,
    "reindented": reindented,
}


def work(counting: list[CountingPlacer], original: str, patch: str, level: PatchTolerance) -> int:
    counting.clear()
    with pytest.raises(PatchError, match=r"ambiguous|does not apply"):
        apply_patch(original, patch, tolerance=level)
    (placer,) = counting
    bound = 6 * len(RUNGS) * (original.count("\n") + patch.count("\n"))
    assert placer.fit_lines <= bound, "one-place checks compared the hunk at every line"
    assert placer.examined <= bound
    return placer.examined


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("level", LEVELS)
def test_placement_work_is_linear_in_the_file(
    counting: list[CountingPlacer], case: str, level: PatchTolerance
) -> None:
    small = work(counting, *CASES[case](4_000), level)
    large = work(counting, *CASES[case](16_000), level)
    assert large <= 4.5 * max(small, 1)


def test_the_sloppy_cases_are_found_by_their_rule() -> None:
    # The cases above exercise the rule they are named after, not an early refusal.
    original, patch = tabs_for_spaces(400)
    with pytest.raises(PatchError) as info:
        apply_patch(original, patch, tolerance="whitespace")
    assert (info.value.code, info.value.details["rule"]) == ("ERR_PATCH_AMBIGUOUS", "whitespace")
    original, patch = reindented(400)
    with pytest.raises(PatchError) as info:
        apply_patch(original, patch, tolerance="loose")
    assert (info.value.code, info.value.details["rule"]) == ("ERR_PATCH_AMBIGUOUS", "reindented")


# The linear search must find exactly the places a check at every line finds.

LINES = ["a", "\ta", "    a", "  a", "", "b", "\t\tb", "        b"]


@settings(max_examples=300)
@given(
    st.lists(st.sampled_from(LINES), min_size=1, max_size=40),
    st.lists(st.sampled_from(LINES), min_size=1, max_size=6),
    st.sampled_from(range(len(RUNGS))),
)
def test_the_linear_search_finds_what_checking_every_line_finds(
    lines: list[str], old: list[str], rung_at: int
) -> None:
    rung = RUNGS[rung_at]
    placer = Placer(lines, "loose", "")
    ops = tuple((" ", s, False) for s in old)
    hunk = Hunk(1, "@@", 1, old, ops, len(old), len(old))
    pattern = [rung.key(s) for s in old]
    allowed = range(1, len(lines) - len(old) + 2)
    every = [(pos, placer._fits(pattern, hunk, rung, pos)) for pos in allowed]
    expected = [(pos, tab) for pos, tab in every if tab is not None]
    if any(k not in placer.index(rung.key) for k in pattern):
        assert expected == []
        return
    assert placer._search(pattern, hunk, rung, allowed) == expected
