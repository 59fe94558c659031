"""Validation cost of a large plan, relative to ``json.loads`` of the same text.

Builds a 200-action v1 plan carrying about 5 MB of code-like content (half
CREATE_FILE, half UPDATE_FILE so the elision scan runs too) and prints, from
one run, the best of several timings for:

* ``json.loads(text)``                      the baseline
* ``validate_plan(plan)``                   the rules alone (target <= 5x the baseline)
* ``parse_plan(text)`` + ``validate_plan``  the whole path from the LLM answer

Run: ``.venv/bin/python benchmarks/bench_validate.py``
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from opsrun.protocol import parse_plan, validate_plan

ACTIONS = 200
TOTAL_BYTES = 5_000_000
REPEATS = 7

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


def make_answer() -> str:
    per_file = TOTAL_BYTES // ACTIONS
    actions: list[dict[str, Any]] = []
    for i in range(ACTIONS):
        kind = "CREATE_FILE" if i % 2 == 0 else "UPDATE_FILE"
        actions.append(
            {
                "kind": kind,
                "path": f"src/pkg{i % 10}/module_{i}.py",
                "content": make_content(i, per_file),
            }
        )
    return json.dumps({"actions": actions, "summary": "Refactor handlers.", "memory_patch": {}})


def best(fn: Callable[[], object]) -> float:
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    text = make_answer()
    plan = parse_plan(text, version=1, strict=True)
    violations = validate_plan(plan)
    assert violations == [], violations
    content_bytes = sum(len((a.content or "").encode()) for a in plan.actions)

    t_json = best(lambda: json.loads(text))
    t_validate = best(lambda: validate_plan(plan))
    t_parse = best(lambda: parse_plan(text, version=1, strict=True))
    t_full = best(lambda: validate_plan(parse_plan(text, version=1, strict=True)))

    print(
        f"plan: {len(plan.actions)} actions, {content_bytes:,} content bytes, {len(text):,} chars"
    )
    print(f"json.loads                 {t_json * 1000:8.2f} ms")
    print(f"validate_plan              {t_validate * 1000:8.2f} ms   {t_validate / t_json:5.2f}x")
    print(f"parse_plan (strict)        {t_parse * 1000:8.2f} ms   {t_parse / t_json:5.2f}x")
    print(f"parse_plan + validate_plan {t_full * 1000:8.2f} ms   {t_full / t_json:5.2f}x")
    print("target: validate_plan <= 5x json.loads")


if __name__ == "__main__":
    main()
