"""Cost of parsing and validating a plan, relative to ``json.loads`` of the same text.

Two plans:

* **50 actions**: a realistic v2 answer of about 77 kB, pretty-printed as models write
  it, mixing every kind (files created and rewritten, unified diffs, replaced ranges,
  directories, deletes) with a summary, context requests and a memory patch;
* **5 MB**: 200 v1 actions carrying about 5 MB of code-like content (half CREATE_FILE,
  half UPDATE_FILE so the elision scan runs too).

For each plan it times, in interleaved rounds (each round runs every case once, in a
rotating order, over a batch of calls), the CPU time of this process
(``time.process_time``) per call of:

* ``json.loads(text)``                      the baseline, measured in the same rounds
* ``validate_plan(plan)``                   the rules alone
* ``parse_plan(text)``                      decode, guards and schema check (strict mode)
* ``parse_plan`` + ``validate_plan``        the whole path from the LLM answer

and prints the median with the min–max over rounds, and the ratio of each median to the
``json.loads`` median. Target: parse + validate ≤ 5× ``json.loads`` on both plans.

Run: ``.venv/bin/python benchmarks/bench_validate.py [--rounds N]``
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from opsrun.protocol import parse_plan, validate_plan

TARGET = 5.0

LINES = [
    "def handler_{n}(request, *, retries=3):\n",
    '    """Handle one request; retry on transient errors."""\n',
    "    for attempt in range(retries):\n",
    "        try:\n",
    "            return process(request, attempt=attempt)  # ünïcode ok\n",
    "        except TimeoutError:\n",
    "            continue\n",
    "    raise RuntimeError(f'gave up after {{retries}} attempts')\n",
    "\n",
]


def make_content(index: int, size: int) -> str:
    parts: list[str] = []
    total = 0
    n = 0
    while total < size:
        for line in LINES:
            text = line.format(n=f"{index}_{n}")
            parts.append(text)
            total += len(text.encode())
        n += 1
    return "".join(parts)[:size]


def make_large_answer(actions: int = 200, total_bytes: int = 5_000_000) -> str:
    """The 5 MB v1 plan: ``actions`` files sharing ``total_bytes`` of content."""
    per_file = total_bytes // actions
    items: list[dict[str, Any]] = []
    for i in range(actions):
        kind = "CREATE_FILE" if i % 2 == 0 else "UPDATE_FILE"
        items.append(
            {
                "kind": kind,
                "path": f"src/pkg{i % 10}/module_{i}.py",
                "content": make_content(i, per_file),
            }
        )
    return json.dumps({"actions": items, "summary": "Refactor handlers.", "memory_patch": {}})


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _diff(index: int) -> str:
    """A two-hunk unified diff of about 1.2 kB, as a model writes one."""
    lines = [f"--- a/src/app/service_{index}.py\n", f"+++ b/src/app/service_{index}.py\n"]
    for hunk in range(2):
        start = 10 + hunk * 40
        lines.append(f"@@ -{start},8 +{start},9 @@ class Service{index}:\n")
        lines.append(f"     def method_{hunk}(self, value: int) -> int:\n")
        lines.append(f'         """Return the value for slot {hunk}."""\n')
        lines.append("         if value < 0:\n")
        lines.append("-            raise ValueError('negative value: %d' % value)\n")
        lines.append("+            raise ValueError(f'negative value: {value}')\n")
        lines.append("+        # keep the cache warm for the next call\n")
        lines.append(f"         result = self._cache.get(value, {hunk})\n")
        lines.append("         self._hits += 1\n")
        lines.append("         return result\n")
        lines.append(" \n")
    return "".join(lines)


def make_realistic_answer(actions: int = 50) -> str:
    """The 50-action v2 plan (about 77 kB), indented like a model's answer."""
    items: list[dict[str, Any]] = []
    for i in range(actions):
        slot = i % 10
        if slot == 0:
            items.append({"kind": "CREATE_DIR", "path": f"src/app/feature_{i}"})
        elif slot in (1, 2, 3):
            items.append(
                {
                    "kind": "CREATE_FILE",
                    "path": f"src/app/feature_{i - slot}/part_{i}.py",
                    "content": make_content(i, 2500),
                }
            )
        elif slot in (4, 5, 6):
            items.append(
                {
                    "kind": "PATCH_FILE",
                    "path": f"src/app/service_{i}.py",
                    "patch": _diff(i),
                    "base_sha256": _sha(f"service {i}"),
                }
            )
        elif slot == 7:
            items.append(
                {
                    "kind": "REPLACE_RANGE",
                    "path": f"src/app/model_{i}.py",
                    "start_line": 12,
                    "end_line": 30,
                    "content": make_content(i, 1100),
                    "base_sha256": _sha(f"model {i}"),
                }
            )
        elif slot == 8:
            items.append(
                {
                    "kind": "UPDATE_FILE",
                    "path": f"tests/test_feature_{i}.py",
                    "content": make_content(i, 2000),
                    "base_sha256": _sha(f"test {i}"),
                }
            )
        else:
            items.append({"kind": "DELETE_FILE", "path": f"src/app/legacy_{i}.py"})
    answer = {
        "actions": items,
        "summary": "Split the services into features, move the legacy helpers, add tests.",
        "context_requests": [
            {"type": "read_file", "path": "src/app/settings.py", "start_line": 1, "end_line": 80},
            {"type": "search", "query": "legacy_", "glob": "src/**/*.py"},
        ],
        "memory_patch": {"project.default_test_command": "pytest -q"},
    }
    return json.dumps(answer, indent=2, ensure_ascii=False)


