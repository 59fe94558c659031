"""Run-engine benchmarks; every figure is a ratio against a baseline measured in this run.

    python benchmarks/bench_runner.py [--quick]

1. Orchestration overhead per operation for 50 no-op operations (all parallel, and
   a 50-long chain), against a bare anyio task group running the very same operation
   coroutines (each returns ``OperationResult.done()``). The runner's cost per operation
   is (run with 50 operations - run with none) / 50. Both sides are measured in CPU time
   of this process (``time.process_time``), so time the machine spends on other
   processes does not count. Baseline, empty and full runs are measured interleaved in
   several rounds; the printed ratio is the median over rounds, with its min-max range.
2. A hook of 20 operations that each sleep 50 ms, with default settings (wall time:
   this one measures waiting).
3. An operation whose dependency finished early starts at once, not when a slower
   unrelated sibling finishes (wall time, on the event loop's clock).
4. Memory after 10,000 sequential runs with run records pruned.
5. A 200-long chain costs the same per operation as a 50-long one (CPU time).
6. Throughput of 100 runs at once against the same 100 runs one after another, each
   run with 5 operations in its own chat and in a task of its own, as a server runs
   requests, the harness's own cost (empty tasks) subtracted from both (CPU time; a
   ratio below 1 means running concurrently costs more, for example in garbage
   collection of the runs in flight); and the same with the garbage collector off.
"""

from __future__ import annotations

import gc
import itertools
import statistics
import sys
import time
import tracemalloc
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import anyio
from _quiet import QuietMainLlm  # the sibling module (script dir is on path)

from opsrun import (
    Hook,
    InMemoryStores,
    OperationCatalog,
    OperationConfig,
    OperationContext,
    OperationProfile,
    OperationResult,
    ProfileOperation,
    Runner,
    RunRequest,
)
from opsrun.testing import ScriptedMainLlm

QUICK = "--quick" in sys.argv


def build(
    n: int,
    *,
    chain: bool = False,
    body: Callable[[OperationContext], Awaitable[None]] | None = None,
) -> tuple[Runner, InMemoryStores]:
    stores = InMemoryStores()
    catalog = OperationCatalog()
    entries = []
    for i in range(n):

        async def op(ctx: OperationContext) -> OperationResult:
            if body is not None:
                await body(ctx)
            return OperationResult.done()

        catalog.function(f"op{i:03d}", name=f"Op {i}")(op)
        deps = (f"op{i - 1:03d}",) if chain and i > 0 else ()
        entries.append(
            ProfileOperation(
                operation_id=f"op{i:03d}",
                config=OperationConfig(hooks=(Hook.BEFORE_MAIN_LLM,), order=i, depends_on=deps),
            )
        )
    profile = OperationProfile(
        profile_id="bench",
        name="bench",
        operation_profile_session_id="s",
        operations=tuple(entries),
    )
    anyio.run(stores.profiles.save_profile, profile)
    runner = Runner(catalog=catalog, stores=stores, main_llm=QuietMainLlm())
    return runner, stores


_chat_ids = itertools.count()

Clock = Callable[[], float]
CPU: Clock = time.process_time
"""CPU time of this process: the clock of the overhead ratios."""
WALL: Clock = time.perf_counter
"""Wall time: the clock of the benchmarks that measure waiting."""


def request(i: int | None = None) -> RunRequest:
    """A generate request; without ``i`` it starts a new chat (so histories stay one turn)."""
    chat = next(_chat_ids) if i is None else i
    return RunRequest(trigger="generate", chat_id=f"c{chat}", profile_id="bench", user_message="hi")


async def time_runs(
    runner: Runner, stores: InMemoryStores, repeats: int, clock: Clock = CPU
) -> float:
    """Median seconds per run, each in a new chat; each run's records are pruned right after."""
    samples = []
    for _ in range(repeats):
        req = request()
        t0 = clock()
        result = await runner.run(req)
        samples.append(clock() - t0)
        await stores.runs.delete_run(result.run.run_id)
    return statistics.median(samples)


