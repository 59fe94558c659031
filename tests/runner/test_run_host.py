"""What a real host does to a run: cancel it from outside, raise stray cancellations."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial

import anyio
import anyio.abc
import pytest
from hypothesis import given
from hypothesis import strategies as st

from _support import A, B, generate, make_runner, op, use_profile
from opsrun.errors import ConfigError, ProviderError, RunError, StoreError
from opsrun.kinds import builtin_kinds
from opsrun.model import (
    ChatMessage,
    ChatRole,
    FailedType,
    FinishReason,
    MainLlmStatus,
    MessageVariant,
    OperationDefinition,
    OperationResult,
    OperationStatus,
    Run,
    RunEvent,
    RunRequest,
    RunResult,
    RunStatus,
    SkippedReason,
    Trigger,
)
from opsrun.operations import OperationCatalog, OperationContext, SyncOperation
from opsrun.ports import MainLlmDone
from opsrun.runner import Executor, InProcessExecutor, Runner, SystemClock, ThreadExecutor
from opsrun.runner._runner import _already_turns, _answered, _TurnsSeen
from opsrun.stores import InMemoryStores
from opsrun.testing import ScriptedMainLlm

BACKENDS = ["asyncio", "trio"]


class CancelAt:
    """An event sink that cancels the caller's scope when event ``seq`` arrives."""

    def __init__(self, seq: int) -> None:
        self.seq = seq
        self.scope: anyio.CancelScope | None = None
        self.seen: list[RunEvent] = []

    async def emit(self, event: RunEvent) -> None:
        self.seen.append(event)
        if event.seq == self.seq and self.scope is not None:
            self.scope.cancel()


async def _stored(runner: Runner, run_id: str) -> tuple[RunStatus, list[RunEvent]]:
    result = await runner.result(run_id)
    assert all(r.status.is_terminal for r in result.operation_runs)
    return result.run.status, await runner.runs.events(run_id)


def _check_events(events: list[RunEvent]) -> None:
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert [e.type for e in events].count("run.finished") == 1
    assert events[-1].type == "run.finished"


def _catalog(n_ops: int, hang_first: set[str]) -> OperationCatalog:
    catalog = OperationCatalog()
    for i in range(n_ops):
        op_id = f"op{i}"

        @catalog.function(op_id, name=op_id)
        async def _fn(ctx: OperationContext, op_id: str = op_id) -> OperationResult:
            await anyio.lowlevel.checkpoint()
            if op_id in hang_first:
                hang_first.discard(op_id)
                await anyio.sleep_forever()
            return OperationResult.done()

    return catalog


@pytest.mark.parametrize("backend", BACKENDS)
@given(at=st.integers(1, 30), n_ops=st.integers(0, 4))
def test_a_run_cancelled_at_any_event_is_recorded_and_its_turn_can_be_retried(
    backend: str, at: int, n_ops: int
) -> None:
    async def scenario() -> None:
        stores = InMemoryStores()
        await use_profile(stores, *(op(f"op{i}", B, order=i) for i in range(n_ops)))
        sink = CancelAt(at)
        runner = make_runner(
            stores=stores,
            catalog=_catalog(n_ops, set()),
            main_llm=ScriptedMainLlm(default="a reply in chunks", chunk_size=3),
            events=sink,
        )
        with anyio.fail_after(10):
            with anyio.CancelScope() as scope:
                sink.scope = scope
                await runner.run(generate(user_message_id="m1"))
            (run_id,) = stores.runs.run_ids()
            status, events = await _stored(runner, run_id)
            _check_events(events)
            assert [e.seq for e in sink.seen] == [e.seq for e in events]
            if scope.cancelled_caught and status != RunStatus.DONE:
                assert status == RunStatus.ABORTED
                assert (await runner.result(run_id)).run.abort_reason == "cancelled"
            sink.scope = None
            retry = await runner.run(generate(user_message_id="m1"))
        assert retry.status == RunStatus.DONE
        assert retry.deduplicated == (status == RunStatus.DONE)
        roles = [m.role for m in await stores.chats.history("c", "main")]
        assert roles == [ChatRole.USER, ChatRole.ASSISTANT]

    anyio.run(scenario, backend=backend)


