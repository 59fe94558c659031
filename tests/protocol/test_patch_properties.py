"""Properties of the patch engine, and agreement with GNU ``patch -F0`` on generated cases."""

from __future__ import annotations

import difflib
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from _support import examples
from opsrun.errors import PatchError
from opsrun.protocol import apply_patch, apply_patch_detailed

GNU_PATCH = shutil.which("patch")


def make_diff(old: list[str], new: list[str], context: int) -> str:
    """Return a unified diff of two line lists (each line with its ending, if any).

    ``difflib`` leaves a last line without newline unterminated; the standard
    ``\\ No newline at end of file`` marker is added after it.
    """
    out: list[str] = []
    for line in difflib.unified_diff(old, new, "a/f.txt", "b/f.txt", n=context):
        if line.endswith("\n"):
            out.append(line)
        else:
            out.append(line + "\n\\ No newline at end of file\n")
    return "".join(out)


@st.composite
def edits(draw: st.DrawFn, alphabet: list[str] | None = None) -> tuple[list[str], list[str]]:
    """Draw (old lines, new lines); lines carry ``\\n`` except maybe the last one."""
    if alphabet is None:
        size = draw(st.integers(0, 40))
        old = [f"line {i}" for i in range(size)]
    else:
        old = draw(st.lists(st.sampled_from(alphabet), max_size=30))
    new = list(old)
    fresh = iter(range(10_000))
    for _ in range(draw(st.integers(1, 6))):
        op = draw(st.sampled_from(["insert", "delete", "replace"]))
        at = draw(st.integers(0, len(new)))
        count = draw(st.integers(1, 3))
        added = [
            draw(st.sampled_from(alphabet)) if alphabet else f"new {next(fresh)}"
            for _ in range(count)
        ]
        if op == "insert":
            new[at:at] = added
        elif op == "delete":
            del new[at : at + count]
        else:
            new[at : at + count] = added
    old_nl = draw(st.booleans()) if alphabet is None else True
    new_nl = draw(st.booleans()) if alphabet is None else True

    def finish(lines: list[str], final_nl: bool) -> list[str]:
        done = [s + "\n" for s in lines]
        if done and not final_nl:
            done[-1] = done[-1][:-1]
        return done

    return finish(old, old_nl), finish(new, new_nl)


PROPS = settings(suppress_health_check=[HealthCheck.too_slow])


@PROPS
@given(edits(), st.integers(0, 3))
def test_difflib_diffs_apply_back_exactly(pair: tuple[list[str], list[str]], context: int) -> None:
    old, new = pair
    assume(old != new)
    assert apply_patch("".join(old), make_diff(old, new, context)) == "".join(new)


@PROPS
@given(edits(), st.integers(1, 3), st.integers(1, 5))
def test_diffs_follow_lines_inserted_above(
    pair: tuple[list[str], list[str]], context: int, shift: int
) -> None:
    old, new = pair
    assume(old != new)
    first_change = next(
        i for i, (a, b) in enumerate(zip([*old, None], [*new, None], strict=False)) if a != b
    )
    # A hunk with less leading context than trailing is pinned to the start of the file.
    assume(first_change >= context)
    junk = [f"junk {i}\n" for i in range(shift)]
    result = apply_patch("".join(junk + old), make_diff(old, new, context))
    assert result == "".join(junk + new)


@PROPS
@given(edits(), st.integers(0, 3), st.data())
def test_a_corrupted_context_line_always_fails(
    pair: tuple[list[str], list[str]], context: int, data: st.DataObject
) -> None:
    old, new = pair
    assume(old != new)
    diff = make_diff(old, new, context).splitlines(keepends=True)
    pattern = [
        i for i, s in enumerate(diff) if s[:1] in (" ", "-") and not s.startswith("--- ") and i > 1
    ]
    assume(pattern)
    i = data.draw(st.sampled_from(pattern))
    diff[i] = diff[i][0] + "CORRUPTED" + ("\n" if diff[i].endswith("\n") else "")
    with pytest.raises(PatchError) as info:
        apply_patch("".join(old), "".join(diff))
    assert info.value.code == "ERR_PATCH_APPLY_FAILED"


def gnu_patch(tmp: Path, original: str, diff: str) -> str | None:
    assert GNU_PATCH is not None
    source, patch_file, output = tmp / "in.txt", tmp / "p.diff", tmp / "out.txt"
    source.write_text(original, newline="")
    patch_file.write_text(diff, newline="")
    output.unlink(missing_ok=True)
    done = subprocess.run(
        [
            GNU_PATCH,
            "-F0",
            "-f",
            "-s",
            "--no-backup-if-mismatch",
            "-r",
            str(tmp / "rej"),
            "-o",
            str(output),
            str(source),
            str(patch_file),
        ],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=20,
        check=False,
    )
    if done.returncode != 0:
        return None
    return output.read_bytes().decode()


