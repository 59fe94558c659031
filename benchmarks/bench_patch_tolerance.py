"""Tolerant patching on sloppy diffs: applied correctly, refused, applied wrongly.

A corpus of diffs is generated from this repository's own source files (``src/``):
each case edits one to three places of a real file, writes the unified diff, then
spoils it the way LLM-written diffs are spoiled: line numbers that drift, lines
inserted above in the file, trailing whitespace, tabs for spaces, a re-indented
block, typographic quotes and dashes, a dropped or an invented context line at a
hunk's edge, missing ``@@`` numbers. Some cases duplicate the edited block
elsewhere in the file, so that a hunk without a reliable line number is ambiguous.

Every case is applied at each tolerance of :func:`opsrun.protocol.apply_patch` and
by a first-match ladder written here after Codex's ``apply_patch`` (exact, then
trailing whitespace, then both sides, then Unicode punctuation; the first match
from the previous hunk on wins, line numbers ignored; context lines keep the file's
text). A case is *correct* when
the result is exactly the intended file, *refused* when the engine raised, and
*wrong* when it returned anything else. No timings.

Run: ``.venv/bin/python benchmarks/bench_patch_tolerance.py [--cases N] [--seed S]``.
"""

from __future__ import annotations

import argparse
import difflib
import itertools
import random
import re
from collections import Counter
from collections.abc import Callable
from functools import partial
from pathlib import Path

from opsrun.errors import PatchError
from opsrun.protocol import PatchTolerance, apply_patch

SRC = Path(__file__).resolve().parent.parent / "src"
SLOPS = (
    "clean",
    "numbers",
    "file_drift",
    "trailing_ws",
    "tabs",
    "reindent",
    "quotes",
    "drop_context",
    "extra_context",
    "no_numbers",
)
LEVELS: tuple[PatchTolerance, ...] = ("exact", "whitespace", "loose")
_HEADER = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@(.*)$")


def sources() -> list[list[str]]:
    """The repository's Python files of 80 lines or more, as lists of lines."""
    files = []
    for path in sorted(SRC.rglob("*.py")):
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
        if len(lines) >= 80 and all(line.endswith("\n") for line in lines):
            files.append(lines)
    return files


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" \t"))]


def make_case(rng: random.Random, lines: list[str]) -> tuple[str, str, str, str] | None:
    """Return (original, intended, diff, slop) for one case, or None if the file does not fit."""
    old = list(lines)
    duplicate = rng.random() < 0.3
    sites = sorted(rng.sample(range(6, len(old) - 8), rng.randint(1, 3)))
    if any(b - a < 14 for a, b in itertools.pairwise(sites)):
        return None
    if any(not old[i].strip() for i in sites):
        return None
    if duplicate:
        # Copy the block around the first site to a place at least 20 lines away.
        at = sites[0]
        block = old[at - 5 : at + 6]
        spots = [
            i for i in range(len(old)) if abs(i - at) > 20 and all(abs(i - s) > 12 for s in sites)
        ]
        if not spots:
            return None
        spot = rng.choice(spots)
        old[spot:spot] = block
        sites = [s + len(block) if s >= spot else s for s in sites]
        if rng.random() < 0.5:  # the edit goes to the copy instead
            sites[0] = spot + 5
            sites = sorted(sites)
            if any(b - a < 14 for a, b in itertools.pairwise(sites)):
                return None
    new = list(old)
    for n, i in reversed(list(enumerate(sites))):
        pad = _indent(old[i])
        kind = rng.choice(("replace", "insert", "delete"))
        if kind == "replace":
            new[i : i + 1] = [f'{pad}value_{n} = compute_{n}("x")\n']
        elif kind == "insert":
            new[i + 1 : i + 1] = [f"{pad}trace_{n}('edited')\n", f"{pad}count_{n} += 1\n"]
        else:
            del new[i]
    diff = "".join(difflib.unified_diff(old, new, "a/m.py", "b/m.py", n=3))
    slop = rng.choice(SLOPS)
    original, intended = "".join(old), "".join(new)
    if slop == "file_drift":
        above = [f"# drift {k}\n" for k in range(rng.randint(1, 12))]
        original, intended = "".join(above) + original, "".join(above) + intended
        return original, intended, diff, slop + ("+dup" if duplicate else "")
    return original, intended, spoil(rng, diff, slop), slop + ("+dup" if duplicate else "")


