"""Faults outside the operations: failing stores and executors, BaseExceptions, slow or
broken sinks and stream readers. Every run still ends recorded, and callers get the
error itself."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from _support import generate, make_runner, op, use_profile
from opsrun.errors import RunError, StoreError
from opsrun.model import (
    ArtifactWrite,
    ChatMessage,
    ChatRole,
    FailedType,
    FinishReason,
    MainLlmStatus,
    OperationProfileSessionKey,
    OperationResult,
    OperationStatus,
    Run,
    RunEvent,
    RunStatus,
    UserVariant,
)
from opsrun.operations import Operation, OperationCatalog, OperationContext
from opsrun.ports import ChatStore, MainLlmDone, MainLlmRequest, ProviderCapabilities
from opsrun.runner import InProcessExecutor, Runner
from opsrun.stores import InMemoryStores

pytestmark = pytest.mark.anyio

KEY = OperationProfileSessionKey(
    chat_id="c", branch_id="main", profile_ref="p", operation_profile_session_id="s1"
)


def catalog_of(*op_ids: str) -> OperationCatalog:
    catalog = OperationCatalog()
    for op_id in op_ids:

        @catalog.function(op_id, name=op_id.title())
        async def _done(ctx: OperationContext) -> OperationResult:
            await anyio.lowlevel.checkpoint()
            return OperationResult.done()

    return catalog


async def recorded(stores: InMemoryStores, status: RunStatus) -> Run:
    """The one stored run, checked: it ended ``status``, its operations are terminal and
    its log is gap-free and ends in its one run.finished."""
    (run_id,) = stores.runs.run_ids()
    run, records = await stores.runs.get_run(run_id)
    assert run.status == status
    assert all(r.status.is_terminal for r in records)
    events = await stores.runs.events(run_id)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert [e.type for e in events].count("run.finished") == 1
    assert events[-1].type == "run.finished"
    return run


class RepliesFail:
    """A chat store whose writes of assistant messages fail."""

    def __init__(self, inner: ChatStore) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def save_message(self, message: ChatMessage) -> None:
        if message.role == ChatRole.ASSISTANT:
            raise StoreError("database is locked", code="store_busy")
        await self._inner.save_message(message)


async def test_a_store_failing_mid_run_fails_the_run_and_reaches_the_caller() -> None:
    stores = InMemoryStores()
    runner = make_runner(stores=stores, catalog=catalog_of("a"), chats=RepliesFail(stores.chats))
    await use_profile(stores, op("a"))
    with pytest.raises(StoreError) as info:  # the error itself, not an exception group
        await runner.run(generate())
    assert info.value.code == "store_busy"
    run = await recorded(stores, RunStatus.FAILED)
    assert run.failed_type == FailedType.MAIN_LLM
    assert run.failed_details is not None
    assert run.failed_details.error_code == "store_busy"


class Stop(BaseException):
    """Neither an Exception nor a cancellation."""


async def test_an_operation_raising_a_base_exception_fails_the_run_and_reraises() -> None:
    stores = InMemoryStores()
    catalog = catalog_of("sibling")

    @catalog.function("stop", name="Stop")
    async def _stop(ctx: OperationContext) -> OperationResult:
        await anyio.lowlevel.checkpoint()
        raise Stop("shutting down")

    runner = make_runner(stores=stores, catalog=catalog)
    await use_profile(stores, op("stop"), op("sibling"))
    with pytest.raises(Stop):
        await runner.run(generate())
    run = await recorded(stores, RunStatus.FAILED)
    assert run.failed_type == FailedType.BEFORE_BARRIER
    assert run.failed_details is not None
    assert run.failed_details.error_code == "internal_error"
    assert run.failed_details.error_message == "Stop: shutting down"


class NoSlots(InProcessExecutor):
    """An executor that cannot reach its workers for one operation."""

    def slot(self, operation: Operation[Any]) -> AbstractAsyncContextManager[object]:
        if operation.definition.operation_id == "remote":
            raise ConnectionError("workers unreachable")
        return super().slot(operation)


async def test_an_executor_that_cannot_admit_an_operation_fails_only_that_one() -> None:
    stores = InMemoryStores()
    runner = make_runner(stores=stores, catalog=catalog_of("remote", "local"), executor=NoSlots())
    await use_profile(stores, op("remote"), op("local"))
    result = await runner.run(generate())
    assert result.status == RunStatus.DONE
    remote = result.operation("remote")
    assert remote.status == OperationStatus.ERROR
    assert remote.error is not None
    assert remote.error.code == "executor_error"
    assert "ConnectionError: workers unreachable" in remote.error.message
    assert result.operation("local").status == OperationStatus.DONE


class EndlessMainLlm:
    """Streams a word every millisecond until it is cancelled; says when it ended."""

    capabilities = ProviderCapabilities()

    def __init__(self) -> None:
        self.ended = False
        self.streaming = anyio.Event()
        """Set once three words were streamed."""

    async def _words(self) -> AsyncIterator[str | MainLlmDone]:
        try:
            for count in itertools.count(1):
                yield "word "
                if count == 3:
                    self.streaming.set()
                await anyio.sleep(0.001)
        finally:
            self.ended = True
        raise AssertionError("unreachable")

    def stream(self, request: MainLlmRequest) -> AsyncIterator[str | MainLlmDone]:
        return self._words()


class SlowWhileStreaming:
    """A sink that takes 20 ms per event while the main LLM streams."""

    def __init__(self, llm: EndlessMainLlm) -> None:
        self._llm = llm
        self.events: list[RunEvent] = []

    async def emit(self, event: RunEvent) -> None:
        if not self._llm.ended:
            await anyio.sleep(0.02)
        self.events.append(event)


async def test_a_slow_sink_does_not_hold_back_the_deadline() -> None:
    """Events come faster than the sink takes them; the deadline still ends the run."""
    llm = EndlessMainLlm()
    sink = SlowWhileStreaming(llm)
    stores = InMemoryStores()
    runner = make_runner(stores=stores, main_llm=llm, events=sink)
    await use_profile(stores)
    with anyio.fail_after(30):
        result = await runner.run(generate(deadline_ms=50))
    assert result.status == RunStatus.ABORTED
    assert result.run.abort_reason == "deadline"
    await recorded(stores, RunStatus.ABORTED)
    assert [e.seq for e in sink.events] == list(range(1, len(sink.events) + 1))
    assert sink.events[-1].type == "run.finished"


class Gone(Exception):
    """The client went away."""


async def test_a_stream_readers_own_error_leaves_the_block_as_itself() -> None:
    stores = InMemoryStores()
    runner = make_runner(stores=stores, main_llm=EndlessMainLlm())
    await use_profile(stores)

    async def read() -> None:
        async with runner.stream(generate()) as events:
            async for _ in events:
                raise Gone

    with pytest.raises(Gone):
        await read()
    run = await recorded(stores, RunStatus.ABORTED)  # the reader left: the run is aborted
    assert run.abort_reason == "cancelled"


async def test_a_runs_error_leaves_the_stream_block_as_itself() -> None:
    runner = make_runner()

    async def read() -> None:
        async with runner.stream(generate()) as events:
            async for _ in events:
                pass

    with pytest.raises(RunError) as info:
        await read()
    assert info.value.code == "profile_not_found"


class StrayCancel:
    """A sink whose own code raises a cancellation nobody asked for."""

    async def emit(self, event: RunEvent) -> None:
        if event.seq == 2:
            raise asyncio.CancelledError


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # trio has no stray cancellations
async def test_a_sink_raising_a_stray_cancellation_loses_an_event_not_the_run() -> None:
    stores = InMemoryStores()
    runner: Runner = make_runner(stores=stores, events=StrayCancel())
    await use_profile(stores)
    result = await runner.run(generate())
    assert result.status == RunStatus.DONE
    assert result.run.finished_at is not None
    await recorded(stores, RunStatus.DONE)


async def test_a_run_cancelled_from_outside_while_the_main_llm_streams_records_the_call() -> None:
    llm = EndlessMainLlm()
    stores = InMemoryStores()
    runner = make_runner(stores=stores, main_llm=llm)
    await use_profile(stores)
    async with anyio.create_task_group() as tg:
        tg.start_soon(runner.run, generate())
        await llm.streaming.wait()
        tg.cancel_scope.cancel()
    run = await recorded(stores, RunStatus.ABORTED)
    assert run.abort_reason == "cancelled"
    call = run.main_llm
    assert call.started
    assert call.status == MainLlmStatus.ABORTED
    assert call.finish_reason == FinishReason.USER_ABORT
    assert call.text is not None
    assert call.text.startswith("word word word ")
    assert call.prompt_hash is not None
    assert call.finished_at is not None
    types = [e.type for e in await stores.runs.events(run.run_id)]
    assert types.count("main_llm.started") == types.count("main_llm.finished") == 1


class StrayCancelMainLlm:
    """A main LLM adapter whose own code raises a cancellation midway."""

    capabilities = ProviderCapabilities()

    async def _reply(self) -> AsyncIterator[str | MainLlmDone]:
        yield "hello "
        raise asyncio.CancelledError

    def stream(self, request: MainLlmRequest) -> AsyncIterator[str | MainLlmDone]:
        return self._reply()


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # trio has no stray cancellations
async def test_a_stray_cancellation_from_the_main_llm_is_its_error() -> None:
    stores = InMemoryStores()
    runner = make_runner(stores=stores, main_llm=StrayCancelMainLlm())
    await use_profile(stores)
    result = await runner.run(generate())  # nobody cancelled the caller
    assert result.status == RunStatus.FAILED
    assert result.run.failed_type == FailedType.MAIN_LLM
    assert result.run.main_llm.error is not None
    assert result.run.main_llm.error.code == "main_llm_exception"
    await recorded(stores, RunStatus.FAILED)


class Stalls:
    """A chat store whose first save of a message ``when`` accepts waits for ``release``;
    ``stalled`` is set once it waits."""

    def __init__(self, inner: ChatStore, when: Callable[[ChatMessage], bool]) -> None:
        self._inner = inner
        self._when = when
        self.stalled = anyio.Event()
        self.release = anyio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def save_message(self, message: ChatMessage) -> None:
        if not self.stalled.is_set() and self._when(message):
            self.stalled.set()
            await self.release.wait()
        await self._inner.save_message(message)


async def cancel_when_stalled(runner: Runner, chats: Stalls) -> None:
    """Run a turn and cancel it from outside once ``chats`` stalls, then let it go on."""
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            outer = anyio.CancelScope()

            async def turn() -> None:
                with outer:
                    await runner.run(generate())

            tg.start_soon(turn)
            await chats.stalled.wait()
            outer.cancel()
            chats.release.set()


async def test_an_outside_cancel_mid_commit_applies_the_operations_effects_whole() -> None:
    stores = InMemoryStores()
    catalog = OperationCatalog()

    @catalog.function("rewrite", name="Rewrite", write_tag="seen")
    async def _rewrite(ctx: OperationContext) -> OperationResult:
        await anyio.lowlevel.checkpoint()
        return OperationResult.done(
            artifact=ArtifactWrite(tag="seen", value="hi"), turn=[UserVariant(content="hello")]
        )

    # The user message's second save is the variant, after the artifact is written.
    chats = Stalls(stores.chats, lambda m: m.role == ChatRole.USER and len(m.variants) == 2)
    runner = make_runner(stores=stores, catalog=catalog, chats=chats)
    await use_profile(stores, op("rewrite"))
    await cancel_when_stalled(runner, chats)

    run = await recorded(stores, RunStatus.ABORTED)
    assert run.abort_reason == "cancelled"
    assert (await stores.sessions.get_artifacts(KEY))["seen"].value == "hi"
    (user,) = await stores.chats.history("c", "main")
    assert user.selected.content == "hello"
    _, records = await stores.runs.get_run(run.run_id)
    assert [(r.status, r.committed) for r in records] == [(OperationStatus.DONE, True)]


async def test_an_outside_cancel_while_planning_records_every_operation() -> None:
    stores = InMemoryStores()
    chats = Stalls(stores.chats, lambda m: m.role == ChatRole.USER)
    runner = make_runner(stores=stores, catalog=catalog_of("a", "b"), chats=chats)
    await use_profile(stores, op("a"), op("b", enabled=False))
    await cancel_when_stalled(runner, chats)

    run = await recorded(stores, RunStatus.ABORTED)
    _, records = await stores.runs.get_run(run.run_id)
    assert [(r.operation_id, r.status) for r in records] == [
        ("a", OperationStatus.ABORTED),
        ("b", OperationStatus.SKIPPED),
    ]
    events = await stores.runs.events(run.run_id)
    finished = [e.operation_id for e in events if e.type == "operation.finished"]
    assert sorted(finished) == ["a", "b"]


class CancelAtCall:
    """Chat and session stores that cancel ``scope`` at their ``at``-th call, inside it."""

    def __init__(self, stores: InMemoryStores, at: int) -> None:
        self.at = at
        self.calls = 0
        self.scope: anyio.CancelScope | None = None
        self.chats = self._counting(stores.chats)
        self.sessions = self._counting(stores.sessions)

    def _counting(self, inner: Any) -> Any:
        outer = self

        class Counting:
            def __getattr__(self, name: str) -> Any:
                method = getattr(inner, name)

                async def call(*args: Any, **kwargs: Any) -> Any:
                    outer.calls += 1
                    if outer.calls == outer.at and outer.scope is not None:
                        outer.scope.cancel()
                        await anyio.lowlevel.checkpoint()  # lands here unless shielded
                    return await method(*args, **kwargs)

                return call

        return Counting()


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@given(at=st.integers(1, 16), n_ops=st.integers(1, 3))
def test_a_run_cancelled_at_any_store_call_applies_each_operation_whole_or_not_at_all(
    backend: str, at: int, n_ops: int
) -> None:
    async def scenario() -> None:
        stores = InMemoryStores()
        catalog = OperationCatalog()
        for i in range(n_ops):

            @catalog.function(f"w{i}", name=f"W{i}", write_tag=f"t{i}")
            async def _write(ctx: OperationContext, i: int = i) -> OperationResult:
                await anyio.lowlevel.checkpoint()
                return OperationResult.done(
                    artifact=ctx.write(i), turn=[UserVariant(content=f"v{i}")]
                )

        await use_profile(stores, *(op(f"w{i}", order=i) for i in range(n_ops)))
        faulty = CancelAtCall(stores, at)
        runner = make_runner(
            stores=stores, catalog=catalog, chats=faulty.chats, sessions=faulty.sessions
        )
        with anyio.fail_after(10):
            with anyio.CancelScope() as scope:
                faulty.scope = scope
                await runner.run(generate(user_message_id="m1"))
            faulty.scope = None
        artifacts = await stores.sessions.get_artifacts(KEY)
        if not stores.runs.run_ids():  # cancelled before the run was claimed
            assert artifacts == {}
            return
        (run_id,) = stores.runs.run_ids()
        run, records = await stores.runs.get_run(run_id)
        assert run.status in (RunStatus.DONE, RunStatus.ABORTED)
        artifacts = await stores.sessions.get_artifacts(KEY)
        variants = {v.content for m in await stores.chats.history("c", "main") for v in m.variants}
        committed = {r.operation_id for r in records if r.committed}
        for i in range(n_ops):
            written = f"t{i}" in artifacts
            assert written == (f"v{i}" in variants) == (f"w{i}" in committed)

    anyio.run(scenario, backend=backend)