@pytest.mark.anyio
async def test_cancelled_while_an_operation_runs_ends_it_aborted() -> None:
    stores = InMemoryStores()
    await use_profile(stores, op("op0", B), op("op1", B, order=2))
    runner = make_runner(stores=stores, catalog=_catalog(2, {"op0"}))
    with anyio.move_on_after(0.05) as scope:
        await runner.run(generate(user_message_id="m1"))
    assert scope.cancelled_caught
    (run_id,) = stores.runs.run_ids()
    result = await runner.result(run_id)
    assert result.run.status == RunStatus.ABORTED
    assert result.run.abort_reason == "cancelled"
    assert result.operation("op0").status == OperationStatus.ABORTED
    assert result.operation("op1").status == OperationStatus.DONE
    _check_events(await stores.runs.events(run_id))
    retry = await runner.run(generate(user_message_id="m1"))
    assert (retry.status, retry.deduplicated) == (RunStatus.DONE, False)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.anyio
async def test_a_stray_cancellation_inside_an_operation_is_its_error() -> None:
    catalog = OperationCatalog()

    @catalog.function("stray", name="Stray")
    async def stray(ctx: OperationContext) -> OperationResult:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        future.cancel()
        await future  # raises CancelledError that no cancel scope asked for
        return OperationResult.done()

    @catalog.function("sibling", name="Sibling", write_tag="note")
    async def sibling(ctx: OperationContext) -> OperationResult:
        await anyio.sleep(0.01)
        return OperationResult.done(artifact=ctx.write("kept", persisted=False))

    stores = InMemoryStores()
    await use_profile(stores, op("stray", B), op("sibling", B, order=2))
    result = await make_runner(stores=stores, catalog=catalog).run(generate())
    assert result.status == RunStatus.DONE
    stray_run = result.operation("stray")
    assert (stray_run.status, stray_run.error_code) == (
        OperationStatus.ERROR,
        "operation_cancelled",
    )
    assert result.operation("sibling").status == OperationStatus.DONE
    assert [e.tag for e in result.run.applied_effects] == ["note"]


class Quick(SyncOperation):
    definition = OperationDefinition(operation_id="quick", name="Quick", kind="compute")

    def run_sync(self, ctx: OperationContext) -> OperationResult:
        return OperationResult.done()


class StartTimes:
    """An event sink noting when each ``operation.started`` arrives."""

    def __init__(self) -> None:
        self.started: dict[str, float] = {}

    async def emit(self, event: RunEvent) -> None:
        if event.type == "operation.started":
            self.started[event.operation_id] = anyio.current_time()


@pytest.mark.parametrize(
    ("sync", "executor"),
    [(False, lambda: InProcessExecutor(limit=1)), (True, lambda: ThreadExecutor(max_threads=1))],
    ids=["in-process", "threads"],
)
@pytest.mark.anyio
async def test_time_queued_for_an_executor_slot_does_not_count_against_the_timeout(
    sync: bool, executor: Callable[[], Executor]
) -> None:
    catalog = OperationCatalog()
    if sync:
        operation = catalog.add(Quick())
    else:

        @catalog.function("quick", name="Quick")
        async def quick(ctx: OperationContext) -> OperationResult:
            return OperationResult.done()

        operation = catalog.implementation("quick")
    stores = InMemoryStores()
    await use_profile(stores, op("quick", B, timeout_ms=200))
    sink = StartTimes()
    runs_on = executor()
    runner = make_runner(stores=stores, catalog=catalog, executor=runs_on, events=sink)
    released = 0.0

    async def hold_the_only_slot(task_status: anyio.abc.TaskStatus[None]) -> None:
        nonlocal released
        async with runs_on.slot(operation):
            task_status.started()
            await anyio.sleep(0.4)
            released = anyio.current_time()

    async with anyio.create_task_group() as tg:
        await tg.start(hold_the_only_slot)
        result = await runner.run(generate())
    assert result.operation("quick").status == OperationStatus.DONE
    assert sink.started["quick"] >= released > 0


