"""Tolerant patching: what each level accepts, the ambiguity rule, and what a file keeps."""

from __future__ import annotations

import difflib
import json
from io import StringIO
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from opsrun.errors import ConfigError, PatchError
from opsrun.protocol import (
    DriverConfig,
    PatchTolerance,
    apply_patch,
    apply_patch_detailed,
    apply_plan,
    parse_plan,
    preview_plan,
    sha256_hex,
)

LEVELS: tuple[PatchTolerance, ...] = ("exact", "whitespace", "loose")
BODY = "def f(x):\n    a = 1\n    b = 2\n    return a + b\n"
FILE = "import os\n\n\n" + BODY + "\n\ndef g():\n    return 'g - \"q\"'\n"


def code_of(original: str, patch: str, tolerance: PatchTolerance) -> str:
    with pytest.raises(PatchError) as info:
        apply_patch(original, patch, tolerance=tolerance)
    return info.value.code


# (name, original, patch, least level that accepts it, expected result)
ACCEPTED: list[tuple[str, str, str, PatchTolerance, str]] = [
    (
        "exact at the stated line",
        FILE,
        "@@ -4,3 +4,3 @@\n def f(x):\n-    a = 1\n+    a = 10\n     b = 2\n",
        "exact",
        FILE.replace("a = 1\n", "a = 10\n"),
    ),
    (
        "wrong line number, unique context",
        FILE,
        "@@ -40,3 +40,3 @@\n def f(x):\n-    a = 1\n+    a = 10\n     b = 2\n",
        "exact",
        FILE.replace("a = 1\n", "a = 10\n"),
    ),
    (
        "trailing whitespace in the patch",
        FILE,
        "@@ -4,3 +4,3 @@\n def f(x):  \n-    a = 1\t\n+    a = 10\n     b = 2\n",
        "whitespace",
        FILE.replace("a = 1\n", "a = 10\n"),
    ),
    (
        "trailing whitespace in the file",
        FILE.replace("def f(x):\n", "def f(x):   \n"),
        "@@ -4,3 +4,3 @@\n def f(x):\n-    a = 1\n+    a = 10\n     b = 2\n",
        "whitespace",
        FILE.replace("def f(x):\n", "def f(x):   \n").replace("a = 1\n", "a = 10\n"),
    ),
    (
        "spaces in the patch, tabs in the file",
        FILE.replace("    ", "\t"),
        "@@ -4,3 +4,4 @@\n def f(x):\n-    a = 1\n+    a = 10\n"
        "+    if x:\n+        a = 0\n     b = 2\n",
        "whitespace",
        FILE.replace("    ", "\t").replace("\ta = 1\n", "\ta = 10\n\tif x:\n\t\ta = 0\n"),
    ),
    (
        "a dedented block",
        FILE.replace("\n    ", "\n        "),
        "@@ -5,3 +5,3 @@\n     a = 1\n-    b = 2\n+    b = 20\n     return a + b\n",
        "loose",
        FILE.replace("\n    ", "\n        ").replace("b = 2\n", "b = 20\n"),
    ),
    (
        "a block quoted at column 0",
        FILE,
        "@@ -5,3 +5,4 @@\n a = 1\n-b = 2\n+b = 3\n+if x:\n+    b = 4\n return a + b\n",
        "loose",
        FILE.replace("    b = 2\n", "    b = 3\n    if x:\n        b = 4\n"),
    ),
    (
        "typographic quotes and dashes",
        FILE,
        "@@ -10,2 +10,2 @@\n def g():\n"
        "-    return \u2018g \u2013 \u201cq\u201d\u2019\n+    return 'g'\n",
        "loose",
        FILE.replace("return 'g - \"q\"'", "return 'g'"),
    ),
    (
        "a non-breaking space",
        FILE,
        "@@ -5 +5 @@\n-    a\u00a0= 1\n+    a = 10\n",
        "loose",
        FILE.replace("a = 1\n", "a = 10\n"),
    ),
    (
        "no line numbers",
        FILE,
        "@@ @@\n def f(x):\n-    a = 1\n+    a = 10\n",
        "loose",
        FILE.replace("a = 1\n", "a = 10\n"),
    ),
    (
        "a section heading instead of numbers",
        FILE,
        "@@ ... @@ def f(x):\n     b = 2\n-    return a + b\n+    return a - b\n",
        "loose",
        FILE.replace("a + b", "a - b"),
    ),
    (
        "an invented context line at the edge",
        FILE,
        "@@ -4,4 +4,4 @@\n # helpers\n def f(x):\n-    a = 1\n+    a = 10\n     b = 2\n",
        "loose",
        FILE.replace("a = 1\n", "a = 10\n"),
    ),
    (
        "a context line missing at the edge",
        FILE,
        "@@ -4,3 +4,3 @@\n def f(x):\n-    b = 2\n+    b = 20\n     return a + b\n",
        "loose",
        FILE.replace("b = 2\n", "b = 20\n"),
    ),
    (
        "less trailing than leading context in mid-file",
        FILE,
        "@@ -4,3 +4,3 @@\n def f(x):\n     a = 1\n-    b = 2\n+    b = 20\n",
        "loose",
        FILE.replace("b = 2\n", "b = 20\n"),
    ),
]


