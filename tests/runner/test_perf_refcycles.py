"""A finished run leaves no reference cycles: its state is freed as soon as it is dropped."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import anyio
import anyio.lowlevel
import pytest

from _support import generate, make_runner, op, use_profile
from opsrun.model import OperationResult
from opsrun.operations import AbortSignal, OperationCatalog, OperationContext
from opsrun.stores import InMemoryStores


@pytest.fixture
def no_collector() -> Iterator[None]:
    """Only reference counting frees objects while the test runs."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class Subscriber:
    def __init__(self, signal: AbortSignal) -> None:
        self.undo = signal.subscribe(self.on_abort)

    def on_abort(self, reason: str) -> None:
        pass


@pytest.mark.usefixtures("no_collector")
def test_an_undone_subscription_lets_go_of_the_subscriber() -> None:
    signal = AbortSignal()
    subscriber = Subscriber(signal)
    ref = weakref.ref(subscriber)
    subscriber.undo()
    subscriber.undo()  # twice is harmless
    del subscriber
    assert ref() is None
    signal.abort()  # nobody is called any more


@pytest.mark.anyio
@pytest.mark.usefixtures("no_collector")
async def test_a_finished_run_is_freed_without_the_collector() -> None:
    stores = InMemoryStores()
    catalog = OperationCatalog()
    results: list[weakref.ref[OperationResult]] = []

    @catalog.function("a", name="A")
    async def a(ctx: OperationContext) -> OperationResult:
        result = OperationResult.done()
        results.append(weakref.ref(result))  # kept by the run's state until it is freed
        return result

    await use_profile(stores, op("a"), op("b", depends_on=("a",)))
    catalog.function("b", name="B")(a)
    run = await make_runner(stores=stores, catalog=catalog).run(generate())
    assert run.status == "done"
    assert len(results) == 2
    assert all(ref() is None for ref in results)


@pytest.mark.anyio
@pytest.mark.usefixtures("no_collector")
async def test_a_recorded_run_lets_go_of_its_working_state_before_its_task_ends() -> None:
    """Between being recorded and returning, a run waits once for the event loop (its
    task group closes); other runs go on meanwhile. By then it holds no operation
    results and no history: with many runs at once, that is what the collector walks."""
    stores = InMemoryStores()
    catalog = OperationCatalog()
    results: list[weakref.ref[OperationResult]] = []
    seen: list[bool] = []

    @catalog.function("a", name="A")
    async def a(ctx: OperationContext) -> OperationResult:
        result = OperationResult.done()
        results.append(weakref.ref(result))
        return result

    await use_profile(stores, op("a"))
    runner = make_runner(stores=stores, catalog=catalog)

    async def look() -> None:
        await anyio.lowlevel.checkpoint()  # the run goes first, to its last wait
        seen.append(bool(results) and results[0]() is None)

    async with anyio.create_task_group() as tg:
        tg.start_soon(look)
        tg.start_soon(runner.run, generate())
    assert seen == [True]