@pytest.mark.anyio
async def test_turns_on_one_branch_run_one_after_another() -> None:
    stores = InMemoryStores()
    await use_profile(stores)
    main_llm = ScriptedMainLlm(default="an answer", delay=0.001, chunk_size=2)
    runner = make_runner(stores=stores, main_llm=main_llm)
    results: list[RunResult] = []

    async def turn(text: str) -> None:
        results.append(await runner.run(generate(text)))

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            for text in ("one", "two", "three"):
                tg.start_soon(turn, text)
    assert {r.status for r in results} == {RunStatus.DONE}
    history = await stores.chats.history("c", "main")
    assert [m.role for m in history] == [ChatRole.USER, ChatRole.ASSISTANT] * 3
    # each turn's prompt held every earlier turn, answered
    sent = [len(request.messages) for request in main_llm.requests]
    assert sent == [1, 3, 5]


@pytest.mark.anyio
async def test_a_runner_may_refuse_a_turn_while_its_branch_is_busy() -> None:
    inside, release = anyio.Event(), anyio.Event()
    catalog = OperationCatalog()

    @catalog.function("hold", name="Hold")
    async def hold(ctx: OperationContext) -> OperationResult:
        if ctx.run.branch_id == "main":
            inside.set()
            await release.wait()
        return OperationResult.done()

    stores = InMemoryStores()
    await use_profile(stores, op("hold", B))
    refusing = make_runner(stores=stores, catalog=catalog, concurrent_turns="refuse")
    with anyio.fail_after(10):
        await _refused_while_busy(stores, catalog, refusing, inside, release)
    after = await refusing.run(generate("third"))
    assert after.status == RunStatus.DONE


async def _refused_while_busy(
    stores: InMemoryStores,
    catalog: OperationCatalog,
    refusing: Runner,
    inside: anyio.Event,
    release: anyio.Event,
) -> None:
    async with anyio.create_task_group() as tg:
        waiting = make_runner(stores=stores, catalog=catalog, ids=refusing.ids)
        tg.start_soon(waiting.run, generate("first"))
        await inside.wait()
        with pytest.raises(StoreError) as refused:
            await refusing.run(generate("second"))
        assert refused.value.code == "branch_busy"
        other_branch = await refusing.run(generate("elsewhere", branch_id="b2"))
        assert other_branch.status == RunStatus.DONE
        release.set()


def test_concurrent_turns_must_be_wait_or_refuse() -> None:
    with pytest.raises(ConfigError) as error:
        make_runner(concurrent_turns="maybe")  # type: ignore[arg-type]  # a wrong value on purpose
    assert error.value.details["field"] == "concurrent_turns"


@pytest.mark.anyio
async def test_a_failed_turn_stays_in_the_chat_but_not_in_later_prompts() -> None:
    stores = InMemoryStores()
    await use_profile(stores)
    main_llm = ScriptedMainLlm([ProviderError("down"), "second answer"])
    runner = make_runner(stores=stores, main_llm=main_llm)
    failed = await runner.run(generate("first", user_message_id="u1"))
    assert failed.status == RunStatus.FAILED
    second = await runner.run(generate("second", user_message_id="u2"))
    assert second.status == RunStatus.DONE
    assert [m.content for m in main_llm.requests[1].messages] == ["second"]
    history = await stores.chats.history("c", "main")
    assert [m.message_id for m in history if m.role == ChatRole.USER] == ["u1", "u2"]


@pytest.mark.anyio
async def test_regenerating_a_failed_turn_answers_it() -> None:
    stores = InMemoryStores()
    await use_profile(stores)
    main_llm = ScriptedMainLlm([ProviderError("down"), "first answer", "second answer"])
    runner = make_runner(stores=stores, main_llm=main_llm)
    await runner.run(generate("first", user_message_id="u1"))
    retried = await runner.run(
        RunRequest(trigger="regenerate", chat_id="c", profile_id="p", user_message_id="u1")
    )
    assert retried.status == RunStatus.DONE
    await runner.run(generate("second", user_message_id="u2"))
    sent = [m.content for m in main_llm.requests[2].messages]
    assert sent == ["first", "first answer", "second"]


def test_a_history_the_host_wrote_without_turn_ids_keeps_its_answered_turns() -> None:
    def message(i: int, role: ChatRole) -> ChatMessage:
        variant = MessageVariant(variant_id=f"v{i}", content=f"m{i}", source="host")
        return ChatMessage(
            message_id=f"m{i}",
            chat_id="c",
            branch_id="main",
            role=role,
            variants=(variant,),
            selected_variant_id=f"v{i}",
        )

    user, assistant = ChatRole.USER, ChatRole.ASSISTANT
    history = [message(1, user), message(2, assistant), message(3, user), message(4, user)]
    kept = _answered(history, "m4")
    assert [m.message_id for m in kept] == ["m1", "m2", "m4"]


