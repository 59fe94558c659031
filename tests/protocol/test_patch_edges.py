"""Patch engine edge cases: huge hunk numbers, end-of-file markers, explicit CRLF on added
lines, text after the last hunk, ``diff -N`` timestamps and git file-mode headers."""

from __future__ import annotations

import json
import shutil
import subprocess
from io import StringIO
from pathlib import Path

import pytest

from opsrun.errors import ApplyError, PatchError
from opsrun.protocol import (
    PatchTolerance,
    apply_patch,
    apply_plan,
    parse_plan,
    preview_plan,
    sha256_hex,
)

GNU_PATCH = shutil.which("patch")


def code_of(original: str, patch: str) -> str:
    with pytest.raises(PatchError) as info:
        apply_patch(original, patch)
    return info.value.code


def gnu(tmp: Path, original: str, patch: str) -> str | None:
    """GNU ``patch -F0`` on ``original``, or None when it refuses."""
    assert GNU_PATCH is not None
    (tmp / "f").write_bytes(original.encode())
    done = subprocess.run(
        [GNU_PATCH, "-F0", "-f", "-s", "--no-backup-if-mismatch", "-r", "-", "f"],
        input=patch.encode(),
        cwd=tmp,
        capture_output=True,
        timeout=20,
        check=False,
    )
    return (tmp / "f").read_bytes().decode() if done.returncode == 0 else None


needs_gnu = pytest.mark.skipif(GNU_PATCH is None, reason="GNU patch is not installed")


# --- 11: hunk numbers too large for int() -----------------------------------------------

HUGE = "1" * 5000


@pytest.mark.parametrize(
    "header",
    [
        f"@@ -{HUGE} +1 @@",
        f"@@ -1,{HUGE} +1 @@",
        f"@@ -1 +{HUGE} @@",
        f"@@ -1 +1,{HUGE} @@",
        "@@ -1 +1234567890123456789 @@",
    ],
)
def test_a_hunk_number_too_large_is_not_unified(header: str) -> None:
    with pytest.raises(PatchError) as info:
        apply_patch("a\n", f"{header}\n-a\n+b\n")
    assert info.value.code == "ERR_PATCH_NOT_UNIFIED"
    assert len(info.value.message) < 400
    assert len(str(info.value.details)) < 400


def test_eighteen_digit_numbers_still_parse() -> None:
    assert apply_patch("a\n", "@@ -123456789012345678 +1 @@\n-a\n+b\n") == "b\n"


def _plan(root: Path, patch: str) -> str:
    action = {
        "kind": "PATCH_FILE",
        "path": "m.py",
        "patch": patch,
        "base_sha256": sha256_hex((root / "m.py").read_bytes()),
    }
    return json.dumps({"actions": [action], "summary": "edit"})


def test_a_huge_hunk_number_is_not_unified_in_previews_plans_and_the_cli(
    tmp_path: Path,
) -> None:
    from opsrun.cli import main

    (tmp_path / "m.py").write_text("a\n")
    text = _plan(tmp_path, f"@@ -{HUGE} +1 @@\n-a\n+b\n")
    plan = parse_plan(text)
    with pytest.raises(PatchError) as info:
        preview_plan(plan, tmp_path)
    assert info.value.code == "ERR_PATCH_NOT_UNIFIED"
    with pytest.raises(ApplyError) as applied:
        apply_plan(plan, tmp_path)
    assert applied.value.code == "ERR_PATCH_NOT_UNIFIED"
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(text)
    out, err = StringIO(), StringIO()
    argv = ["plan", "apply", str(plan_file), "--root", str(tmp_path)]
    assert main(argv, stdout=out, stderr=err) == 1
    assert "ERR_PATCH_NOT_UNIFIED" in out.getvalue() + err.getvalue()
    assert "Traceback" not in out.getvalue() + err.getvalue()
    assert (tmp_path / "m.py").read_text() == "a\n"


# --- 13: an added line's explicit CRLF --------------------------------------------------


def test_an_added_lines_explicit_crlf_is_kept() -> None:
    assert apply_patch("", "@@ -0,0 +1 @@\n+\r\n") == "\r\n"
    assert apply_patch("a\n", "@@ -1 +1,2 @@\n a\n+x\r\n") == "a\nx\r\n"
    # A CRLF file: the line's own CR is not doubled.
    assert apply_patch("a\r\n", "@@ -1 +1,2 @@\n a\r\n+x\r\n") == "a\r\nx\r\n"


