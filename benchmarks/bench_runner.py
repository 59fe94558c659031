"""Run-engine benchmarks; every figure is a ratio against a baseline measured in this run.

    python benchmarks/bench_runner.py [--quick]

1. Orchestration overhead per operation for 50 no-op operations (all parallel, and
   a 50-long chain), against a bare anyio task group running the very same operation
   coroutines (each returns ``OperationResult.done()``).
2. A hook of 20 operations that each sleep 50 ms, with default settings.
3. An operation whose dependency finished early starts at once, not when a slower
   unrelated sibling finishes.
4. Memory after 10,000 sequential runs with run records pruned.
"""

from __future__ import annotations

import gc
import statistics
import sys
import time
import tracemalloc
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio

from opsrun.model import (
    Hook,
    OperationConfig,
    OperationProfile,
    OperationResult,
    ProfileOperation,
    RunRequest,
)
from opsrun.ports import MainLlmDone, MainLlmRequest
from opsrun.runner import OperationCatalog, OperationContext, Runner
from opsrun.stores import InMemoryStores
from opsrun.testing import ScriptedMainLlm


class QuietMainLlm:
    """Answers "OK" and keeps no request log (ScriptedMainLlm records every request)."""

    supports_developer_role = False

    async def _reply(self) -> AsyncIterator[str | MainLlmDone]:
        yield "OK"
        yield MainLlmDone(text="OK")

    def stream(self, request: MainLlmRequest) -> AsyncIterator[str | MainLlmDone]:
        return self._reply()


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
    runner = Runner(
        catalog=catalog,
        profiles=stores.profiles,
        sessions=stores.sessions,
        chats=stores.chats,
        runs=stores.runs,
        main_llm=QuietMainLlm(),
    )
    return runner, stores


def request(i: int) -> RunRequest:
    return RunRequest(trigger="generate", chat_id=f"c{i}", profile_id="bench", user_message="hi")


async def time_runs(runner: Runner, stores: InMemoryStores, repeats: int) -> float:
    """Median seconds per run; each run's records are pruned right after."""
    samples = []
    for i in range(repeats):
        t0 = time.perf_counter()
        result = await runner.run(request(i))
        samples.append(time.perf_counter() - t0)
        await stores.runs.delete_run(result.run.run_id)
    return statistics.median(samples)


async def bare_task_group(runner: Runner, repeats: int) -> float:
    """A bare task group running the very same operation coroutines, once each."""
    operations = [runner.catalog.implementation(op_id) for op_id in runner.catalog]
    ctx: Any = None  # the benchmark operations do not read their context
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for operation in operations:
                tg.start_soon(operation.execute, ctx)
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


async def bare_chain(runner: Runner, repeats: int) -> float:
    """The same coroutines awaited one after another, each in its own task."""
    operations = [runner.catalog.implementation(op_id) for op_id in runner.catalog]
    ctx: Any = None
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for operation in operations:
            async with anyio.create_task_group() as tg:
                tg.start_soon(operation.execute, ctx)
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def overhead() -> None:
    n, repeats = 50, 20 if QUICK else 100
    empty_runner, empty_stores = build(0)
    base = anyio.run(time_runs, empty_runner, empty_stores, repeats)
    for label, chain, bare in (
        ("parallel", False, bare_task_group),
        ("chain", True, bare_chain),
    ):
        runner, stores = build(n, chain=chain)
        per_run = anyio.run(time_runs, runner, stores, repeats)
        per_op = (per_run - base) / n
        bare_per_op = anyio.run(bare, runner, repeats) / n
        print(
            f"overhead/{label:8s}: {per_op * 1e6:7.1f} µs per operation "
            f"(bare anyio task: {bare_per_op * 1e6:5.1f} µs) ratio {per_op / bare_per_op:5.2f}x "
            f"[target <= 3x]; empty run {base * 1e6:.0f} µs"
        )


def sleeping_hook() -> None:
    async def sleep50(ctx: OperationContext) -> None:
        await anyio.sleep(0.05)

    runner, stores = build(20, body=sleep50)
    empty_runner, empty_stores = build(0)
    repeats = 5 if QUICK else 10
    base = anyio.run(time_runs, empty_runner, empty_stores, repeats)
    total = anyio.run(time_runs, runner, stores, repeats)
    hook = total - base
    print(
        f"20 x sleep(50 ms) hook: {hook * 1000:6.1f} ms = {hook / 0.05:4.2f}x of 50 ms "
        "[target <= 1.2x]"
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
    runner = Runner(
        catalog=catalog,
        profiles=stores.profiles,
        sessions=stores.sessions,
        chats=stores.chats,
        runs=stores.runs,
        main_llm=ScriptedMainLlm(),
    )

    async def go() -> None:
        await stores.profiles.save_profile(profile)
        origin[0] = anyio.current_time()
        await runner.run(request(0))

    anyio.run(go)
    started = starts["after_fast"] * 1000
    print(
        f"dependant of a 10 ms op (sibling takes 200 ms) started at {started:5.1f} ms "
        f"= {started / 200:4.2f} of the slow sibling [target: ~10 ms, well below 200 ms]"
    )


def memory_flat() -> None:
    """Same as memory(), but the chat store is reset so only engine state could leak."""
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
    sleeping_hook()
    early_start()
    memory_flat()