def _chat(*spec: str) -> list[ChatMessage]:
    """Messages from ``"u1"`` (user message 1) and ``"a1"`` (an answer to user message 1)."""
    messages = []
    for i, item in enumerate(spec):
        role = ChatRole.USER if item[0] == "u" else ChatRole.ASSISTANT
        turn = None if role == ChatRole.USER else f"u{item[1:]}"
        messages.append(
            ChatMessage(
                message_id=item if role == ChatRole.USER else f"{item}-{i}",
                chat_id="c",
                branch_id="main",
                role=role,
                turn_id=turn,
                variants=(MessageVariant(variant_id="v", content=item),),
                selected_variant_id="v",
            )
        )
    return messages


def test_an_answer_stored_after_later_turns_is_placed_after_its_own_turn() -> None:
    # u1's run died; u2 and u3 were answered; a retry took u1 over and answered it last.
    history = _chat("u1", "u2", "a2", "u3", "a3", "a1", "u4", "u5")
    kept = [m.prompt_text for m in _answered(history, "u5")]
    assert kept == ["u1", "a1", "u2", "a2", "u3", "a3", "u5"]  # u4 is unanswered


@given(st.permutations(range(6)), st.sets(st.integers(0, 5)))
def test_turns_read_by_the_runner_always_alternate(order: list[int], unanswered: set[int]) -> None:
    # Answers arrive in any order after their questions; some questions get none.
    spec = [f"u{i}" for i in range(6)]
    for i in order:
        if i not in unanswered:
            position = max(spec.index(f"u{i}") + 1, len(spec) - 2)
            spec.insert(position, f"a{i}")
    spec.append("u9")
    kept = _answered(_chat(*spec), "u9")
    roles = [m.role for m in kept]
    assert roles == [ChatRole.USER, ChatRole.ASSISTANT] * (len(kept) // 2) + [ChatRole.USER]
    for question, answer in zip(kept[:-1:2], kept[1::2], strict=True):
        assert answer.turn_id == question.message_id
    assert len(kept) == 2 * (6 - len(unanswered)) + 1


@pytest.mark.anyio
async def test_after_the_reply_operations_know_its_message_and_variant() -> None:
    seen: list[tuple[str | None, str | None]] = []
    catalog = OperationCatalog()

    @catalog.function("after", name="After")
    async def after(ctx: OperationContext) -> OperationResult:
        seen.append((ctx.run.assistant_message_id, ctx.run.assistant_variant_id))
        return OperationResult.done()

    stores = InMemoryStores()
    await use_profile(stores, op("after", A))
    result = await make_runner(stores=stores, catalog=catalog).run(generate())
    main = result.run.main_llm
    assert seen == [(main.assistant_message_id, main.assistant_variant_id)]
    assert None not in seen[0]


@pytest.mark.anyio
async def test_a_reply_stopped_by_the_content_filter_is_recorded_as_such() -> None:
    stores = InMemoryStores()
    await use_profile(stores)
    stopped = MainLlmDone(text="I can't", finish_reason="content_filter")
    result = await make_runner(stores=stores, main_llm=ScriptedMainLlm([stopped])).run(generate())
    main = result.run.main_llm
    assert (main.finish_reason, main.provider_finish_reason) == (
        FinishReason.POLICY_ERROR,
        "content_filter",
    )
    assert main.text == "I can't"


@pytest.mark.anyio
async def test_host_data_reaches_operations_templates_and_the_main_llm() -> None:
    seen: list[object] = []
    catalog = OperationCatalog(kinds=builtin_kinds())
    catalog.add_definition(OperationDefinition(operation_id="card", name="Card", kind="template"))

    @catalog.function("reader", name="Reader")
    async def reader(ctx: OperationContext) -> OperationResult:
        seen.append(ctx.host["persona"])
        return OperationResult.done()

    template = {
        "template": "Play {{ host.persona.name }}.",
        "promptEffect": {"type": "prompt.system_update", "mode": "append"},
    }
    stores = InMemoryStores()
    await use_profile(stores, op("card", B, params=template), op("reader", B, order=2))
    main_llm = ScriptedMainLlm()
    host = {"persona": {"name": "Ada"}, "entity": 7}
    result = await make_runner(stores=stores, catalog=catalog, main_llm=main_llm).run(
        generate(host=host, system_prompt="You are helpful.")
    )
    assert result.status == RunStatus.DONE
    assert seen == [{"name": "Ada"}]
    request = main_llm.requests[0]
    assert dict(request.meta) == host
    assert request.messages[0].content.endswith("Play Ada.")


@pytest.mark.anyio
async def test_host_data_is_read_only_all_the_way_down() -> None:
    refused: list[str] = []
    catalog = OperationCatalog()

    @catalog.function("meddler", name="Meddler")
    async def meddler(ctx: OperationContext) -> OperationResult:
        persona = ctx.host["persona"]
        assert isinstance(persona, dict)
        tags = ctx.host["tags"]
        assert isinstance(tags, list)
        changes: list[Callable[[], object]] = [
            partial(persona.update, name="Eve"),
            partial(persona.__setitem__, "name", "Eve"),
            partial(tags.append, "evil"),
        ]
        for change in changes:
            try:
                change()
            except TypeError:
                refused.append("refused")
        return OperationResult.done()

    stores = InMemoryStores()
    await use_profile(stores, op("meddler", B))
    main_llm = ScriptedMainLlm()
    host = {"persona": {"name": "Ada"}, "tags": ["calm"]}
    request = generate(host=host)
    result = await make_runner(stores=stores, catalog=catalog, main_llm=main_llm).run(request)
    assert result.status == RunStatus.DONE
    assert refused == ["refused"] * 3
    assert request.host == host == {"persona": {"name": "Ada"}, "tags": ["calm"]}
    assert main_llm.requests[0].meta == host


@pytest.mark.anyio
async def test_a_run_streams_its_own_events_then_its_result() -> None:
    stores = InMemoryStores()
    await use_profile(stores, op("op0", B))
    everything = CancelAt(0)  # the runner's own sink (never cancels)
    runner = make_runner(stores=stores, catalog=_catalog(1, set()), events=everything)
    async with runner.stream(generate()) as events:
        seen = [event async for event in events]
    assert events.result.status == RunStatus.DONE
    assert [e.seq for e in seen] == list(range(1, len(seen) + 1))
    assert seen[-1].type == "run.finished"
    assert [e.seq for e in everything.seen] == [e.seq for e in seen]


@pytest.mark.anyio
async def test_leaving_a_stream_early_aborts_the_run() -> None:
    stores = InMemoryStores()
    await use_profile(stores)
    runner = make_runner(
        stores=stores, main_llm=ScriptedMainLlm(default="a long reply", chunk_size=1, delay=0.01)
    )
    async with runner.stream(generate(user_message_id="u1")) as events:
        async for event in events:
            if event.type == "main_llm.started":
                break
    (run_id,) = stores.runs.run_ids()
    stored = await runner.result(run_id)
    assert (stored.run.status, stored.run.abort_reason) == (RunStatus.ABORTED, "cancelled")
    _check_events(await stores.runs.events(run_id))
    assert events.result == stored  # the aborted run, as recorded
    retry = await runner.run(generate(user_message_id="u1"))
    assert retry.status == RunStatus.DONE


@pytest.mark.anyio
async def test_a_stream_raises_what_the_run_raises() -> None:
    runner = make_runner()
    async with runner.stream(generate()) as events:
        with pytest.raises(RunError) as error:
            [event async for event in events]
    assert error.value.code == "profile_not_found"


@pytest.mark.anyio
async def test_debug_data_is_kept_only_where_debug_is_enabled() -> None:
    key = "sk-proj-" + "Ab3dEfGhIjKlMnOpQrStUvWxYz0123456789"
    catalog = OperationCatalog()

    @catalog.function("noisy", name="Noisy")
    async def noisy(ctx: OperationContext) -> OperationResult:
        return OperationResult.done(debug={"tried": 3, "config": f"key={key}"})

    @catalog.function("gave_up", name="Gave up")
    async def gave_up(ctx: OperationContext) -> OperationResult:
        return OperationResult.failed("no_luck", "nothing found", debug={"tried": 5})

    @catalog.function("passed", name="Passed")
    async def passed(ctx: OperationContext) -> OperationResult:
        return OperationResult.skipped(debug={"why": "nothing to do"})

    catalog.function("quiet", name="Quiet")(noisy)
    stores = InMemoryStores()
    enabled = {"enabled": True}
    await use_profile(
        stores,
        op("noisy", B, debug=enabled),
        op("gave_up", B, debug=enabled),
        op("passed", B, debug=enabled),
        op("quiet", B, order=2),
    )
    result = await make_runner(stores=stores, catalog=catalog).run(generate())
    kept = result.operation("noisy").debug
    assert kept is not None
    assert kept["tried"] == 3
    assert key not in str(kept)
    assert result.operation("gave_up").debug == {"tried": 5}
    assert result.operation("passed").debug == {"why": "nothing to do"}
    assert result.operation("quiet").debug is None


def _orphan(lease_expires_at: datetime) -> Run:
    """A run of turn ``u1`` whose owner process died while it ran."""
    return Run(
        run_id="run_orphan",
        trigger=Trigger.GENERATE,
        chat_id="c",
        branch_id="main",
        user_message_id="u1",
        profile_id="p",
        dedupe_key="c:gen:u1",
        started_at=datetime(2025, 12, 31, tzinfo=UTC),
        lease_expires_at=lease_expires_at,
    )


@pytest.mark.anyio
async def test_a_retry_takes_over_a_turn_whose_owner_stopped_renewing_its_lease() -> None:
    stores = InMemoryStores()
    await use_profile(stores)
    runner = make_runner(stores=stores)  # its fake clock reads 2026-01-01
    await stores.runs.claim(_orphan(datetime(2025, 12, 31, 0, 1, tzinfo=UTC)))
    result = await runner.run(generate(user_message_id="u1"))
    assert (result.status, result.deduplicated) == (RunStatus.DONE, False)
    orphan = await runner.result("run_orphan")
    assert (orphan.run.status, orphan.run.abort_reason) == (RunStatus.ABORTED, "lease_expired")


@pytest.mark.anyio
async def test_a_turn_whose_owner_still_holds_the_lease_is_not_taken_over() -> None:
    stores = InMemoryStores()
    await use_profile(stores)
    runner = make_runner(stores=stores)
    await stores.runs.claim(_orphan(datetime(2026, 1, 1, 0, 1, tzinfo=UTC)))
    result = await runner.run(generate(user_message_id="u1"))
    assert (result.run.run_id, result.deduplicated) == ("run_orphan", True)
    assert result.run.status == RunStatus.RUNNING


@pytest.mark.anyio
async def test_a_running_run_renews_its_lease() -> None:
    stores = InMemoryStores()
    seen: list[datetime | None] = []
    catalog = OperationCatalog()

    @catalog.function("slow", name="Slow")
    async def slow(ctx: OperationContext) -> OperationResult:
        await anyio.sleep(0.2)
        stored, _ = await stores.runs.get_run(ctx.run.run_id)
        seen.append(stored.lease_expires_at)
        return OperationResult.done()

    await use_profile(stores, op("slow", B))
    runner = make_runner(stores=stores, catalog=catalog, clock=SystemClock(), lease_seconds=0.03)
    result = await runner.run(generate())
    (renewed,) = seen
    assert result.run.lease_expires_at is not None
    assert renewed is not None
    assert renewed > result.run.lease_expires_at


@pytest.mark.anyio
async def test_an_operation_may_skip_itself_for_a_policy() -> None:
    catalog = OperationCatalog()

    @catalog.function("moderated", name="Moderated")
    async def moderated(ctx: OperationContext) -> OperationResult:
        return OperationResult.skipped(SkippedReason.POLICY)

    stores = InMemoryStores()
    await use_profile(stores, op("moderated", B, required=True))
    result = await make_runner(stores=stores, catalog=catalog).run(generate())
    record = result.operation("moderated")
    assert (record.status, record.skipped_reason) == (OperationStatus.SKIPPED, "policy")
    assert result.status == RunStatus.FAILED  # a required operation that did not run


def _host_message(i: int, role: ChatRole) -> ChatMessage:
    variant = MessageVariant(variant_id=f"v{i}", content=f"m{i}", source="host")
    return ChatMessage(
        message_id=f"m{i}",
        chat_id="c",
        branch_id="main",
        role=role,
        variants=(variant,),
        selected_variant_id=f"v{i}",
    )


@given(
    steps=st.lists(
        st.one_of(
            st.lists(st.sampled_from(["u", "a", "s"]), min_size=1, max_size=6),  # append
            st.integers(0, 40),  # delete the message at that index (if any)
        ),
        max_size=25,
    )
)
def test_the_runner_knows_a_history_is_turns_without_rescanning_it(
    steps: list[list[str] | int],
) -> None:
    """Remembering the checked prefix gives the verdict of a scan of the whole history,
    whatever messages are appended or deleted between turns."""
    roles = {"u": ChatRole.USER, "a": ChatRole.ASSISTANT, "s": ChatRole.SYSTEM}
    seen = _TurnsSeen()
    history: list[ChatMessage] = []
    made = 0
    for step in steps:
        if isinstance(step, int):
            if step < len(history):
                del history[step]
        else:
            for letter in step:
                made += 1
                history.append(_host_message(made, roles[letter]))
        assert seen.check(("c", "main"), history) == _already_turns(history)


@pytest.mark.anyio
async def test_a_reply_the_provider_ended_with_an_error_fails_the_run_and_keeps_its_text() -> None:
    stores = InMemoryStores()
    await use_profile(stores, op("after", A))
    catalog = OperationCatalog()

    @catalog.function("after", name="After")
    async def after(ctx: OperationContext) -> OperationResult:
        return OperationResult.done()

    cut = MainLlmDone(text="The door op", finish_reason="error", raw_finish_reason="abort")
    runner = make_runner(stores=stores, catalog=catalog, main_llm=ScriptedMainLlm([cut]))
    result = await runner.run(generate())
    assert result.status == RunStatus.FAILED
    assert result.run.failed_type == FailedType.MAIN_LLM
    main = result.run.main_llm
    assert (main.status, main.finish_reason, main.provider_finish_reason) == (
        MainLlmStatus.ERROR,
        FinishReason.PROVIDER_ERROR,
        "abort",
    )
    assert main.error is not None
    assert main.error.code == "provider_error"
    assert "(abort)" in main.error.message
    assert main.text == "The door op"
    assert result.operation("after").status == OperationStatus.SKIPPED
    history = await stores.chats.history("c", "main")
    assert [m.role for m in history] == [ChatRole.USER]  # no half answer in the chat


@pytest.mark.anyio
async def test_a_user_message_with_half_an_emoji_is_answered() -> None:
    stores = InMemoryStores()
    await use_profile(stores)
    llm = ScriptedMainLlm()
    result = await make_runner(stores=stores, main_llm=llm).run(generate("half \ud83d"))
    assert result.status == RunStatus.DONE
    assert llm.last_request is not None
    assert llm.last_request.messages[-1].content == "half \ufffd"
    (user, _) = await stores.chats.history("c", "main")
    assert user.selected.content == "half \ufffd"


@pytest.mark.anyio
async def test_a_streams_result_before_the_run_finished_is_a_run_error() -> None:
    stores = InMemoryStores()
    await use_profile(stores)
    runner = make_runner(stores=stores)
    async with runner.stream(generate()) as events:
        with pytest.raises(RunError) as error:
            _ = events.result
        assert error.value.code == "run_not_finished"
        seen = [event async for event in events]
    assert seen[-1].type == "run.finished"
    assert events.result.status == RunStatus.DONE


@pytest.mark.anyio
async def test_a_resent_generate_carrying_the_id_made_for_it_is_the_same_turn() -> None:
    stores = InMemoryStores()
    await use_profile(stores)
    llm = ScriptedMainLlm(default="one answer")
    runner = make_runner(stores=stores, main_llm=llm)
    first = await runner.run(generate())  # no user_message_id: the runner makes one
    again = await runner.run(generate(user_message_id=first.run.user_message_id))
    assert again.deduplicated
    assert again.run.run_id == first.run.run_id
    assert len(llm.requests) == 1
    roles = [m.role for m in await stores.chats.history("c", "main")]
    assert roles == [ChatRole.USER, ChatRole.ASSISTANT]