def test_a_crlf_transported_patch_still_takes_the_files_ending() -> None:
    # The hunk header ends in CR: every CR is the patch's line ending, not content.
    assert apply_patch("a\nb\n", "@@ -1,2 +1,3 @@\r\n a\r\n+x\r\n b\r\n") == "a\nx\nb\n"
    assert apply_patch("a\r\nb\r\n", "@@ -1,2 +1,3 @@\r\n a\r\n+x\r\n b\r\n") == "a\r\nx\r\nb\r\n"


@needs_gnu
@pytest.mark.parametrize(
    ("original", "patch"),
    [
        ("", "@@ -0,0 +1 @@\n+\r\n"),
        ("a\n", "@@ -1 +1,2 @@\n a\n+x\r\n"),
        ("a\r\n", "@@ -1 +1,2 @@\n a\r\n+x\r\n"),
        ("a\r\nb\r\n", "@@ -1,2 +1,2 @@\n a\r\n-b\r\n+c\r\n"),
    ],
)
def test_explicit_crlf_agrees_with_gnu_patch(tmp_path: Path, original: str, patch: str) -> None:
    assert apply_patch(original, patch) == gnu(tmp_path, original, patch)


# --- 12: "\ No newline at end of file" pins a hunk to the end ---------------------------

PINNED = [
    (
        "return\nreturn",
        "@@ -1 +1,2 @@\n-return\n\\ No newline at end of file\n+c\n+return\n",
        "return\nc\nreturn\n",
    ),
    (
        "a\na",
        "@@ -1 +1,2 @@\n-a\n\\ No newline at end of file\n+a\n+b\n\\ No newline at end of file\n",
        "a\na\nb",
    ),
    ("x\ny\nx\ny", "@@ -1,2 +1,2 @@\n x\n-y\n\\ No newline at end of file\n+z\n", "x\ny\nx\nz\n"),
]


@pytest.mark.parametrize(("original", "patch", "expected"), PINNED)
@pytest.mark.parametrize("level", ["exact", "whitespace", "loose"])
def test_a_line_without_newline_on_the_old_side_is_the_files_last(
    original: str, patch: str, expected: str, level: PatchTolerance
) -> None:
    assert apply_patch(original, patch, tolerance=level) == expected


@needs_gnu
@pytest.mark.parametrize(("original", "patch", "expected"), PINNED)
def test_the_end_of_file_marker_agrees_with_gnu_patch(
    tmp_path: Path, original: str, patch: str, expected: str
) -> None:
    assert gnu(tmp_path, original, patch) == expected


def test_a_marked_line_that_is_not_last_anywhere_fails() -> None:
    patch = "@@ -1 +1 @@\n-a\n\\ No newline at end of file\n+b\n"
    assert code_of("a\nz\n", patch) == "ERR_PATCH_APPLY_FAILED"


# --- 14: text after a finished hunk -----------------------------------------------------

MAIL = (
    "From 1234 Mon Sep 17 00:00:00 2001\nSubject: [PATCH] b to c\n\n---\n f | 2 +-\n\n"
    "diff --git a/f b/f\nindex 1..2 100644\n--- a/f\n+++ b/f\n"
    "@@ -1,2 +1,2 @@\n a\n-b\n+c\n-- \n2.39.0\n\n"
)
TRAILING_TEXT = [
    ("a\nb\n", "@@ -1,2 +1,2 @@\n a\n-b\n+c\n-- \n2.39.0\n", "a\nc\n"),
    ("a\nb\n", MAIL, "a\nc\n"),
    ("a\nb\n", "@@ -1,2 +1,2 @@\n a\n-b\n+B\n- fixed the bug\n\nThanks!\n", "a\nB\n"),
]


@pytest.mark.parametrize(("original", "patch", "expected"), TRAILING_TEXT)
def test_text_after_a_finished_hunk_is_not_read_as_diff_lines(
    original: str, patch: str, expected: str
) -> None:
    assert apply_patch(original, patch) == expected


@needs_gnu
@pytest.mark.parametrize(("original", "patch", "expected"), TRAILING_TEXT)
def test_text_after_a_finished_hunk_agrees_with_gnu_patch(
    tmp_path: Path, original: str, patch: str, expected: str
) -> None:
    assert gnu(tmp_path, original, patch) == expected


