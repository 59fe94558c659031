"""Save-time profile validation grows linearly with the profile.

    python benchmarks/bench_profiles.py [--quick]

``OperationCatalog.validate`` on profiles of 1,000 and 8,000 operations in three shapes:
independent operations, one long ``dependsOn`` chain, and a fan-in (one operation that
depends on all the others, as a collector summarising every result does). For each
shape it prints the CPU time per operation (``time.process_time``) at 8,000 against
1,000, measured in interleaved rounds (median, with the min-max range over rounds).
Target: at most 1.5x, that is, linear.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable

from opsrun import (
    OperationCatalog,
    OperationConfig,
    OperationContext,
    OperationProfile,
    OperationResult,
    ProfileOperation,
)
from opsrun.model import Hook

QUICK = "--quick" in sys.argv
SMALL, LARGE = 1_000, 8_000
Shape = Callable[[int], tuple[str, ...]]
"""The ``dependsOn`` of operation ``i``."""


def op_id(i: int) -> str:
    return f"op{i:05d}"


def independent(i: int) -> tuple[str, ...]:
    return ()


def chain(i: int) -> tuple[str, ...]:
    return (op_id(i - 1),) if i else ()


def fan_in_of(n: int) -> Shape:
    def fan_in(i: int) -> tuple[str, ...]:
        return tuple(op_id(j) for j in range(n - 1)) if i == n - 1 else ()

    return fan_in


def case(n: int, shape: Shape) -> tuple[OperationCatalog, OperationProfile]:
    catalog = OperationCatalog()

    async def done(ctx: OperationContext) -> OperationResult:
        return OperationResult.done()

    for i in range(n):
        catalog.function(op_id(i), name=f"Op {i}")(done)
    entries = tuple(
        ProfileOperation(
            operation_id=op_id(i),
            config=OperationConfig(hooks=(Hook.BEFORE_MAIN_LLM,), order=i, depends_on=shape(i)),
        )
        for i in range(n)
    )
    profile = OperationProfile(
        profile_id="p", name="P", operation_profile_session_id="s", operations=entries
    )
    return catalog, profile


def per_operation(catalog: OperationCatalog, profile: OperationProfile) -> float:
    """CPU seconds per operation of one validation (which must find nothing)."""
    t0 = time.process_time()
    issues = catalog.validate(profile)
    elapsed = time.process_time() - t0
    assert issues == [], issues[:3]
    return elapsed / len(profile.operations)


def main() -> None:
    rounds = 3 if QUICK else 7
    shapes: dict[str, Callable[[int], Shape]] = {
        "independent": lambda n: independent,
        "chain": lambda n: chain,
        "fan-in": fan_in_of,
    }
    cases = {(name, n): case(n, make(n)) for name, make in shapes.items() for n in (SMALL, LARGE)}
    times: dict[tuple[str, int], list[float]] = {key: [] for key in cases}
    for _ in range(rounds):
        for key, (catalog, profile) in cases.items():
            times[key].append(per_operation(catalog, profile))
    for name in shapes:
        small, large = times[(name, SMALL)], times[(name, LARGE)]
        ratios = sorted(b / a for a, b in zip(small, large, strict=True))
        print(
            f"profile validation, {name:11}: {statistics.median(large) * 1e6:5.1f} us per "
            f"operation at {LARGE:,} vs {statistics.median(small) * 1e6:5.1f} at {SMALL:,} = "
            f"{statistics.median(ratios):4.2f}x (range {ratios[0]:.2f}-{ratios[-1]:.2f}x) "
            "[target <= 1.5x]"
        )


if __name__ == "__main__":
    main()
