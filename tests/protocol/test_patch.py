"""Unified-diff application: placement, line endings, headers, refusals, ranges, hashes."""

from __future__ import annotations

import hashlib

import pytest

from opsrun.errors import PatchError
from opsrun.protocol import (
    apply_patch,
    check_base_sha256,
    replace_range,
    sha256_hex,
)


def numbered(n: int, start: int = 1) -> str:
    return "".join(f"line {i}\n" for i in range(start, start + n))


def code_of(original: str | bytes, patch: str, path: str | None = None) -> str:
    with pytest.raises(PatchError) as info:
        apply_patch(original, patch, path=path)
    return info.value.code


# --- placement --------------------------------------------------------------------------


def test_hunk_applies_at_its_stated_line() -> None:
    patch = "@@ -4,3 +4,3 @@\n line 4\n-line 5\n+five\n line 6\n"
    assert apply_patch(numbered(8), patch) == numbered(4) + "five\n" + numbered(3, 6)


def test_hunk_moves_to_the_nearest_matching_line() -> None:
    shifted = "new a\nnew b\n" + numbered(8)
    patch = "@@ -4,3 +4,3 @@\n line 4\n-line 5\n+five\n line 6\n"
    assert apply_patch(shifted, patch) == "new a\nnew b\n" + numbered(4) + "five\n" + numbered(3, 6)


def test_offset_of_earlier_hunk_carries_to_later_hunks() -> None:
    original = "x\n" * 3 + numbered(20)
    patch = (
        "@@ -2,3 +2,3 @@\n line 2\n-line 3\n+three\n line 4\n"
        "@@ -15,3 +15,3 @@\n line 15\n-line 16\n+sixteen\n line 17\n"
    )
    result = apply_patch(original, patch)
    assert "three\n" in result
    assert "sixteen\n" in result
    assert "line 3\n" not in result
    assert "line 16\n" not in result


def test_two_candidates_away_from_the_stated_line_are_refused() -> None:
    # "k" appears at lines 2 and 6; GNU would take the nearest (ties: the later one).
    original = "a\nk\nb\nc\nd\nk\ne\n"
    for stated in (3, 4):
        with pytest.raises(PatchError) as info:
            apply_patch(original, f"@@ -{stated} +{stated} @@\n-k\n+K\n")
        assert info.value.code == "ERR_PATCH_AMBIGUOUS"
        assert info.value.details["candidates"] == [2, 6]
    # At its stated line the hunk applies, whatever else matches.
    assert apply_patch(original, "@@ -6 +6 @@\n-k\n+K\n") == "a\nk\nb\nc\nd\nK\ne\n"


def test_later_hunk_never_matches_before_the_previous_one() -> None:
    # "k" at line 1 is nearer to the stated line 3 than line 6, but lies before hunk #1.
    original = "k\nx\nb\nc\nd\nk\n"
    patch = "@@ -2 +2 @@\n-x\n+X\n@@ -3 +3 @@\n-k\n+K\n"
    assert apply_patch(original, patch) == "k\nX\nb\nc\nd\nK\n"


def test_misordered_hunks_fail_like_gnu_patch() -> None:
    assert code_of("k\nx\ny\nk\n", "@@ -2 +2 @@\n-x\n+X\n@@ -1 +1 @@\n-k\n+K\n") == (
        "ERR_PATCH_APPLY_FAILED"
    )


def test_hunk_with_short_leading_context_must_sit_at_the_start() -> None:
    patch = "@@ -1,3 +1,3 @@\n-line 1\n+one\n line 2\n line 3\n"
    assert apply_patch(numbered(5), patch) == "one\n" + numbered(4, 2)
    assert code_of("zero\n" + numbered(5), patch) == "ERR_PATCH_APPLY_FAILED"


def test_hunk_with_short_trailing_context_must_sit_at_the_end() -> None:
    patch = "@@ -3,3 +3,3 @@\n line 3\n line 4\n-line 5\n+five\n"
    assert apply_patch(numbered(5), patch) == numbered(4) + "five\n"
    assert code_of(numbered(5) + "tail\n", patch) == "ERR_PATCH_APPLY_FAILED"


def test_mismatch_names_the_hunk_and_shows_expected_and_actual() -> None:
    patch = "@@ -1,3 +1,3 @@\n line 1\n-line 2\n+two\n line 3\n"
    patch += "@@ -5,3 +5,3 @@\n line 5\n-line 6!\n+six\n line 7\n"
    with pytest.raises(PatchError) as info:
        apply_patch(numbered(9), patch, path="f.txt")
    err = info.value
    assert err.code == "ERR_PATCH_APPLY_FAILED"
    assert err.details["hunk"] == 2
    assert err.details["expected"] == "line 6!"
    assert err.details["actual"] == "line 6"
    assert err.details["line"] == 6
    assert "hunk #2" in err.message
    assert "'line 6!'" in err.message
    assert "f.txt" in err.message


