"""Patch-engine benchmark: opsrun's apply_patch against whatthepatch, patch-ng and GNU patch.

Case 1: a 300-hunk diff applied to a 10,000-line file. Case 2: a 1 MB file with one
hunk, at two sizes, to show the cost grows linearly with the file. Case 3: a file of
repeated lines and a hunk of N/10 of them that matches everywhere or almost everywhere,
at 80k, 160k and 320k lines and every tolerance: placement stays linear (opsrun only;
CPU time, best of three). Python engines
are timed in-process (parse + apply, best of several runs); GNU patch is timed as a
whole process via subprocess, which is how it is used. Prints times and ratios.

Run: ``.venv/bin/python benchmarks/bench_patch.py`` (needs the ``bench`` extra).
"""

from __future__ import annotations

import difflib
import io
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from opsrun.errors import PatchError
from opsrun.protocol import PatchTolerance, apply_patch

try:
    import whatthepatch
except ImportError:  # pragma: no cover - optional
    whatthepatch = None
try:
    import patch_ng
except ImportError:  # pragma: no cover - optional
    patch_ng = None

GNU = shutil.which("patch")


def best_of(fn: Callable[[], object], runs: int = 7) -> float:
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def make_case(lines: int, hunks: int) -> tuple[str, str, str]:
    old = [f"def function_{i}(value):  # line {i}\n" for i in range(lines)]
    new = list(old)
    step = lines // hunks
    for h in range(hunks):
        at = h * step + step // 2
        new[at] = f"def function_{at}(value, extra=None):  # changed\n"
    diff = "".join(difflib.unified_diff(old, new, "a/f.py", "b/f.py", n=3))
    return "".join(old), "".join(new), diff


def run_opsrun(original: str, diff: str) -> str:
    return apply_patch(original, diff)


def run_whatthepatch(original: str, diff: str) -> str:
    parsed = next(iter(whatthepatch.parse_patch(diff)))
    return "\n".join(whatthepatch.apply_diff(parsed, original.splitlines())) + "\n"


def run_patch_ng(original: str, diff: str) -> str:
    patchset = patch_ng.fromstring(diff.encode())
    out = patchset.patch_stream(io.BytesIO(original.encode()), patchset.items[0].hunks)
    return b"".join(out).decode()


def gnu_time(tmp: Path, original: str, diff: str, expected: str) -> float:
    assert GNU is not None
    (tmp / "f.py").write_text(original)
    (tmp / "p.diff").write_text(diff)

    def once() -> None:
        subprocess.run(
            [
                GNU,
                "-F0",
                "-s",
                "-f",
                "-o",
                str(tmp / "out.py"),
                str(tmp / "f.py"),
                str(tmp / "p.diff"),
            ],
            check=True,
        )

    seconds = best_of(once)
    assert (tmp / "out.py").read_text() == expected
    return seconds


def report(title: str, original: str, expected: str, diff: str, tmp: Path) -> dict[str, float]:
    print(
        f"\n{title}: {len(original.splitlines()):,} lines, {len(original):,} bytes, "
        f"diff {len(diff):,} bytes"
    )
    times: dict[str, float] = {}
    engines: list[tuple[str, Callable[[str, str], str]]] = [("opsrun", run_opsrun)]
    if whatthepatch is not None:
        engines.append(("whatthepatch", run_whatthepatch))
    if patch_ng is not None:
        engines.append(("patch-ng", run_patch_ng))
    for name, fn in engines:
        result = fn(original, diff)
        assert result == expected, f"{name} produced a different result"
        times[name] = best_of(partial(fn, original, diff))
    if GNU is not None:
        times["GNU patch (process)"] = gnu_time(tmp, original, diff, expected)
    ours = times["opsrun"]
    for name, seconds in times.items():
        ratio = "" if name == "opsrun" else f"   opsrun is {seconds / ours:5.2f}x faster"
        if name != "opsrun" and seconds < ours:
            ratio = f"   opsrun takes {ours / seconds:5.2f}x as long"
        print(f"  {name:22s} {seconds * 1000:9.2f} ms{ratio}")
    return times


def main() -> None:
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        original, expected, diff = make_case(10_000, 300)
        report("300 hunks, 10,000-line file", original, expected, diff, tmp)
        sizes: list[tuple[int, float]] = []
        for lines in (25_000, 50_000):
            original, expected, diff = make_case(lines, 1)
            times = report(f"one hunk, {lines:,}-line file", original, expected, diff, tmp)
            sizes.append((len(original), times["opsrun"]))
        (b1, t1), (b2, t2) = sizes
        print(
            f"\nlinearity: {b2 / b1:.2f}x the bytes took {t2 / t1:.2f}x the time "
            f"({t1 / b1 * 1e9:.2f} vs {t2 / b2 * 1e9:.2f} ns per byte)"
        )
    repeated_lines()


def repeated(lines: int, shape: str) -> tuple[str, str]:
    """A file of repeated lines and a hunk of ``lines // 10`` of them around a change."""
    half = lines // 20
    if shape == "matches everywhere":
        body = " x\n" * half + "-x\n+z\n" + " x\n" * half
        return "x\n" * lines, f"@@ -{2 * lines},{2 * half + 1} +1,{2 * half} @@\n{body}"
    pairs = half // 2
    body = " a\n b\n" * pairs + "-a\n+z\n" + " a\n b\n" * pairs
    return "a\nb\n" * (lines // 2), f"@@ -1,{4 * pairs + 1} +1,{4 * pairs} @@\n{body}"


def cpu_best_of(fn: Callable[[], object], runs: int = 3) -> float:
    best = float("inf")
    for _ in range(runs):
        start = time.process_time()
        fn()
        best = min(best, time.process_time() - start)
    return best


def place_or_refuse(original: str, diff: str, level: PatchTolerance) -> None:
    try:
        apply_patch(original, diff, tolerance=level)
    except PatchError as exc:
        if exc.code not in ("ERR_PATCH_AMBIGUOUS", "ERR_PATCH_APPLY_FAILED"):
            raise


def repeated_lines() -> None:
    print("\nrepeated lines, a hunk of N/10 of them (CPU seconds; ratio to the 80k time)")
    levels: tuple[PatchTolerance, ...] = ("exact", "whitespace", "loose")
    for shape in ("matches everywhere", "almost matches everywhere"):
        for level in levels:
            times = []
            for lines in (80_000, 160_000, 320_000):
                original, diff = repeated(lines, shape)
                times.append(cpu_best_of(partial(place_or_refuse, original, diff, level)))
            figures = "  ".join(
                f"{n // 1000}k {t:6.3f} s ({t / times[0]:4.2f}x)"
                for n, t in zip((80_000, 160_000, 320_000), times, strict=True)
            )
            print(f"  {shape:26s} {level:10s} {figures}")


if __name__ == "__main__":
    main()