@pytest.mark.parametrize(
    ("original", "patch", "least", "expected"),
    [case[1:] for case in ACCEPTED],
    ids=[case[0] for case in ACCEPTED],
)
def test_each_level_accepts_its_sloppiness(
    original: str, patch: str, least: PatchTolerance, expected: str
) -> None:
    for level in LEVELS:
        if LEVELS.index(level) >= LEVELS.index(least):
            result = apply_patch_detailed(original, patch, tolerance=level)
            assert result.text == expected
            assert {h.level for h in result.hunks} == {least}
        else:
            assert code_of(original, patch, level) in (
                "ERR_PATCH_APPLY_FAILED",
                "ERR_PATCH_NOT_UNIFIED",
            )


def test_placements_report_offset_level_and_rule() -> None:
    result = apply_patch_detailed(
        "x\nx\n" + FILE,
        "@@ -4,3 +4,3 @@\n def f(x):  \n-    a = 1\n+    a = 10\n     b = 2\n",
        tolerance="whitespace",
    )
    (hunk,) = result.hunks
    assert (hunk.stated_line, hunk.line, hunk.offset) == (4, 6, 2)
    assert (hunk.level, hunk.rule) == ("whitespace", "trailing_whitespace")
    assert result.relocated == (hunk,)
    exact = apply_patch_detailed(FILE, "@@ -5 +5 @@\n-    a = 1\n+    a = 10\n")
    assert exact.relocated == ()
    assert exact.hunks[0].model_dump()["rule"] == "exact"


# --- the ambiguity rule -----------------------------------------------------------------

TWICE = BODY + "\n" + BODY.replace("def f", "def h") + "\n" + BODY.replace("def f", "def k")


@pytest.mark.parametrize("level", LEVELS)
def test_a_hunk_matching_in_several_places_is_refused_with_its_candidates(
    level: PatchTolerance,
) -> None:
    patch = "@@ -30,3 +30,3 @@\n     a = 1\n-    b = 2\n+    b = 20\n     return a + b\n"
    with pytest.raises(PatchError) as info:
        apply_patch(TWICE, patch, tolerance=level)
    assert info.value.code == "ERR_PATCH_AMBIGUOUS"
    assert info.value.details["candidates"] == [2, 7, 12]
    assert info.value.details["stated_line"] == 30
    assert "2, 7, 12" in info.value.message


@pytest.mark.parametrize("level", LEVELS)
def test_the_stated_line_decides_between_copies(level: PatchTolerance) -> None:
    patch = "@@ -7,3 +7,3 @@\n     a = 1\n-    b = 2\n+    b = 20\n     return a + b\n"
    result = apply_patch(TWICE, patch, tolerance=level)
    lines = result.splitlines()
    assert [i + 1 for i, s in enumerate(lines) if s == "    b = 20"] == [8]


def test_sloppy_copies_are_ambiguous_too() -> None:
    sloppy = "@@ -30,3 +30,3 @@\n     a = 1  \n-    b = 2\n+    b = 20\n     return a + b\n"
    with pytest.raises(PatchError) as info:
        apply_patch(TWICE, sloppy, tolerance="whitespace")
    assert info.value.details["rule"] == "trailing_whitespace"
    unnumbered = "@@ @@\n     a = 1\n-    b = 2\n+    b = 20\n"
    with pytest.raises(PatchError) as info:
        apply_patch(TWICE, unnumbered, tolerance="loose")
    assert info.value.code == "ERR_PATCH_AMBIGUOUS"
    assert info.value.details["stated_line"] is None


def test_a_unique_exact_match_beats_a_loose_one_at_the_stated_line() -> None:
    original = "a = 1  \nb = 2\nc = 3\n" + "x\n" * 5 + "a = 1\nb = 2\nc = 3\n"
    patch = "@@ -1,3 +1,3 @@\n a = 1\n-b = 2\n+b = 20\n c = 3\n"
    result = apply_patch_detailed(original, patch, tolerance="loose")
    assert (result.hunks[0].line, result.hunks[0].rule) == (9, "exact")