async def bare_task_group(runner: Runner, repeats: int) -> float:
    """Median CPU seconds for a bare task group running the very same operation coroutines."""
    operations = [runner.catalog.implementation(op_id) for op_id in runner.catalog]
    ctx: Any = None  # the benchmark operations do not read their context
    samples = []
    for _ in range(repeats):
        t0 = CPU()
        async with anyio.create_task_group() as tg:
            for operation in operations:
                tg.start_soon(operation.execute, ctx)
        samples.append(CPU() - t0)
    return statistics.median(samples)


async def bare_chain(runner: Runner, repeats: int) -> float:
    """The same coroutines awaited one after another, each in its own task group."""
    operations = [runner.catalog.implementation(op_id) for op_id in runner.catalog]
    ctx: Any = None
    samples = []
    for _ in range(repeats):
        t0 = CPU()
        for operation in operations:
            async with anyio.create_task_group() as tg:
                tg.start_soon(operation.execute, ctx)
        samples.append(CPU() - t0)
    return statistics.median(samples)


async def overhead_rounds(
    n: int,
    empty: tuple[Runner, InMemoryStores],
    full: tuple[Runner, InMemoryStores],
    bare: Callable[[Runner, int], Awaitable[float]],
    rounds: int,
    repeats: int,
) -> list[tuple[float, float, float]]:
    """``(runner µs/op, bare µs/op, empty run µs)`` of CPU time per round, measured interleaved.

    Each round measures the empty run, the full run and the bare baseline back to back
    (in a rotating order), so a slow patch of the machine hits all three alike.
    """
    measure: list[Callable[[], Awaitable[float]]] = [
        lambda: time_runs(*empty, repeats),
        lambda: time_runs(*full, repeats),
        lambda: bare(full[0], repeats),
    ]
    for step in measure:  # warm-up, not recorded
        await step()
    results = []
    for r in range(rounds):
        times = [0.0, 0.0, 0.0]
        for k in range(3):
            index = (r + k) % 3
            gc.collect()
            times[index] = await measure[index]()
        base, per_run, bare_run = times
        results.append(((per_run - base) / n * 1e6, bare_run / n * 1e6, base * 1e6))
    return results


def overhead() -> None:
    n = 50
    rounds, repeats = (5, 10) if QUICK else (15, 20)
    empty = build(0)
    for label, chain, bare in (
        ("parallel", False, bare_task_group),
        ("chain", True, bare_chain),
    ):
        full = build(n, chain=chain)
        results = anyio.run(overhead_rounds, n, empty, full, bare, rounds, repeats)
        ratios = sorted(per_op / bare_op for per_op, bare_op, _ in results)
        per_op = statistics.median(r[0] for r in results)
        bare_op = statistics.median(r[1] for r in results)
        base = statistics.median(r[2] for r in results)
        print(
            f"overhead/{label:8s} (CPU time): ratio {statistics.median(ratios):4.2f}x "
            f"[target <= 3x] (median of {rounds} rounds, range "
            f"{ratios[0]:.2f}-{ratios[-1]:.2f}x); runner {per_op:6.1f} µs per operation, "
            f"bare anyio task {bare_op:5.1f} µs, empty run {base:.0f} µs"
        )


async def chain_rounds(
    empty: tuple[Runner, InMemoryStores],
    chains: dict[int, tuple[Runner, InMemoryStores]],
    rounds: int,
    repeats: int,
) -> dict[int, list[float]]:
    """CPU µs per operation of each chain length, measured interleaved per round."""
    per_op: dict[int, list[float]] = {n: [] for n in chains}
    for step in [*chains.values(), empty]:  # warm-up, not recorded
        await time_runs(*step, 2)
    for _ in range(rounds):
        gc.collect()
        base = await time_runs(*empty, repeats)
        for n, chain in chains.items():
            gc.collect()
            per_op[n].append((await time_runs(*chain, repeats) - base) / n * 1e6)
    return per_op


