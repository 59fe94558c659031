"""Executors: worker threads for sync operations, concurrency limits, parallel hooks."""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from _support import make_runner
from opsrun.errors import ConfigError
from opsrun.model import (
    Hook,
    OperationConfig,
    OperationDefinition,
    OperationProfile,
    OperationResult,
    OperationStatus,
    ProfileOperation,
    RunRequest,
    RunResult,
    RunStatus,
    Trigger,
)
from opsrun.operations import AbortSignal, OperationCatalog, OperationContext, SyncOperation
from opsrun.runner import InProcessExecutor, ThreadExecutor
from opsrun.stores import InMemoryStores

B = Hook.BEFORE_MAIN_LLM
pytestmark = pytest.mark.anyio


async def profile_of(stores: InMemoryStores, *op_ids: str, **config: Any) -> None:
    await stores.profiles.save_profile(
        OperationProfile(
            profile_id="p",
            name="P",
            operation_profile_session_id="s1",
            operations=tuple(
                ProfileOperation(
                    operation_id=i, config=OperationConfig(hooks=(B,), order=1, **config)
                )
                for i in op_ids
            ),
        )
    )


GENERATE = RunRequest(trigger=Trigger.GENERATE, chat_id="c", profile_id="p", user_message="hi")


class Blocking(SyncOperation):
    definition = OperationDefinition(operation_id="blocking", name="Blocking", kind="compute")

    def __init__(self) -> None:
        self.threads: list[int] = []

    def run_sync(self, ctx: OperationContext) -> OperationResult:
        self.threads.append(threading.get_ident())
        return OperationResult.done(outputs_summary={"sum": sum(range(1000))})


async def test_thread_executor_runs_sync_operations_in_a_worker_thread() -> None:
    blocking = Blocking()
    catalog = OperationCatalog([blocking])
    loop_threads: list[int] = []

    @catalog.function("async_one", name="Async")
    async def _async(ctx: OperationContext) -> OperationResult:
        loop_threads.append(threading.get_ident())
        return OperationResult.done()

    stores = InMemoryStores()
    await profile_of(stores, "blocking", "async_one")
    runner = make_runner(stores=stores, catalog=catalog, executor=ThreadExecutor(max_threads=2))
    result = await runner.run(GENERATE)
    assert result.status == RunStatus.DONE
    assert result.operation("blocking").outputs_summary == {"sum": 499500}
    assert loop_threads == [threading.get_ident()]
    assert len(blocking.threads) == 1
    assert blocking.threads[0] != threading.get_ident()


async def test_thread_executor_timeout_waits_for_the_thread() -> None:
    class Slow(SyncOperation):
        definition = OperationDefinition(operation_id="slow", name="Slow", kind="compute")
        finished = threading.Event()

        def run_sync(self, ctx: OperationContext) -> OperationResult:
            threading.Event().wait(0.05)
            self.finished.set()
            return OperationResult.done()

    slow = Slow()
    stores = InMemoryStores()
    await profile_of(stores, "slow", timeout_ms=5)
    runner = make_runner(stores=stores, catalog=OperationCatalog([slow]), executor=ThreadExecutor())
    result = await runner.run(GENERATE)
    assert slow.finished.is_set()  # nothing outlives run()
    assert result.operation("slow").error_code == "timeout"


@pytest.mark.parametrize(
    ("build", "field", "name", "given"),
    [
        (lambda: InProcessExecutor(limit=0), "limit", "InProcessExecutor.limit", "0"),
        (lambda: InProcessExecutor(limit=True), "limit", "InProcessExecutor.limit", "True"),
        (lambda: ThreadExecutor(max_threads=0), "max_threads", "ThreadExecutor.max_threads", "0"),
        (lambda: ThreadExecutor(limit=0), "limit", "ThreadExecutor.limit", "0"),
    ],
    ids=["in-process-limit", "in-process-bool", "max-threads", "thread-limit"],
)
def test_executor_limits_are_validated(
    build: Callable[[], object], field: str, name: str, given: str
) -> None:
    with pytest.raises(ConfigError) as info:
        build()
    assert info.value.code == "config_error"
    assert info.value.details["field"] == field
    # The message names the class the caller built and the value it gave.
    assert str(info.value).endswith(f"{name} must be an integer >= 1, got {given}")


