"""Cancellation: per-operation timeouts, run deadlines, user aborts."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import anyio
import pytest

from _support import A, B, generate, make_runner, op, use_profile
from opsrun.model import (
    FinishReason,
    MainLlmStatus,
    OperationResult,
    OperationStatus,
    RunRequest,
    RunResult,
    RunStatus,
    Trigger,
)
from opsrun.operations import AbortSignal, OperationCatalog, OperationContext
from opsrun.ports import MainLlmDone, MainLlmRequest, ProviderCapabilities
from opsrun.runner import Runner
from opsrun.stores import InMemoryStores
from opsrun.testing import ScriptedMainLlm

pytestmark = pytest.mark.anyio


class Tracker:
    """Counts executions that are in progress; ``finally`` blocks must run before run() ends."""

    def __init__(self) -> None:
        self.active = 0
        self.started = anyio.Event()
        self.cleaned: list[str] = []

    def hanging(self, catalog: OperationCatalog, op_id: str) -> None:
        @catalog.function(op_id, name=op_id.title())
        async def _hang(ctx: OperationContext) -> OperationResult:
            self.active += 1
            try:
                self.started.set()
                await anyio.sleep_forever()
            finally:
                self.active -= 1
                self.cleaned.append(op_id)
            raise AssertionError("unreachable")


def register(catalog: OperationCatalog, op_id: str) -> None:
    @catalog.function(op_id, name=op_id.title())
    async def _fn(ctx: OperationContext) -> OperationResult:
        return OperationResult.done()


async def test_operation_timeout_is_error_timeout(
    runner: Runner, opsrun_catalog: OperationCatalog, opsrun_stores: InMemoryStores
) -> None:
    tracker = Tracker()
    tracker.hanging(opsrun_catalog, "slow")
    register(opsrun_catalog, "child")
    register(opsrun_catalog, "other")
    await use_profile(
        opsrun_stores,
        op("slow", B, timeout_ms=20),
        op("child", B, depends_on=("slow",)),
        op("other", B),
    )
    result = await runner.run(generate())
    assert result.status == RunStatus.DONE
    slow = result.operation("slow")
    assert slow.status == OperationStatus.ERROR
    assert slow.error_code == "timeout"
    assert result.operation("child").skipped_reason == "dependency_failed"
    assert result.operation("other").status == OperationStatus.DONE
    assert tracker.active == 0
    assert tracker.cleaned == ["slow"]


async def test_required_operation_timeout_fails_the_barrier(
    runner: Runner,
    opsrun_catalog: OperationCatalog,
    opsrun_stores: InMemoryStores,
    opsrun_main_llm: ScriptedMainLlm,
) -> None:
    Tracker().hanging(opsrun_catalog, "slow")
    await use_profile(opsrun_stores, op("slow", B, timeout_ms=10, required=True))
    result = await runner.run(generate())
    assert result.status == RunStatus.FAILED
    assert result.run.failed_details is not None
    assert result.run.failed_details.error_code == "timeout"
    assert opsrun_main_llm.requests == []


async def test_deadline_during_operation_aborts_run(
    runner: Runner,
    opsrun_catalog: OperationCatalog,
    opsrun_stores: InMemoryStores,
    opsrun_main_llm: ScriptedMainLlm,
) -> None:
    tracker = Tracker()
    tracker.hanging(opsrun_catalog, "slow")
    register(opsrun_catalog, "after")
    await use_profile(opsrun_stores, op("slow", B), op("after", A))
    result = await runner.run(generate(deadline_ms=30))
    assert result.status == RunStatus.ABORTED
    assert result.run.abort_reason == "deadline"
    assert result.failed_type is None
    assert result.operation("slow").status == OperationStatus.ABORTED
    assert result.operation("after").status.is_terminal
    assert result.operation("after").status != OperationStatus.DONE
    assert opsrun_main_llm.requests == []
    assert result.run.main_llm.started is False
    assert tracker.active == 0


async def test_deadline_during_main_llm(
    runner: Runner, opsrun_catalog: OperationCatalog, opsrun_stores: InMemoryStores
) -> None:
    runner.main_llm = ScriptedMainLlm(["a long reply that never ends"], delay=10)
    register(opsrun_catalog, "after")
    await use_profile(opsrun_stores, op("after", A))
    result = await runner.run(generate(deadline_ms=30))
    assert result.status == RunStatus.ABORTED
    assert result.run.abort_reason == "deadline"
    main = result.run.main_llm
    assert main.started is True
    assert main.status == MainLlmStatus.ABORTED
    assert main.finish_reason == FinishReason.DEADLINE
    assert result.operation("after").status == OperationStatus.ABORTED
    events = await opsrun_stores.runs.events(result.run.run_id)
    finished = [e for e in events if e.type == "main_llm.finished"]
    assert len(finished) == 1
    assert finished[0].finish_reason == FinishReason.DEADLINE


async def _run_and_abort_when_started(
    runner: Runner, tracker: Tracker, abort: AbortSignal
) -> RunResult:
    results: list[RunResult] = []

    async def go() -> None:
        results.append(await runner.run(generate(), abort=abort))

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(go)
            await tracker.started.wait()
            abort.abort()
    return results[0]


async def test_abort_signal_during_operation(
    runner: Runner,
    opsrun_catalog: OperationCatalog,
    opsrun_stores: InMemoryStores,
    opsrun_main_llm: ScriptedMainLlm,
) -> None:
    tracker = Tracker()
    tracker.hanging(opsrun_catalog, "slow")
    tracker.hanging(opsrun_catalog, "slow2")
    register(opsrun_catalog, "child")
    register(opsrun_catalog, "after")
    await use_profile(
        opsrun_stores,
        op("slow", B),
        op("slow2", B, order=2),
        op("child", B, depends_on=("slow",), required=True),
        op("after", A),
    )
    result = await _run_and_abort_when_started(runner, tracker, AbortSignal())
    assert result.status == RunStatus.ABORTED
    assert result.run.abort_reason == "user_abort"
    assert result.operation("slow").status == OperationStatus.ABORTED
    assert result.operation("slow2").status == OperationStatus.ABORTED
    assert result.operation("child").status == OperationStatus.ABORTED
    assert result.operation("after").status == OperationStatus.ABORTED
    assert opsrun_main_llm.requests == []
    assert tracker.active == 0
    assert sorted(tracker.cleaned) == ["slow", "slow2"]
    stored, _ = await opsrun_stores.runs.get_run(result.run.run_id)
    assert stored.status == RunStatus.ABORTED


async def test_runner_abort_by_run_id(
    runner: Runner, opsrun_catalog: OperationCatalog, opsrun_stores: InMemoryStores
) -> None:
    aborted: list[bool] = []

    @opsrun_catalog.function("self_abort", name="Self abort")
    async def _fn(ctx: OperationContext) -> OperationResult:
        aborted.append(runner.abort(ctx.run.run_id))
        assert ctx.aborted
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    await use_profile(opsrun_stores, op("self_abort", B))
    with anyio.fail_after(5):
        result = await runner.run(generate())
    assert aborted == [True]
    assert result.status == RunStatus.ABORTED
    assert result.run.abort_reason == "user_abort"
    assert result.operation("self_abort").status == OperationStatus.ABORTED
    assert runner.abort(result.run.run_id) is False
    assert runner.abort("run_unknown") is False


class HangingMainLlm:
    """Streams one chunk, then waits forever (until cancelled)."""

    capabilities = ProviderCapabilities()

    def __init__(self) -> None:
        self.streaming = anyio.Event()
        self.closed = False
        self.calls = 0

    async def _gen(self) -> AsyncIterator[str | MainLlmDone]:
        try:
            yield "partial "
            self.streaming.set()
            await anyio.sleep_forever()
            yield MainLlmDone(text="never")
        finally:
            self.closed = True

    def stream(self, request: MainLlmRequest) -> AsyncIterator[str | MainLlmDone]:
        self.calls += 1
        return self._gen()


async def test_abort_during_main_llm_stream(
    runner: Runner, opsrun_catalog: OperationCatalog, opsrun_stores: InMemoryStores
) -> None:
    llm = HangingMainLlm()
    runner.main_llm = llm
    register(opsrun_catalog, "before")
    register(opsrun_catalog, "after")
    await use_profile(opsrun_stores, op("before", B), op("after", A, required=True))
    signal = AbortSignal()
    results: list[RunResult] = []

    async def go() -> None:
        results.append(await runner.run(generate(), abort=signal))

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(go)
            await llm.streaming.wait()
            signal.abort()
    (result,) = results
    assert llm.calls == 1
    assert llm.closed
    assert result.status == RunStatus.ABORTED
    assert result.run.abort_reason == "user_abort"
    assert result.failed_type is None
    main = result.run.main_llm
    assert main.status == MainLlmStatus.ABORTED
    assert main.finish_reason == FinishReason.USER_ABORT
    assert main.text == "partial "
    assert result.operation("before").status == OperationStatus.DONE
    assert result.operation("after").status == OperationStatus.ABORTED
    events = await opsrun_stores.runs.events(result.run.run_id)
    assert events[-1].type == "run.finished"
    assert events[-1].status == RunStatus.ABORTED


async def test_signal_aborted_before_the_run(
    runner: Runner,
    opsrun_catalog: OperationCatalog,
    opsrun_stores: InMemoryStores,
    opsrun_main_llm: ScriptedMainLlm,
) -> None:
    ran: list[str] = []

    @opsrun_catalog.function("x", name="X")
    async def _x(ctx: OperationContext) -> OperationResult:
        ran.append("x")
        return OperationResult.done()

    register(opsrun_catalog, "y")
    await use_profile(opsrun_stores, op("x", B), op("y", A))
    signal = AbortSignal()
    signal.abort("user_abort")
    result = await runner.run(generate(), abort=signal)
    assert result.status == RunStatus.ABORTED
    assert ran == []
    assert opsrun_main_llm.requests == []
    assert {r.status for r in result.operation_runs} == {OperationStatus.ABORTED}


async def test_abort_during_after_hook_keeps_the_reply(
    runner: Runner, opsrun_catalog: OperationCatalog, opsrun_stores: InMemoryStores
) -> None:
    tracker = Tracker()
    tracker.hanging(opsrun_catalog, "post")
    await use_profile(opsrun_stores, op("post", A))
    result = await _run_and_abort_when_started(runner, tracker, AbortSignal())
    assert result.status == RunStatus.ABORTED
    assert result.run.main_llm.status == MainLlmStatus.DONE
    assert result.operation("post").status == OperationStatus.ABORTED
    history = await opsrun_stores.chats.history("c", "main")
    assert [m.prompt_text for m in history] == ["hi", "OK"]
    assert tracker.active == 0


@pytest.mark.anyio
async def test_deadline_leaves_the_callers_signal_reusable() -> None:
    """A deadline aborts the run, not the AbortSignal the caller passed in."""
    runner = make_runner(main_llm=ScriptedMainLlm(["slow reply " * 20], chunk_size=4, delay=0.01))
    signal = AbortSignal()
    first = await runner.run(
        RunRequest(trigger="generate", chat_id="c", user_message="hi", deadline_ms=20),
        abort=signal,
    )
    assert first.status == RunStatus.ABORTED
    assert first.run.abort_reason == "deadline"
    assert not signal.aborted
    second = await runner.run(
        RunRequest(trigger="generate", chat_id="c", user_message="again"), abort=signal
    )
    assert second.status == RunStatus.DONE


async def test_retrying_a_turn_aborted_after_its_answer_keeps_one_answer() -> None:
    """The aborted run stored its answer before an after-hook operation was cut off; the
    retry (same user message id) answers the same message again, as a new variant."""
    stores = InMemoryStores()
    catalog = OperationCatalog()
    started = anyio.Event()

    @catalog.function("post", name="Post")
    async def _post(ctx: OperationContext) -> OperationResult:
        if not started.is_set():
            started.set()
            await anyio.sleep_forever()
        return OperationResult.done()

    llm = ScriptedMainLlm(["first answer", "second answer", "next answer"])
    runner = make_runner(stores=stores, catalog=catalog, main_llm=llm)
    await use_profile(stores, op("post", A))
    signal = AbortSignal()

    async def first() -> RunResult:
        return await runner.run(generate("q1", user_message_id="u1"), abort=signal)

    results: list[RunResult] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: _collect(first, results))
        await started.wait()
        signal.abort()
    assert results[0].status == RunStatus.ABORTED

    retry = await runner.run(generate("q1", user_message_id="u1"))
    assert retry.status == RunStatus.DONE
    assert not retry.deduplicated
    await runner.run(generate("q2", user_message_id="u2"))
    history = await stores.chats.history("c", "main")
    assert [(m.role, m.turn_id) for m in history] == [
        ("user", None),
        ("assistant", "u1"),
        ("user", None),
        ("assistant", "u2"),
    ]
    answer = history[1]
    assert [v.content for v in answer.variants] == ["first answer", "second answer"]
    assert answer.selected_variant_id == retry.run.main_llm.assistant_variant_id
    roles = [m.role for m in llm.requests[-1].messages]
    assert roles == ["user", "assistant", "user"]


async def test_retrying_an_aborted_regenerate_keeps_its_variant_id_unique() -> None:
    """A regenerate naming its variant stored its answer, then was aborted in the after
    hook; its retry replaces that variant, so the message holds each id once."""
    stores = InMemoryStores()
    catalog = OperationCatalog()
    cut = anyio.Event()

    @catalog.function("post", name="Post")
    async def _post(ctx: OperationContext) -> OperationResult:
        if ctx.run.trigger == Trigger.REGENERATE and not cut.is_set():
            cut.set()
            await anyio.sleep_forever()
        return OperationResult.done()

    llm = ScriptedMainLlm(["first answer", "cut answer", "retried answer"])
    runner = make_runner(stores=stores, catalog=catalog, main_llm=llm)
    await use_profile(stores, op("post", A))
    await runner.run(generate("q1", user_message_id="u1"))
    regen = RunRequest(
        trigger="regenerate",
        chat_id="c",
        profile_id="p",
        user_message_id="u1",
        assistant_variant_id="v-host",
    )
    signal = AbortSignal()
    results: list[RunResult] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: _collect(lambda: runner.run(regen, abort=signal), results))
        await cut.wait()
        signal.abort()
    assert results[0].status == RunStatus.ABORTED

    retry = await runner.run(regen)
    assert retry.status == RunStatus.DONE
    answer = (await stores.chats.history("c", "main"))[1]
    ids = [v.variant_id for v in answer.variants]
    assert ids.count("v-host") == 1
    assert len(ids) == 2
    assert answer.selected_variant_id == "v-host"
    assert answer.selected.content == "retried answer"
    assert answer.selected.run_id == retry.run.run_id


async def _collect(run: Callable[[], Awaitable[RunResult]], into: list[RunResult]) -> None:
    into.append(await run())
