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
    RunStatus,
    Trigger,
)
from opsrun.operations import OperationCatalog, OperationContext, SyncOperation
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