def test_a_hunk_matching_nowhere_names_the_closest_region() -> None:
    patch = "@@ -4,3 +4,3 @@\n def f(x):\n-    a = 2\n+    a = 10\n     b = 2\n"
    with pytest.raises(PatchError) as info:
        apply_patch(FILE, patch, tolerance="loose")
    err = info.value
    assert err.code == "ERR_PATCH_APPLY_FAILED"
    assert "the closest region is lines 4-6 (2 of 3" in err.message
    assert "did you mean line 5 '    a = 1' where the patch has '    a = 2'" in err.message
    closest = err.details["closest"]
    assert closest["line"] == 4
    assert closest["differences"] == [{"line": 5, "expected": "    a = 2", "actual": "    a = 1"}]


def test_unknown_tolerance_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        apply_patch(FILE, "@@ -1 +1 @@\n-a\n+b\n", tolerance="fuzzy")  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        DriverConfig(patch_tolerance="fuzzy")  # type: ignore[arg-type]


# --- what the file keeps ------------------------------------------------------------------


@pytest.mark.parametrize("level", LEVELS)
def test_line_endings_bom_and_final_newline_are_kept(level: PatchTolerance) -> None:
    patch = "@@ -1,3 +1,4 @@\n def f(x):  \n-    a = 1\n+    a = 10\n+    c = 3\n     b = 2\n"
    if level == "exact":
        patch = patch.replace("  \n", "\n", 1)
    crlf = "\ufeff" + BODY.replace("\n", "\r\n")[:-2]
    result = apply_patch(crlf, patch, tolerance=level)
    assert (
        result
        == "\ufeff" + (BODY.replace("a = 1\n", "a = 10\n    c = 3\n").replace("\n", "\r\n")[:-2])
    )


def test_tab_file_gets_tabs_from_a_spaces_patch_with_crlf() -> None:
    original = "if x:\r\n\tif y:\r\n\t\tz()\r\n"
    patch = "@@ -1,3 +1,4 @@\n if x:\n     if y:\n-        z()\n+        z(1)\n+        w()\n"
    assert apply_patch(original, patch, tolerance="whitespace") == (
        "if x:\r\n\tif y:\r\n\t\tz(1)\r\n\t\tw()\r\n"
    )


# --- plans, the CLI -----------------------------------------------------------------------


def _plan(root: Path, patch: str) -> str:
    data = (root / "m.py").read_bytes()
    action = {"kind": "PATCH_FILE", "path": "m.py", "patch": patch, "base_sha256": sha256_hex(data)}
    return json.dumps({"actions": [action], "summary": "edit"})


SLOPPY = "@@ -4,3 +4,3 @@\n def f(x):  \n-    a = 1\n+    a = 10\n     b = 2\n"


def test_plans_take_the_tolerance(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("x\n" + FILE)
    plan = parse_plan(_plan(tmp_path, SLOPPY))
    with pytest.raises(PatchError) as info:
        preview_plan(plan, tmp_path)
    assert info.value.code == "ERR_PATCH_APPLY_FAILED"
    (item,) = preview_plan(plan, tmp_path, tolerance="whitespace")
    assert [(h.offset, h.level) for h in item.relocated] == [(1, "whitespace")]
    apply_plan(plan, tmp_path, tolerance="whitespace")
    assert (tmp_path / "m.py").read_text() == "x\n" + FILE.replace("a = 1\n", "a = 10\n")


def test_plan_apply_cli_takes_tolerance(tmp_path: Path) -> None:
    from opsrun.cli import main

    (tmp_path / "m.py").write_text(FILE)
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(_plan(tmp_path, SLOPPY))
    argv = ["plan", "apply", str(plan_file), "--root", str(tmp_path)]
    assert main([*argv, "--tolerance", "loose"], stdout=StringIO()) == 0
    assert "a = 10" in (tmp_path / "m.py").read_text()


# --- properties ---------------------------------------------------------------------------

ALPHABET = ["a = 1", "    a = 1", "b = 'x'", "\tb = 'x'", "", "c  -  d", "return", "    return"]


@st.composite
def edited(draw: st.DrawFn) -> tuple[list[str], list[str]]:
    old = draw(st.lists(st.sampled_from(ALPHABET), min_size=1, max_size=25))
    new = list(old)
    for n in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(new)))
        new[at:at] = [f"new {n}"]
        if draw(st.booleans()) and at + 1 < len(new):
            del new[at + 1]
    return [s + "\n" for s in old], [s + "\n" for s in new]