def spoil(rng: random.Random, diff: str, slop: str) -> str:
    """Spoil a clean unified diff in one way."""
    lines = diff.splitlines(keepends=True)
    body = [i for i, s in enumerate(lines) if s[:1] in " -" and not s.startswith("---")]
    old_side = [i for i in body if lines[i][1:].strip()]
    if slop == "numbers":
        shift = rng.choice((-1, 1)) * rng.randint(1, 25)
        return "".join(_renumber(s, shift) for s in lines)
    if slop == "no_numbers":
        return "".join("@@ @@\n" if s.startswith("@@") else s for s in lines)
    if slop == "trailing_ws":
        for i in rng.sample(old_side, min(len(old_side), 3)):
            lines[i] = lines[i][:-1] + rng.choice(("  ", "\t", " ")) + "\n"
    elif slop == "quotes":
        for i in old_side:
            text = lines[i]
            text = re.sub(r"'([^']*)'", "\u2018\\1\u2019", text, count=1)
            text = re.sub(r'"([^"]*)"', "\u201c\\1\u201d", text, count=1)
            lines[i] = text.replace(" -- ", " \u2014 ").replace(" - ", " \u2013 ")
    elif slop == "tabs":
        for i, s in enumerate(lines):
            if s[:1] in " -+" and not s.startswith(("---", "+++")):
                text = s[1:]
                pad = _indent(text)
                lines[i] = s[0] + "\t" * (len(pad) // 4) + " " * (len(pad) % 4) + text[len(pad) :]
    elif slop == "reindent":
        return _reindent(lines, rng.choice((-1, 1)) * rng.choice((4, 8)))
    elif slop in ("drop_context", "extra_context"):
        return _edges(rng, lines, slop)
    return "".join(lines)


def _renumber(line: str, shift: int) -> str:
    m = _HEADER.match(line)
    if m is None:
        return line
    start = max(1, int(m.group(1)) + shift)
    return (
        f"@@ -{start},{m.group(2) or 1} +{max(1, int(m.group(3)) + shift)},{m.group(4) or 1} @@\n"
    )


def _reindent(lines: list[str], by: int) -> str:
    """Indent (or dedent) every hunk line by ``by`` columns, as when a block is quoted.

    A dedent goes no further than the least indented line of the hunks.
    """
    body = [
        i
        for i, s in enumerate(lines)
        if s[:1] in " -+" and not s.startswith(("---", "+++")) and s[1:].strip()
    ]
    if by < 0:
        by = -min([-by, *(len(_indent(lines[i][1:])) for i in body)]) or 4
    for i in body:
        s = lines[i]
        lines[i] = s[0] + (s[1 - by :] if by < 0 else " " * by + s[1:])
    return "".join(lines)


def _edges(rng: random.Random, lines: list[str], slop: str) -> str:
    """Drop one edge context line of a hunk, or add an invented one."""
    starts = [i for i, s in enumerate(lines) if s.startswith("@@")]
    pick = rng.choice(starts)
    end = next((i for i in starts if i > pick), len(lines))
    first, last = pick + 1, end - 1
    if slop == "drop_context":
        victim = rng.choice((first, last))
        if lines[victim][:1] == " ":
            del lines[victim]
    else:
        invented = " # (this line is not in the file)\n"
        lines.insert(end if rng.random() < 0.5 else first, invented)
    return "".join(lines)


# -- a Codex-style first-match ladder, for comparison --------------------------------------

_PUNCT = str.maketrans(
    {
        **dict.fromkeys("\u2010\u2011\u2012\u2013\u2014\u2015\u2212", "-"),
        **dict.fromkeys("\u2018\u2019\u201a\u201b", "'"),
        **dict.fromkeys("\u201c\u201d\u201e\u201f", '"'),
        **dict.fromkeys("\u00a0\u2002\u2003\u2009\u202f\u3000", " "),
    }
)
_RUNGS: tuple[Callable[[str], str], ...] = (
    lambda s: s,
    str.rstrip,
    str.strip,
    lambda s: s.strip().translate(_PUNCT),
)


def first_match(original: str, diff: str) -> str:
    """Apply ``diff`` the way Codex's ``apply_patch`` does: first match wins, numbers ignored."""
    lines = original.split("\n")[:-1]
    hunks: list[list[str]] = []
    for s in diff.splitlines():
        if s.startswith("@@"):
            hunks.append([])
        elif hunks and s[:1] in (" ", "-", "+") and not s.startswith(("---", "+++")):
            hunks[-1].append(s)
    start = 0
    for ops in hunks:
        old = [s[1:] for s in ops if s[0] != "+"]
        at = _seek(lines, old, start)
        if at is None:
            raise PatchError("no match", code="ERR_PATCH_APPLY_FAILED")
        # Context lines keep the file's text; only removed and added lines change.
        new: list[str] = []
        pos = at
        for s in ops:
            if s[0] == " ":
                new.append(lines[pos])
            if s[0] != "+":
                pos += 1
            if s[0] == "+":
                new.append(s[1:])
        lines[at : at + len(old)] = new
        start = at + len(new)
    return "\n".join(lines) + "\n"


def _seek(lines: list[str], pattern: list[str], start: int) -> int | None:
    for rung in _RUNGS:
        want = [rung(s) for s in pattern]
        for i in range(start, len(lines) - len(pattern) + 1):
            if [rung(s) for s in lines[i : i + len(pattern)]] == want:
                return i
    return None


# -- the run ------------------------------------------------------------------------------


def _ours(original: str, diff: str, *, tolerance: PatchTolerance) -> str:
    return apply_patch(original, diff, tolerance=tolerance)


def outcome(engine: Callable[[str, str], str], original: str, diff: str, intended: str) -> str:
    try:
        result = engine(original, diff)
    except PatchError:
        return "refused"
    return "correct" if result == intended else "wrong"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--show-wrong", action="store_true", help="Print each wrong case.")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    files = sources()
    engines: dict[str, Callable[[str, str], str]] = {
        level: partial(_ours, tolerance=level) for level in LEVELS
    }
    engines["first-match"] = first_match
    totals = {name: Counter[str]() for name in engines}
    by_slop = {name: Counter[tuple[str, str]]() for name in engines}
    cases = 0
    while cases < args.cases:
        made = make_case(rng, rng.choice(files))
        if made is None:
            continue
        original, intended, diff, slop = made
        cases += 1
        for name, engine in engines.items():
            result = outcome(engine, original, diff, intended)
            totals[name][result] += 1
            by_slop[name][(slop.split("+")[0], result)] += 1
            if slop.endswith("+dup"):
                by_slop[name][("duplicated", result)] += 1
            if result == "wrong" and args.show_wrong and name != "first-match":
                print(f"--- wrong at {name} ({slop})\n{diff}")
    print(f"{cases} sloppy diffs from {len(files)} files of src/ (seed {args.seed})\n")
    print(f"{'engine':<13}{'correct':>9}{'refused':>9}{'wrong':>9}")
    for name, counts in totals.items():
        shares = [100 * counts[k] / cases for k in ("correct", "refused", "wrong")]
        print(f"{name:<13}" + "".join(f"{s:>8.1f}%" for s in shares))
    print("\ncorrect / wrong per kind of sloppiness ('duplicated': the cases with a copied block)")
    print(f"{'kind':<14}" + "".join(f"{name:>14}" for name in engines))
    for slop in (*SLOPS, "duplicated"):
        row = "".join(
            f"{by_slop[n][(slop, 'correct')]:>8}/{by_slop[n][(slop, 'wrong')]:<5}" for n in engines
        )
        print(f"{slop:<14}{row}")


if __name__ == "__main__":
    main()