def test_pure_addition_and_pure_deletion() -> None:
    assert apply_patch("a\nb\n", "@@ -1,0 +2,2 @@\n+x\n+y\n") == "a\nx\ny\nb\n"
    assert apply_patch("a\nb\nc\n", "@@ -2 +1,0 @@\n-b\n") == "a\nc\n"
    assert apply_patch("", "--- /dev/null\n+++ b/n.txt\n@@ -0,0 +1,2 @@\n+x\n+y\n") == "x\ny\n"
    assert apply_patch("a\nb\n", "--- a/n.txt\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-a\n-b\n") == ""


def test_dev_null_headers_check_the_file() -> None:
    assert code_of("a\n", "--- /dev/null\n+++ b/n\n@@ -0,0 +1 @@\n+x\n") == (
        "ERR_PATCH_APPLY_FAILED"
    )
    assert code_of("a\nb\nc\n", "--- a/n\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-a\n-b\n") == (
        "ERR_PATCH_APPLY_FAILED"
    )


def test_omitted_counts_mean_one_line() -> None:
    assert apply_patch("a\nb\nc\n", "@@ -2 +2 @@\n-b\n+B\n") == "a\nB\nc\n"


def test_never_partially_patched() -> None:
    original = numbered(10)
    patch = "@@ -2 +2 @@\n-line 2\n+two\n@@ -8 +8 @@\n-nope\n+eight\n"
    assert code_of(original, patch) == "ERR_PATCH_APPLY_FAILED"


# --- line endings -----------------------------------------------------------------------


def test_crlf_file_keeps_crlf_and_matches_lf_patch() -> None:
    original = "a\r\nb\r\nc\r\n"
    assert (
        apply_patch(original, "@@ -1,3 +1,4 @@\n a\n-b\n+B\n+B2\n c\n") == "a\r\nB\r\nB2\r\nc\r\n"
    )


def test_crlf_patch_on_lf_file() -> None:
    original = "a\nb\nc\n"
    assert apply_patch(original, "@@ -1,3 +1,3 @@\r\n a\r\n-b\r\n+B\r\n c\r\n") == "a\nB\nc\n"


def test_no_newline_marker_on_the_old_side_adds_the_newline() -> None:
    patch = "@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+b\n"
    assert apply_patch("a\nb", patch) == "a\nb\n"


def test_no_newline_marker_on_the_new_side_drops_the_newline() -> None:
    patch = "@@ -1,2 +1,2 @@\n a\n-b\n+c\n\\ No newline at end of file\n"
    assert apply_patch("a\nb\n", patch) == "a\nc"


def test_no_newline_on_both_sides() -> None:
    patch = "@@ -1,2 +1,2 @@\n-a\n+A\n b\n\\ No newline at end of file\n"
    assert apply_patch("a\nb", patch) == "A\nb"


def test_file_without_final_newline_keeps_that_when_untouched_at_end() -> None:
    assert apply_patch("a\nb\nc", "@@ -1 +1 @@\n-a\n+A\n") == "A\nb\nc"
    assert apply_patch("a\nb", "@@ -1,2 +1,3 @@\n a\n b\n+c\n") == "a\nb\nc\n"


def test_crlf_file_without_final_newline_gets_crlf_between_lines() -> None:
    assert apply_patch("a\r\nb", "@@ -2 +2,2 @@\n b\n+c\n") == "a\r\nb\r\nc\r\n"


# --- headers and normalisation ----------------------------------------------------------


def test_git_prefixes_and_path_check() -> None:
    patch = "diff --git a/src/m.py b/src/m.py\nindex 83db48f..bf269f4 100644\n"
    patch += "--- a/src/m.py\n+++ b/src/m.py\n@@ -1 +1 @@\n-a\n+b\n"
    assert apply_patch("a\n", patch, path="src/m.py") == "b\n"
    assert code_of("a\n", patch, path="src/other.py") == "ERR_PATCH_NOT_UNIFIED"


def test_headers_without_prefix_and_with_timestamps() -> None:
    patch = "--- m.py\t2024-01-01 00:00:00\n+++ m.py\t2024-01-02 00:00:00\n@@ -1 +1 @@\n-a\n+b\n"
    assert apply_patch("a\n", patch, path="m.py") == "b\n"


def test_several_files_are_refused() -> None:
    patch = "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n--- a/y\n+++ b/y\n@@ -1 +1 @@\n-a\n+b\n"
    assert code_of("a\n", patch) == "ERR_PATCH_NOT_UNIFIED"


def test_counts_that_disagree_with_the_body_are_recounted() -> None:
    original = "".join(f"l{i}\n" for i in range(1, 60))
    patch = "--- a/p.py\n+++ b/p.py\n@@ -41,6 +41,10 @@ def parse(value):\n-l41\n+A\n+B\n+l41\n"
    assert apply_patch(original, patch) == original.replace("l41\n", "A\nB\nl41\n")
    too_small = "@@ -1,1 +1,1 @@\n a\n-b\n+B\n c\n"
    assert apply_patch("a\nb\nc\n", too_small) == "a\nB\nc\n"


