"""Records and events of a run are the same objects the validating constructors build."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from _support import A, B, generate, make_runner, op, use_profile
from opsrun.errors import OperationFailed
from opsrun.model import (
    OperationFinished,
    OperationResult,
    OperationRun,
    OperationStarted,
    OperationStatus,
)
from opsrun.operations import Operation, OperationCatalog, OperationContext
from opsrun.runner import InProcessExecutor
from opsrun.stores import InMemoryStores

T0 = datetime(2026, 1, 1, tzinfo=UTC)


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


@pytest.mark.anyio
async def test_stored_operation_events_and_records_equal_validated_ones() -> None:
    stores = InMemoryStores()
    catalog = OperationCatalog()

    @catalog.function("ok", name="OK")
    async def ok(ctx: OperationContext) -> OperationResult:
        return OperationResult.done(outputs_summary={"n": 1})

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
    result = await make_runner(stores=stores, catalog=catalog).run(generate())
    events = await stores.runs.events(result.run.run_id)
    operation_events = [e for e in events if isinstance(e, OperationStarted | OperationFinished)]
    assert len(operation_events) == 2 * 4 + 1  # "off" only finishes
    for event in operation_events:
        assert_same(event, validated(event))
    assert len(result.operation_runs) == 5
    for record in result.operation_runs:
        assert_same(record, validated(record))
        assert record.model_fields_set == set(OperationRun.model_fields)
        with pytest.raises(ValidationError):
            record.status = OperationStatus.DONE  # type: ignore[misc]  # frozen, as validated ones
    stored_run, stored_records = await stores.runs.get_run(result.run.run_id)
    assert stored_run == result.run
    assert tuple(stored_records) == result.operation_runs


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
    result = await make_runner(stores=stores, catalog=catalog, clock=IsoClock()).run(generate())
    events = await stores.runs.events(result.run.run_id)
    assert all(e.ts == T0 for e in events)
    assert result.operation_runs[0].started_at == T0


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
    result = await make_runner(stores=stores, catalog=catalog, executor=executor).run(generate())
    assert result.status == "done"
    assert seen == ["a", "b"]


@pytest.mark.anyio
async def test_every_stored_event_and_record_of_a_run_equals_a_validated_one() -> None:
    stores = InMemoryStores()
    catalog = OperationCatalog()

    @catalog.function("ok", name="OK")
    async def ok(ctx: OperationContext) -> OperationResult:
        return OperationResult.done(outputs_summary={"n": 1})

    await use_profile(stores, op("ok", B), op("after", A))
    catalog.function("after", name="After")(ok)
    result = await make_runner(stores=stores, catalog=catalog).run(generate())
    events = await stores.runs.events(result.run.run_id)
    assert {e.type for e in events} >= {"run.started", "main_llm.delta", "run.finished"}
    for event in events:
        assert_same(event, validated(event))
    assert_same(result.run, validated(result.run))
    assert_same(result, validated(result))
    call = result.run.main_llm
    assert_same(call, validated(call))
    snapshot = call.prompt
    assert snapshot is not None
    assert_same(snapshot, validated(snapshot))
    for sent in snapshot.messages:
        assert_same(sent, validated(sent))
    for message in await stores.chats.history("c", "main"):
        assert_same(message, validated(message))
        for variant in message.variants:
            assert_same(variant, validated(variant))


def test_a_done_result_without_effects_equals_a_validated_one() -> None:
    plain = OperationResult.done()
    assert_same(plain, validated(plain))
    summary = {"n": 1}
    counted = OperationResult.done(outputs_summary=summary)
    assert_same(counted, validated(counted))
    assert counted.outputs_summary is not summary  # copied, as validation copies it
    assert OperationResult.done().outputs_summary is not plain.outputs_summary