def test_executor_options_are_keyword_only() -> None:
    with pytest.raises(TypeError):
        InProcessExecutor(1)  # type: ignore[call-arg]  # positional on purpose: keyword-only
    with pytest.raises(TypeError):
        ThreadExecutor(2)  # type: ignore[call-arg]  # positional on purpose: keyword-only


async def test_in_process_limit_one_serialises() -> None:
    catalog = OperationCatalog()
    active = 0
    peak = 0
    ran: list[str] = []
    ids = [f"op{i}" for i in range(5)]
    for op_id in ids:

        @catalog.function(op_id, name=op_id)
        async def _fn(ctx: OperationContext) -> OperationResult:
            nonlocal active, peak
            active += 1
            peak = max(peak, active)
            for _ in range(5):
                await anyio.lowlevel.checkpoint()
            ran.append(ctx.operation_id)
            active -= 1
            return OperationResult.done()

    stores = InMemoryStores()
    await profile_of(stores, *ids)
    result = await make_runner(
        stores=stores, catalog=catalog, executor=InProcessExecutor(limit=1)
    ).run(GENERATE)
    assert result.status == RunStatus.DONE
    assert peak == 1
    assert sorted(ran) == ids


async def test_default_executor_runs_a_hook_concurrently() -> None:
    catalog = OperationCatalog()
    n = 20
    started = 0
    finished = 0
    finished_before_all_started: list[bool] = []
    everyone_in = anyio.Event()
    ids = [f"op{i:02d}" for i in range(n)]
    for op_id in ids:

        @catalog.function(op_id, name=op_id)
        async def _fn(ctx: OperationContext) -> OperationResult:
            nonlocal started, finished
            started += 1
            if started == n:
                everyone_in.set()
            await everyone_in.wait()
            finished_before_all_started.append(started < n)
            finished += 1
            return OperationResult.done()

    stores = InMemoryStores()
    await profile_of(stores, *ids)
    with anyio.fail_after(5):
        result = await make_runner(stores=stores, catalog=catalog).run(GENERATE)
    assert result.status == RunStatus.DONE
    assert finished == n
    assert finished_before_all_started == [False] * n
    assert {r.status for r in result.operation_runs} == {OperationStatus.DONE}


async def test_custom_executor_sees_every_execution() -> None:
    class Recording:
        def __init__(self) -> None:
            self.seen: list[str] = []
            self.inner = InProcessExecutor()

        def slot(self, operation: Any) -> AbstractAsyncContextManager[object]:
            return self.inner.slot(operation)

        async def execute(self, operation: Any, ctx: OperationContext) -> OperationResult:
            self.seen.append(ctx.definition.operation_id)
            result: OperationResult = await self.inner.execute(operation, ctx)
            return result

    catalog = OperationCatalog()

    @catalog.function("a", name="A")
    async def _a(ctx: OperationContext) -> OperationResult:
        return OperationResult.done()

    stores = InMemoryStores()
    await profile_of(stores, "a")
    executor = Recording()
    await make_runner(stores=stores, catalog=catalog, executor=executor).run(GENERATE)
    assert executor.seen == ["a"]


class _Fatal(BaseException):
    """What no operation may raise: it fails the run."""


@pytest.mark.parametrize("fatal_first", [False, True], ids=["fatal-spawned", "fatal-driven"])
async def test_a_fatal_error_in_any_operation_stops_its_running_siblings(
    fatal_first: bool,
) -> None:
    catalog = OperationCatalog()
    never = anyio.Event()

    @catalog.function("waits", name="Waits")
    async def _waits(ctx: OperationContext) -> OperationResult:
        await never.wait()  # only a cancellation ends it
        return OperationResult.done()

    @catalog.function("fatal", name="Fatal")
    async def _fatal(ctx: OperationContext) -> OperationResult:
        await anyio.lowlevel.checkpoint()
        raise _Fatal("fatal")

    stores = InMemoryStores()
    first, second = ("fatal", "waits") if fatal_first else ("waits", "fatal")
    await stores.profiles.save_profile(
        OperationProfile(
            profile_id="p",
            name="P",
            operation_profile_session_id="s1",
            operations=(
                ProfileOperation(operation_id=first, config=OperationConfig(hooks=(B,), order=1)),
                ProfileOperation(operation_id=second, config=OperationConfig(hooks=(B,), order=2)),
            ),
        )
    )
    runner = make_runner(stores=stores, catalog=catalog)
    with anyio.fail_after(30), pytest.raises(_Fatal):  # not forever: the waiter is stopped
        await runner.run(GENERATE)
    (run,) = (await stores.runs.list_runs("c")).items
    result = await runner.result(run.run_id)
    assert result.status == RunStatus.FAILED
    assert result.operation("waits").status == OperationStatus.ABORTED


