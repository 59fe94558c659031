"""The per-operation fast paths build the same objects as the ordinary constructors."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

import anyio
import pytest
from _support import A, B, generate, make_runner, op, use_profile
from pydantic import BaseModel, ValidationError

from opsrun.errors import OperationFailed
from opsrun.model import (
    OperationConfig,
    OperationDefinition,
    OperationError,
    OperationFinished,
    OperationResult,
    OperationRun,
    OperationStarted,
    OperationStatus,
    SkippedReason,
    Trigger,
)
from opsrun.runner import (
    AbortSignal,
    InProcessExecutor,
    Operation,
    OperationCatalog,
    OperationContext,
    RunMeta,
)
from opsrun.runner._context import CONTEXT_FIELDS_SET_DIRECTLY, operation_context
from opsrun.runner._events import OPERATION_EVENTS_PREVALIDATED
from opsrun.runner._scheduler import RECORDS_PREVALIDATED, OpExec, loop_clock
from opsrun.stores import InMemoryStores
from opsrun.testing import ScriptedMainLlm


def validated(model: BaseModel) -> BaseModel:
    """``model`` rebuilt by its validating constructor from the fields it was given."""
    return type(model)(**{name: getattr(model, name) for name in model.model_fields_set})


def assert_same(fast: BaseModel, slow: BaseModel) -> None:
    assert type(fast) is type(slow)
    assert fast == slow
    assert list(fast.__dict__) == list(slow.__dict__)  # field order, as repr shows it
    assert fast.model_fields_set == slow.model_fields_set
    assert fast.model_dump_json() == slow.model_dump_json()
    assert repr(fast) == repr(slow)


def test_the_fast_paths_match_the_current_models() -> None:
    # A field added to OperationRun or the operation events turns the fast path off
    # (everything is validated again); this test says so.
    assert RECORDS_PREVALIDATED
    assert OPERATION_EVENTS_PREVALIDATED
    assert CONTEXT_FIELDS_SET_DIRECTLY


DEFINITION = OperationDefinition(operation_id="op", name="Op", kind="compute")
CONFIG = OperationConfig(hooks=(B, A), order=2.5, depends_on=("x",), required=True)
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def opexec(**state: Any) -> OpExec:
    e = OpExec(DEFINITION, CONFIG, A, None, {}, None)
    for name, value in state.items():
        setattr(e, name, value)
    return e


@pytest.mark.parametrize(
    "state",
    [
        {},
        {"status": OperationStatus.SKIPPED, "skipped_reason": SkippedReason.DISABLED},
        {
            "status": OperationStatus.DONE,
            "started_at": T0,
            "finished_at": T0,
            "duration_ms": 1.5,
            "inputs_summary": {"a": [1, 2]},
            "outputs_summary": {"b": {"c": None}},
            "committed": True,
            "commit_index": 3,
        },
        {
            "status": OperationStatus.ERROR,
            "error": OperationError(code="boom", message="m", details={"k": 1}),
        },
    ],
)
def test_records_equal_validated_records(state: dict[str, Any]) -> None:
    e = opexec(**state)
    record = e.record("run_1", Trigger.REGENERATE)
    expected = OperationRun(
        run_id="run_1",
        operation_id="op",
        operation_name="Op",
        hook=A,
        trigger=Trigger.REGENERATE,
        required=True,
        order=2.5,
        depends_on=("x",),
        status=e.status,
        skipped_reason=e.skipped_reason,
        error=e.error,
        started_at=e.started_at,
        finished_at=e.finished_at,
        duration_ms=e.duration_ms,
        inputs_summary=e.inputs_summary,
        outputs_summary=e.outputs_summary,
        committed=e.committed,
        commit_index=e.commit_index,
    )
    assert_same(record, expected)
    assert record.inputs_summary is not e.inputs_summary  # each record owns its summaries
    with pytest.raises(ValidationError):
        record.status = OperationStatus.DONE  # type: ignore[misc]  # frozen, as validated ones


def test_unusual_summaries_and_times_are_still_validated() -> None:
    proxy: Mapping[str, Any] = MappingProxyType({"a": 1})
    record = opexec(inputs_summary=proxy, started_at="2026-01-01T00:00:00Z").record(
        "run_1", Trigger.GENERATE
    )
    assert type(record.inputs_summary) is dict
    assert record.inputs_summary == {"a": 1}
    assert record.started_at == T0
    with pytest.raises(ValidationError):
        opexec(outputs_summary={1: "not a str key"}).record("run_1", Trigger.GENERATE)


@pytest.mark.anyio
async def test_stored_operation_events_and_records_equal_validated_ones() -> None:
    stores = InMemoryStores()
    catalog = OperationCatalog()

    @catalog.function("ok", name="OK")
    async def ok(ctx: OperationContext) -> OperationResult:
        return OperationResult.done(inputs_summary={"n": 1})

    @catalog.function("fails", name="Fails")
    async def fails(ctx: OperationContext) -> OperationResult:
        raise OperationFailed("nope", details={"why": "test"})

    @catalog.function("skips", name="Skips")
    async def skips(ctx: OperationContext) -> OperationResult:
        return OperationResult.skipped()

    await use_profile(
        stores,
        op("ok", B, A),
        op("fails", B, order=2),
        op("skips", A, order=3),
        op("off", B, enabled=False),
    )
    catalog.function("off", name="Off")(ok)
    result = await make_runner(stores, catalog, ScriptedMainLlm()).run(generate())
    events = await stores.runs.events(result.run.run_id)
    operation_events = [e for e in events if isinstance(e, OperationStarted | OperationFinished)]
    assert len(operation_events) == 2 * 4 + 1  # "off" only finishes
    for event in operation_events:
        assert_same(event, validated(event))
    assert len(result.operation_runs) == 5
    for record in result.operation_runs:
        assert_same(record, validated(record))


@pytest.mark.anyio
async def test_a_clock_of_another_type_is_validated() -> None:
    class IsoClock:
        def now(self) -> Any:
            return "2026-01-01T00:00:00Z"  # pydantic turns it into a datetime

    stores = InMemoryStores()
    catalog = OperationCatalog()

    @catalog.function("ok", name="OK")
    async def ok(ctx: OperationContext) -> OperationResult:
        return OperationResult.done()

    await use_profile(stores, op("ok"))
    result = await make_runner(stores, catalog, ScriptedMainLlm(), clock=IsoClock()).run(generate())
    events = await stores.runs.events(result.run.run_id)
    assert all(e.ts == T0 for e in events)
    assert result.operation_runs[0].started_at == T0


@pytest.mark.anyio
async def test_loop_clock_is_anyio_current_time() -> None:
    clock = loop_clock()
    first = anyio.current_time()
    value = clock()
    assert first <= value <= anyio.current_time()


def test_copies_of_records_do_not_share_what_they_change() -> None:
    first = opexec().record("run_1", Trigger.GENERATE)
    second = opexec().record("run_1", Trigger.GENERATE)
    copy = first.model_copy(update={"committed": True})
    assert copy.committed
    assert not first.committed
    assert not second.committed
    assert first.model_fields_set == second.model_fields_set == set(OperationRun.model_fields)


def test_operation_context_equals_the_dataclass_constructor() -> None:
    values: dict[str, Any] = {
        "run": RunMeta(
            run_id="run_1",
            trigger=Trigger.GENERATE,
            chat_id="c",
            branch_id="main",
            user_message_id="m",
            profile_id="p",
            session_key=None,
        ),
        "hook": A,
        "definition": DEFINITION,
        "config": CONFIG,
        "params": {"k": 1},
        "history": (),
        "artifacts": MappingProxyType({}),
        "prompt": None,
        "main_llm": None,
        "deadline": 12.5,
        "abort": AbortSignal(),
        "write_tag": "tag",
    }
    fast = operation_context(**values)
    slow = OperationContext(**values)
    assert type(fast) is OperationContext
    assert fast == slow
    assert repr(fast) == repr(slow)
    with pytest.raises(AttributeError):
        fast.hook = B  # type: ignore[misc]  # frozen


@pytest.mark.anyio
async def test_a_replaced_execute_of_the_in_process_executor_still_sees_every_operation() -> None:
    stores = InMemoryStores()
    catalog = OperationCatalog()

    @catalog.function("a", name="A")
    async def a(ctx: OperationContext) -> OperationResult:
        return OperationResult.done()

    catalog.function("b", name="B")(a)
    await use_profile(stores, op("a"), op("b", A))
    executor = InProcessExecutor()
    seen: list[str] = []
    original = executor.execute

    async def spy(operation: Operation, ctx: OperationContext) -> OperationResult:
        seen.append(ctx.operation_id)
        return await original(operation, ctx)

    executor.execute = spy  # type: ignore[method-assign]  # a spy on one instance
    result = await make_runner(stores, catalog, ScriptedMainLlm(), executor=executor).run(
        generate()
    )
    assert result.status == "done"
    assert seen == ["a", "b"]
