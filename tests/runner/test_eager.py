"""Operations start eagerly: in the hook's task until they first suspend, each in a
context of its own, and concurrently once one suspends."""

from __future__ import annotations

import contextvars

import anyio
import pytest

from _support import B, generate, make_runner, op, use_profile
from opsrun.model import OperationResult, OperationStatus
from opsrun.operations import OperationCatalog, OperationContext
from opsrun.runner._eager import drive, start
from opsrun.stores import InMemoryStores

pytestmark = pytest.mark.anyio

MARK: contextvars.ContextVar[str] = contextvars.ContextVar("MARK", default="caller")


async def test_an_operation_that_never_suspends_changes_no_context_of_the_caller() -> None:
    stores = InMemoryStores()
    catalog = OperationCatalog()
    seen: list[str] = []

    @catalog.function("a", name="A")
    async def a(ctx: OperationContext) -> OperationResult:
        seen.append(MARK.get())
        MARK.set(ctx.operation_id)  # never reset: a task's context would drop it
        return OperationResult.done()

    catalog.function("b", name="B")(a)
    await use_profile(stores, op("a", B), op("b", B, order=2))
    result = await make_runner(stores=stores, catalog=catalog).run(generate())
    assert result.status == "done"
    assert seen == ["caller", "caller"]  # b does not see what a set
    assert MARK.get() == "caller"


async def test_operations_after_one_that_suspends_run_while_it_waits() -> None:
    stores = InMemoryStores()
    catalog = OperationCatalog()
    order: list[str] = []
    released = anyio.Event()

    @catalog.function("waits", name="Waits")
    async def waits(ctx: OperationContext) -> OperationResult:
        order.append("waits: start")
        with anyio.fail_after(5):  # a cancel scope entered before the first suspension
            await released.wait()
        order.append("waits: end")
        return OperationResult.done()

    @catalog.function("releases", name="Releases")
    async def releases(ctx: OperationContext) -> OperationResult:
        order.append("releases")
        released.set()
        return OperationResult.done()

    await use_profile(stores, op("waits", B), op("releases", B, order=2))
    result = await make_runner(stores=stores, catalog=catalog).run(generate())
    assert [r.status for r in result.operation_runs] == [OperationStatus.DONE] * 2
    assert order == ["waits: start", "releases", "waits: end"]


async def test_start_and_drive_pass_values_and_exceptions_through() -> None:
    async def twice() -> None:
        await anyio.sleep(0)
        async with anyio.create_task_group() as tg:
            tg.start_soon(anyio.sleep, 0)
        MARK.set("inner")
        raise KeyError("inside")

    started = start(twice())
    assert started is not None
    with pytest.raises(KeyError):
        await drive(started)
    assert MARK.get() == "caller"

    async def quick() -> None:
        MARK.set("quick")

    assert start(quick()) is None
    assert MARK.get() == "caller"