def chain_scaling() -> None:
    """A longer chain costs the same per operation: no walk of the whole chain per step."""
    lengths = (50, 200)
    rounds, repeats = (3, 3) if QUICK else (7, 5)
    chains = {n: build(n, chain=True) for n in lengths}
    per_op = anyio.run(chain_rounds, build(0), chains, rounds, repeats)
    short, long = (statistics.median(per_op[n]) for n in lengths)
    ratios = sorted(b / a for a, b in zip(per_op[lengths[0]], per_op[lengths[1]], strict=True))
    print(
        f"chain of {lengths[1]} vs {lengths[0]} (CPU time per operation): {long:6.1f} µs vs "
        f"{short:6.1f} µs = {long / short:4.2f}x [target <= 1.2x] "
        f"(median of {rounds} rounds, range {ratios[0]:.2f}-{ratios[-1]:.2f}x)"
    )


def sleeping_hook() -> None:
    async def sleep50(ctx: OperationContext) -> None:
        await anyio.sleep(0.05)

    runner, stores = build(20, body=sleep50)
    empty_runner, empty_stores = build(0)
    repeats = 5 if QUICK else 10
    base = anyio.run(time_runs, empty_runner, empty_stores, repeats, WALL)
    total = anyio.run(time_runs, runner, stores, repeats, WALL)
    hook = total - base
    print(
        f"20 x sleep(50 ms) hook (wall time): {hook * 1000:6.1f} ms = {hook / 0.05:4.2f}x "
        "of 50 ms [target <= 1.2x]"
    )


def early_start() -> None:
    starts: dict[str, float] = {}
    stores = InMemoryStores()
    catalog = OperationCatalog()
    origin = [0.0]

    @catalog.function("fast", name="fast")
    async def fast(ctx: OperationContext) -> OperationResult:
        await anyio.sleep(0.01)
        return OperationResult.done()

    @catalog.function("slow", name="slow")
    async def slow(ctx: OperationContext) -> OperationResult:
        await anyio.sleep(0.2)
        return OperationResult.done()

    @catalog.function("after_fast", name="after fast")
    async def after_fast(ctx: OperationContext) -> OperationResult:
        starts["after_fast"] = anyio.current_time() - origin[0]
        return OperationResult.done()

    def cfg(order: int, deps: tuple[str, ...] = ()) -> OperationConfig:
        return OperationConfig(hooks=(Hook.BEFORE_MAIN_LLM,), order=order, depends_on=deps)

    profile = OperationProfile(
        profile_id="bench",
        name="bench",
        operation_profile_session_id="s",
        operations=(
            ProfileOperation(operation_id="fast", config=cfg(1)),
            ProfileOperation(operation_id="slow", config=cfg(2)),
            ProfileOperation(operation_id="after_fast", config=cfg(3, ("fast",))),
        ),
    )
    runner = Runner(catalog=catalog, stores=stores, main_llm=ScriptedMainLlm())

    async def go() -> None:
        await stores.profiles.save_profile(profile)
        origin[0] = anyio.current_time()
        await runner.run(request(0))

    anyio.run(go)
    started = starts["after_fast"] * 1000
    print(
        f"dependant of a 10 ms op (sibling takes 200 ms) started at {started:5.1f} ms (wall) "
        f"= {started / 200:4.2f} of the slow sibling [target: ~10 ms, well below 200 ms]"
    )


Pair = tuple[float, float]
"""CPU time of ``width`` runs in sequence, and of the same runs at once."""