def measure(
    cases: dict[str, Callable[[], object]], rounds: int, batch: int
) -> dict[str, list[float]]:
    """CPU seconds per call of each case, one sample per round, cases interleaved."""
    names = list(cases)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for fn in cases.values():  # warm caches (compiled validators, models) once
        fn()
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            fn = cases[name]
            start = time.process_time()
            for _ in range(batch):
                fn()
            samples[name].append((time.process_time() - start) / batch)
    return samples


def report(title: str, text: str, version: int, rounds: int, batch: int) -> float:
    """Print one plan's table; return the parse + validate ratio to ``json.loads``."""
    plan = parse_plan(text, version=version, strict=True)
    violations = validate_plan(plan)
    assert violations == [], violations
    samples = measure(
        {
            "json.loads": lambda: json.loads(text),
            "validate_plan": lambda: validate_plan(plan),
            "parse_plan (strict)": lambda: parse_plan(text, version=version, strict=True),
            "parse_plan (best-effort)": lambda: parse_plan(text, version=version),
            "parse_plan + validate_plan": lambda: validate_plan(
                parse_plan(text, version=version, strict=True)
            ),
        },
        rounds,
        batch,
    )
    base = statistics.median(samples["json.loads"])
    print(
        f"\n{title}: v{version}, {len(plan.actions)} actions, {len(text.encode()):,} bytes "
        f"({rounds} rounds x {batch} calls, CPU time per call)"
    )
    print(f"  {'case':<28}{'median':>10}  {'min-max':>19}  {'ratio':>6}")
    for name, values in samples.items():
        median = statistics.median(values)
        print(
            f"  {name:<28}{median * 1000:8.3f}ms  "
            f"{min(values) * 1000:8.3f}-{max(values) * 1000:8.3f}ms  {median / base:5.2f}x"
        )
    return statistics.median(samples["parse_plan + validate_plan"]) / base


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    ratios = {
        "50-action plan": report(
            "50-action plan", make_realistic_answer(), 2, args.rounds, batch=20
        ),
        "5 MB plan": report("5 MB plan", make_large_answer(), 1, args.rounds, batch=1),
    }
    print(f"\ntarget: parse_plan + validate_plan <= {TARGET:g}x json.loads")
    for name, ratio in ratios.items():
        print(f"  {name:<16}{ratio:6.2f}x  {'met' if ratio <= TARGET else 'NOT met'}")


if __name__ == "__main__":
    main()