def test_trailing_blank_lines_after_a_consistent_hunk_are_ignored() -> None:
    assert apply_patch("a\nb\n", "@@ -1,2 +1,2 @@\n a\n-b\n+B\n\n\n") == "a\nB\n"


def test_blank_context_line_without_its_space() -> None:
    assert apply_patch("a\n\nb\n", "@@ -1,3 +1,3 @@\n a\n\n-b\n+B\n") == "a\n\nB\n"


def test_prose_around_the_diff_is_ignored() -> None:
    patch = "Here is the fix:\n--- a/m\n+++ b/m\n@@ -1 +1 @@\n-a\n+b\nThat's all.\n"
    assert apply_patch("a\n", patch) == "b\n"


@pytest.mark.parametrize(
    "patch",
    [
        "",
        "just some prose\nwith no hunks\n",
        "@@ ... @@\n-a\n+b\n",
        "@@ -1 +1 @@\n a\n",
        "1c1\n< a\n---\n> b\n",
        "1,2d\n.\nw\n",
        "*** a/m\n--- b/m\n***************\n*** 1 ****\n! a\n--- 1 ----\n! b\n",
        "diff --git a/m b/m\nindex 1..2 100644\nGIT binary patch\nliteral 3\nabc\n",
        "Binary files a/m and b/m differ\n",
        "diff --git a/m b/n\nsimilarity index 90%\nrename from m\nrename to n\n",
        "diff --git a/m b/m\nold mode 100644\nnew mode 100755\n",
        "diff --git a/l b/l\nnew file mode 120000\n--- /dev/null\n+++ b/l\n@@ -0,0 +1 @@\n+t\n",
    ],
)
def test_not_unified(patch: str) -> None:
    assert code_of("a\n", patch) == "ERR_PATCH_NOT_UNIFIED"


def test_non_utf8_bytes_are_refused() -> None:
    assert code_of(b"caf\xe9\n", "@@ -1 +1 @@\n-a\n+b\n") == "ERR_NON_UTF8_FILE"
    assert apply_patch("café\n".encode(), "@@ -1 +1 @@\n-café\n+cafe\n") == "cafe\n"


def test_one_megabyte_file_with_one_hunk() -> None:
    original = "".join(f"row {i:07d} {'x' * 30}\n" for i in range(25_000))
    target = f"row {12_345:07d} {'x' * 30}"
    patch = f"@@ -12346 +12346 @@\n-{target}\n+changed\n"
    result = apply_patch(original, patch)
    assert result == original.replace(target + "\n", "changed\n")


# --- REPLACE_RANGE and hashes -----------------------------------------------------------


def test_replace_range() -> None:
    assert replace_range("a\nb\nc\n", 2, 2, "B1\nB2\n") == "a\nB1\nB2\nc\n"
    assert replace_range("a\nb\nc\n", 2, 3, "X") == "a\nX\n"
    assert replace_range("a\nb\nc\n", 1, 3, "") == ""
    assert replace_range("a\r\nb\r\n", 1, 1, "A\n") == "A\r\nb\r\n"
    assert replace_range("a\nb", 2, 2, "B\n") == "a\nB"


def test_replace_range_keeps_a_byte_order_mark_in_front_of_the_first_line() -> None:
    bom = b"\xef\xbb\xbfimport os\r\nx = 1\r\n"
    assert replace_range(bom, 1, 1, "import sys\n") == "\ufeffimport sys\r\nx = 1\r\n"
    assert replace_range(bom, 1, 1, "\ufeffimport sys\n") == "\ufeffimport sys\r\nx = 1\r\n"
    assert replace_range(bom, 2, 2, "x = 2\n") == "\ufeffimport os\r\nx = 2\r\n"
    assert replace_range(bom, 1, 2, "") == ""
    with pytest.raises(PatchError) as info:
        replace_range(bom, 3, 3, "x")
    assert info.value.details["lines"] == 2


@pytest.mark.parametrize(("start", "end"), [(0, 1), (2, 1), (1, 4), (-1, 2)])
def test_replace_range_invalid(start: int, end: int) -> None:
    with pytest.raises(PatchError) as info:
        replace_range("a\nb\nc\n", start, end, "x")
    assert info.value.code == "ERR_RANGE_INVALID"


def test_sha256_hex_and_base_check() -> None:
    assert sha256_hex("é") == hashlib.sha256("é".encode()).hexdigest()
    assert sha256_hex(b"x") == hashlib.sha256(b"x").hexdigest()
    check_base_sha256(b"x", sha256_hex(b"x"))
    check_base_sha256(b"x", sha256_hex(b"x").upper())
    check_base_sha256(b"x", None)
    with pytest.raises(PatchError) as info:
        check_base_sha256(b"y", sha256_hex(b"x"), path="f")
    assert info.value.code == "ERR_BASE_MISMATCH"
    with pytest.raises(PatchError) as info:
        check_base_sha256(b"y", "abc")
    assert info.value.code == "ERR_BASE_SHA256_INVALID"