async def concurrency_rounds(
    runner: Runner, stores: InMemoryStores, width: int, rounds: int
) -> dict[str, list[Pair]]:
    """Per round, CPU time of ``width`` runs in sequence and of the same runs at once,
    each run in a task of its own (as a server runs each request), with the garbage
    collector on and off; and the same with an empty coroutine in place of each run:
    the harness (task starts, waiting for each), to subtract."""

    async def one() -> None:
        result = await runner.run(request())
        await stores.runs.delete_run(result.run.run_id)

    async def nothing() -> None:
        pass

    async def then(job: Callable[[], Coroutine[Any, Any, None]], done: anyio.Event) -> None:
        await job()
        done.set()

    async def one_by_one(job: Callable[[], Coroutine[Any, Any, None]]) -> None:
        async with anyio.create_task_group() as tg:
            for _ in range(width):
                done = anyio.Event()
                tg.start_soon(then, job, done)
                await done.wait()

    async def at_once(job: Callable[[], Coroutine[Any, Any, None]]) -> None:
        async with anyio.create_task_group() as tg:
            for _ in range(width):
                tg.start_soon(job)

    async def pair(job: Callable[[], Coroutine[Any, Any, None]]) -> Pair:
        gc.collect()
        t0 = CPU()
        await one_by_one(job)
        elapsed = CPU() - t0
        gc.collect()
        t0 = CPU()
        await at_once(job)
        return elapsed, CPU() - t0

    times: dict[str, list[Pair]] = {"runs": [], "runs, gc off": [], "harness": []}
    for _ in range(width):  # warm-up, not recorded
        await one()
    try:
        for _ in range(rounds):
            times["runs"].append(await pair(one))
            times["harness"].append(await pair(nothing))
            gc.disable()
            times["runs, gc off"].append(await pair(one))
            gc.enable()
    finally:
        gc.enable()
    return times


def concurrency() -> None:
    """100 runs at once (each in its own chat) cost no more CPU than the same in sequence.

    Each run is in a task of its own in both modes, as a server runs each request; the
    harness (starting the tasks, waiting for each in sequence), measured with empty
    coroutines in the same rounds, is subtracted from both sides, so the ratio is the
    runs' own cost of running concurrently (the garbage collector walking the runs in
    flight, memory). The same with the collector off tells how much is the collector's.
    """
    width = 100
    rounds = 5 if QUICK else 15
    runner, stores = build(5)
    times = anyio.run(concurrency_rounds, runner, stores, width, rounds)
    harness = times["harness"]
    seq_harness = statistics.median(seq for seq, _ in harness) / width * 1e6
    conc_harness = statistics.median(conc for _, conc in harness) / width * 1e6
    print(
        f"{width} concurrent runs, harness per run: {seq_harness:.0f} us in sequence, "
        f"{conc_harness:.0f} us at once (task starts; subtracted below)"
    )
    for mode, label in (("runs", ""), ("runs, gc off", ", garbage collector off")):
        engine = [
            (seq - h_seq, conc - h_conc)
            for (seq, conc), (h_seq, h_conc) in zip(times[mode], harness, strict=True)
        ]
        ratios = sorted(seq / conc for seq, conc in engine)
        extra = statistics.median((conc - seq) / width * 1e6 for seq, conc in engine)
        sequential = statistics.median(seq / width * 1e6 for seq, _ in engine)
        target = " [target >= 0.9x]" if mode == "runs" else ""
        print(
            f"{width} concurrent runs vs in sequence (throughput, CPU time{label}): "
            f"{statistics.median(ratios):4.2f}x{target} "
            f"(median of {rounds} rounds, range {ratios[0]:.2f}-{ratios[-1]:.2f}x; "
            f"{sequential:.0f} us per run in sequence, {extra:+.0f} us at once)"
        )


def memory_flat() -> None:
    """Memory over many runs, records pruned and the chat store reset: only engine state
    could grow."""
    runner, stores = build(5)
    total = 2_000 if QUICK else 10_000
    checkpoint = total // 10

    async def go() -> tuple[int, int]:
        first = 0
        for i in range(total):
            result = await runner.run(request(0))
            await stores.runs.delete_run(result.run.run_id)
            stores.chats.__init__()  # type: ignore[misc]  # drop chat history between runs
            if i + 1 == checkpoint:
                gc.collect()
                first = tracemalloc.get_traced_memory()[0]
        gc.collect()
        return first, tracemalloc.get_traced_memory()[0]

    tracemalloc.start()
    first, last = anyio.run(go)
    tracemalloc.stop()
    print(
        f"engine memory (chat reset each run): {first / 1e3:8.1f} kB after {checkpoint} runs, "
        f"{last / 1e3:8.1f} kB after {total} = {last / max(first, 1):4.2f}x [target: flat, ~1.0x]"
    )


if __name__ == "__main__":
    overhead()
    chain_scaling()
    sleeping_hook()
    early_start()
    concurrency()
    memory_flat()