class Gated(SyncOperation):
    """A thread that says it started, then waits to be let go, then answers or raises."""

    definition = OperationDefinition(operation_id="gated", name="Gated", kind="compute")

    def __init__(self, *, raises: bool = False) -> None:
        self.started = threading.Event()
        self.go = threading.Event()
        self.raises = raises

    def run_sync(self, ctx: OperationContext) -> OperationResult:
        self.started.set()
        self.go.wait(30)
        if self.raises:
            raise RuntimeError("late")
        return OperationResult.done()


@pytest.mark.parametrize("executor", [InProcessExecutor, ThreadExecutor])
async def test_a_thread_operation_the_run_aborted_is_recorded_aborted(
    executor: Callable[[], Any],
) -> None:
    gated = Gated()
    stores = InMemoryStores()
    await profile_of(stores, "gated")
    runner = make_runner(stores=stores, catalog=OperationCatalog([gated]), executor=executor())
    signal = AbortSignal()
    results: list[RunResult] = []

    async def run() -> None:
        results.append(await runner.run(GENERATE, abort=signal))

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await anyio.to_thread.run_sync(gated.started.wait, 30)
        signal.abort()
        await anyio.sleep(0.01)  # the abort is in before the thread answers
        gated.go.set()
    (result,) = results
    assert result.status == RunStatus.ABORTED
    assert result.operation("gated").status == OperationStatus.ABORTED


@pytest.mark.parametrize("raises", [False, True], ids=["answers", "raises"])
async def test_a_thread_operation_past_its_timeout_is_a_timeout_however_it_ends(
    raises: bool,
) -> None:
    stores = InMemoryStores()
    await profile_of(stores, "gated", timeout_ms=1)

    class Slow(Gated):
        def run_sync(self, ctx: OperationContext) -> OperationResult:
            threading.Event().wait(0.05)  # longer than its timeout, then as Gated
            return super().run_sync(ctx)

    slow = Slow(raises=raises)
    slow.go.set()
    runner = make_runner(stores=stores, catalog=OperationCatalog([slow]))
    result = await runner.run(GENERATE)
    assert result.operation("gated").error_code == "timeout"


@pytest.mark.parametrize("executor", [InProcessExecutor, ThreadExecutor])
async def test_a_thread_operation_sees_its_own_timeout(executor: Callable[[], Any]) -> None:
    """``remaining()`` and ``aborted`` work from the worker thread, on both backends'
    clocks, so blocking work can stop at its timeout instead of running on."""
    seen: list[tuple[float | None, bool]] = []

    class Polling(SyncOperation):
        definition = OperationDefinition(operation_id="polling", name="Polling", kind="compute")

        def run_sync(self, ctx: OperationContext) -> OperationResult:
            seen.append((ctx.remaining(), ctx.aborted))
            gave_up = threading.Event()
            while not ctx.aborted and not gave_up.wait(0.005):  # polls, as documented
                pass
            seen.append((ctx.remaining(), ctx.aborted))
            return OperationResult.done()

    stores = InMemoryStores()
    await profile_of(stores, "polling", timeout_ms=100)
    catalog = OperationCatalog([Polling()])
    runner = make_runner(stores=stores, catalog=catalog, executor=executor())
    with anyio.fail_after(30):
        result = await runner.run(GENERATE)
    assert result.operation("polling").error_code == "timeout"
    (first, _), (last, last_aborted) = seen
    assert first is not None
    assert 0.0 <= first <= 0.1  # 0.0 when a loaded machine started the thread late
    assert (last, last_aborted) == (0.0, True)


def test_one_thread_executor_serves_event_loops_of_both_backends_in_turn() -> None:
    blocking = Blocking()
    stores = InMemoryStores()
    runner = make_runner(
        stores=stores, catalog=OperationCatalog([blocking]), executor=ThreadExecutor()
    )

    async def turn(chat: str) -> OperationStatus:
        await profile_of(stores, "blocking")
        request = GENERATE.model_copy(update={"chat_id": chat})
        return (await runner.run(request)).operation("blocking").status

    statuses = [anyio.run(turn, f"c-{backend}", backend=backend) for backend in ("asyncio", "trio")]
    assert statuses == [OperationStatus.DONE, OperationStatus.DONE]
    assert len(blocking.threads) == 2