@pytest.mark.parametrize(
    ("original", "patch", "expected"),
    [
        # Counts too small, the body goes on to the end: recounted.
        ("a\nb\nc\nd\n", "@@ -1,2 +1,2 @@\n a\n-b\n+B\n c\n-d\n+D\n", "a\nB\nc\nD\n"),
        ("a\nb\nc\n", "@@ -1,2 +1,1 @@\n a\n-b\n-c\n", "a\n"),
        # Lines that add something are never dropped, whatever follows them.
        ("a\nb\nc\nd\n", "@@ -1,2 +1,2 @@\n a\n-b\n+B\n c\n-d\n+D\nDone.\n", "a\nB\nc\nD\n"),
        # The counts are met before anything changes: recounted.
        ("a\nb\nc\n", "@@ -1,1 +1,1 @@\n a\n-b\n+B\n c\nDone.\n", "a\nB\nc\n"),
    ],
)
def test_a_hunk_longer_than_its_counts_is_still_recounted(
    original: str, patch: str, expected: str
) -> None:
    assert apply_patch(original, patch) == expected


# --- 15: diff -N timestamps and git file-mode headers -----------------------------------

EPOCH = "1970-01-01 00:00:00.000000000 +0000"
LATER = "2024-05-01 12:00:00.000000000 +0200"


@pytest.mark.parametrize(
    "stamp",
    [
        EPOCH,
        "1970-01-01 00:00:00",
        "1969-12-31 19:00:00.000000000 -0500",
        "1970-01-01 01:00:00 +0100",
    ],
)
def test_an_epoch_dated_old_side_creates_the_file(stamp: str) -> None:
    patch = f"--- f\t{stamp}\n+++ f\t{LATER}\n@@ -0,0 +1 @@\n+x\n"
    assert apply_patch("", patch, path="f") == "x\n"
    with pytest.raises(PatchError) as info:
        apply_patch("a\n", patch, path="f")
    assert info.value.code == "ERR_PATCH_APPLY_FAILED"
    assert "creates the file" in info.value.message


def test_an_epoch_dated_new_side_deletes_the_file() -> None:
    patch = f"--- f\t{LATER}\n+++ f\t{EPOCH}\n@@ -1,2 +0,0 @@\n-a\n-b\n"
    assert apply_patch("a\nb\n", patch, path="f") == ""
    partial = f"--- f\t{LATER}\n+++ f\t{EPOCH}\n@@ -1 +0,0 @@\n-a\n"
    assert code_of("a\nb\n", partial) == "ERR_PATCH_APPLY_FAILED"


def test_other_dates_are_ordinary_files() -> None:
    patch = f"--- f\t1970-01-01 00:00:01 +0000\n+++ f\t{LATER}\n@@ -1 +1 @@\n-a\n+b\n"
    assert apply_patch("a\n", patch, path="f") == "b\n"


@needs_gnu
def test_an_epoch_dated_creation_on_a_file_with_content_fails_like_gnu(tmp_path: Path) -> None:
    patch = f"--- f\t{EPOCH}\n+++ f\t{LATER}\n@@ -0,0 +1 @@\n+x\n"
    assert gnu(tmp_path, "a\n", patch) is None
    assert gnu(tmp_path, "", patch) == "x\n"


GIT_NEW = "diff --git a/f b/f\nnew file mode 100644\nindex 0000000..587be6b\n--- a/f\n+++ b/f\n"
GIT_GONE = (
    "diff --git a/f b/f\ndeleted file mode 100644\nindex 587be6b..0000000\n--- a/f\n+++ b/f\n"
)


def test_git_new_and_deleted_file_mode_headers_create_and_delete() -> None:
    assert apply_patch("", GIT_NEW + "@@ -0,0 +1 @@\n+x\n", path="f") == "x\n"
    assert code_of("a\n", GIT_NEW + "@@ -0,0 +1 @@\n+x\n") == "ERR_PATCH_APPLY_FAILED"
    assert apply_patch("x\n", GIT_GONE + "@@ -1 +0,0 @@\n-x\n", path="f") == ""
    assert code_of("x\ny\n", GIT_GONE + "@@ -1 +0,0 @@\n-x\n") == "ERR_PATCH_APPLY_FAILED"


@pytest.mark.parametrize(
    "header",
    ["new file mode 100755", "deleted file mode 100755", "old mode 100644", "new mode 100755"],
)
def test_other_mode_headers_are_refused(header: str) -> None:
    patch = f"diff --git a/f b/f\n{header}\n--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n"
    assert code_of("a\n", patch) == "ERR_PATCH_NOT_UNIFIED"