def _diff(old: list[str], new: list[str], context: int) -> str:
    return "".join(difflib.unified_diff(old, new, "a/f", "b/f", n=context))


PROPS = settings(suppress_health_check=[HealthCheck.too_slow], max_examples=150)


@PROPS
@given(edited(), st.integers(1, 3), st.sampled_from(LEVELS))
def test_a_correct_diff_applies_at_its_stated_lines_at_every_level(
    pair: tuple[list[str], list[str]], context: int, level: PatchTolerance
) -> None:
    old, new = pair
    assume(old != new)
    result = apply_patch_detailed("".join(old), _diff(old, new, context), tolerance=level)
    assert result.text == "".join(new)
    assert all(h.offset == 0 and h.rule == "exact" for h in result.hunks)


def _norm(level: PatchTolerance, line: str) -> str:
    if level == "exact":
        return line
    if level == "whitespace":
        return line.strip()
    table = {0x2013: "-", 0x2014: "-", 0x2018: "'", 0x2019: "'", 0xA0: " "}
    return " ".join(line.translate(table).split())


def _hunks(patch: str) -> list[list[str]]:
    hunks: list[list[str]] = []
    for line in patch.splitlines():
        if line.startswith("@@"):
            hunks.append([])
        elif hunks and line[:1] in (" ", "-"):
            hunks[-1].append(line[1:])
    return hunks


def _spoil(data: st.DataObject, patch: str) -> str:
    out = []
    for line in patch.splitlines(keepends=True):
        if line.startswith("@@") and data.draw(st.booleans()):
            line = "@@ -" + str(data.draw(st.integers(1, 30))) + " +1 @@\n"
        elif line[:1] in (" ", "-") and not line.startswith("---"):
            spoil = data.draw(st.sampled_from(["", "trailing", "dash", "quote", "indent"]))
            text = line[1:-1]
            if spoil == "trailing":
                text += "  "
            elif spoil == "dash":
                text = text.replace("-", "\u2013")
            elif spoil == "quote":
                text = text.replace("'", "\u2019")
            elif spoil == "indent":
                text = "  " + text
            line = line[0] + text + "\n"
        out.append(line)
    return "".join(out)


@PROPS
@given(edited(), st.integers(0, 3), st.sampled_from(LEVELS), st.data())
def test_no_level_applies_a_hunk_where_its_context_does_not_match(
    pair: tuple[list[str], list[str]], context: int, level: PatchTolerance, data: st.DataObject
) -> None:
    old, new = pair
    assume(old != new)
    patch = _spoil(data, _diff(old, new, context))
    original = old if data.draw(st.booleans()) else [*old[:3], "moved\n", *old[3:]]
    try:
        result = apply_patch_detailed("".join(original), patch, tolerance=level)
    except PatchError as exc:
        code, candidates = exc.code, exc.details.get("candidates", [None, None])
        assert code in ("ERR_PATCH_APPLY_FAILED", "ERR_PATCH_AMBIGUOUS")
        assert len(candidates) >= 2
        return
    lines = [s[:-1] for s in original]
    for placement, pattern in zip(result.hunks, _hunks(patch), strict=True):
        assert LEVELS.index(placement.level) <= LEVELS.index(level)
        start = placement.line - 1
        variants = [(0, 0)]
        if placement.rule == "edge_context":
            variants = [(1, 0), (0, 1), (1, 1)]
        assert any(
            [_norm(level, s) for s in lines[start + a : start + len(pattern) - b]]
            == [_norm(level, s) for s in pattern[a : len(pattern) - b]]
            for a, b in variants
        ), (placement, pattern)


@settings(suppress_health_check=[HealthCheck.too_slow], max_examples=100)
@given(edited(), st.integers(1, 3), st.sampled_from(LEVELS))
def test_crlf_and_bom_are_kept_whatever_the_level(
    pair: tuple[list[str], list[str]], context: int, level: PatchTolerance
) -> None:
    old, new = pair
    assume(old != new)
    lf = apply_patch("".join(old), _diff(old, new, context), tolerance=level)
    crlf = apply_patch(
        "\ufeff" + "".join(old).replace("\n", "\r\n"), _diff(old, new, context), tolerance=level
    )
    assert crlf == "\ufeff" + lf.replace("\n", "\r\n") if lf else crlf == ""