ALPHABET = ["a", "b", "c", "", "d"]


@pytest.mark.skipif(GNU_PATCH is None, reason="GNU patch is not installed")
# Every example runs GNU patch in a process of its own. On a five-line alphabet, half of
# the profile's examples still make hunks move, meet look-alike context and stop matching.
@settings(
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    max_examples=examples(1 / 2),
)
@given(edits(ALPHABET), st.integers(0, 3), st.data())
def test_agrees_with_gnu_patch(
    tmp_path: Path,
    pair: tuple[list[str], list[str]],
    context: int,
    data: st.DataObject,
) -> None:
    old, new = pair
    assume(old != new)
    diff = make_diff(old, new, context)
    # Apply the diff to a perturbed original: lines inserted, deleted or changed anywhere,
    # so that hunks move, collide with look-alike context, or stop matching.
    target = list(old)
    for _ in range(data.draw(st.integers(0, 3))):
        at = data.draw(st.integers(0, len(target)))
        op = data.draw(st.sampled_from(["insert", "delete", "change"]))
        if op == "insert":
            target[at:at] = [data.draw(st.sampled_from(ALPHABET)) + "\n"]
        elif target:
            at = min(at, len(target) - 1)
            if op == "delete":
                del target[at]
            else:
                target[at] = data.draw(st.sampled_from(ALPHABET)) + "\n"
    original = "".join(target)
    expected = gnu_patch(tmp_path, original, diff)
    try:
        ours: str | None = apply_patch(original, diff)
        code, candidates = "", []
    except PatchError as exc:
        ours, code, candidates = None, exc.code, exc.details.get("candidates", [])
    if code == "ERR_PATCH_AMBIGUOUS":
        # The one deliberate difference: GNU takes the nearest of several matches.
        assert len(candidates) >= 2
        return
    assert ours == expected, diff
    assert code in ("", "ERR_PATCH_APPLY_FAILED")


def _unterminated(lines: list[str], final_nl: bool) -> list[str]:
    return [*lines[:-1], lines[-1].rstrip("\n")] if lines and not final_nl else lines


@pytest.mark.skipif(GNU_PATCH is None, reason="GNU patch is not installed")
# GNU patch in a process of its own for every example, as above.
@settings(
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    max_examples=examples(1 / 2),
)
@given(edits(ALPHABET), st.booleans(), st.booleans(), st.integers(0, 3), st.data())
def test_agrees_with_gnu_patch_on_files_without_a_final_newline(
    tmp_path: Path,
    pair: tuple[list[str], list[str]],
    old_nl: bool,
    new_nl: bool,
    context: int,
    data: st.DataObject,
) -> None:
    # "\ No newline at end of file" pins a hunk to the end of the file, as GNU reads it.
    # opsrun also lets a context line match the last line whatever its newline state
    # (documented), so only the cases GNU applies are compared.
    old, new = _unterminated(pair[0], old_nl), _unterminated(pair[1], new_nl)
    assume(old != new)
    diff = make_diff(old, new, context)
    target = [s.rstrip("\n") for s in old]
    for _ in range(data.draw(st.integers(0, 2))):
        at = data.draw(st.integers(0, len(target)))
        target[at:at] = [data.draw(st.sampled_from(ALPHABET))]
    final_nl = data.draw(st.booleans())
    original = "\n".join(target) + ("\n" if target and final_nl else "")
    expected = gnu_patch(tmp_path, original, diff)
    assume(expected is not None)
    try:
        result = apply_patch_detailed(original, diff)
    except PatchError as exc:
        assume(exc.code != "ERR_PATCH_AMBIGUOUS")  # GNU takes the nearest of several matches
        raise
    # Where opsrun used its documented leniency (a hunk's last old line on the file's last
    # line with the other newline state), GNU looks elsewhere: not comparable.
    assume(
        all(
            place.line + size - 1 != len(target) or marked == (not final_nl)
            for place, (size, marked) in zip(result.hunks, _old_sides(diff), strict=True)
        )
    )
    assert result.text == expected, (original, diff)


def _old_sides(diff: str) -> list[tuple[int, bool]]:
    """Per hunk: its number of old lines, and whether the last one lacks a newline."""
    sides: list[tuple[int, bool]] = []
    last = ""
    for line in diff.splitlines()[2:]:
        if line.startswith("@@"):
            sides.append((0, False))
        elif line.startswith("\\") and last in (" ", "-"):
            sides[-1] = (sides[-1][0], True)
        elif line[:1] in (" ", "-"):
            sides[-1] = (sides[-1][0] + 1, False)
        last = line[:1]
    return sides
