"""A run's events reach the sink as soon as the run waits and the run store in batches."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence

import anyio
import pytest

from _support import generate, make_runner, op, use_profile
from opsrun.errors import ConfigError
from opsrun.model import OperationResult, RunEvent, RunStatus
from opsrun.operations import OperationCatalog, OperationContext
from opsrun.stores.sqlite import SqliteStores

pytestmark = pytest.mark.anyio

HOUR = 3600.0
"""A batch interval no run here outlives: its events are stored once, at its end."""


class Batches:
    """Records each batch the run store is asked to append."""

    def __init__(self, stores: SqliteStores) -> None:
        self.batches: list[list[RunEvent]] = []
        append = stores.runs.append_events

        async def recording(run_id: str, events: Sequence[RunEvent]) -> None:
            await append(run_id, events)
            self.batches.append(list(events))

        stores.runs.append_events = recording  # type: ignore[method-assign]  # spying

    @property
    def types(self) -> list[str]:
        return [event.type for batch in self.batches for event in batch]


class RecordingSink:
    def __init__(self) -> None:
        self.events: list[RunEvent] = []

    async def emit(self, event: RunEvent) -> None:
        self.events.append(event)


@pytest.fixture
def stores() -> Iterator[SqliteStores]:
    # A store whose every call waits for its thread: events take the batched path.
    with SqliteStores(":memory:") as stores:
        yield stores


def gated(go: anyio.Event) -> OperationCatalog:
    """``fast`` ends at once; ``slow`` waits for ``go``."""
    catalog = OperationCatalog()

    @catalog.function("fast", name="Fast")
    async def _fast(ctx: OperationContext) -> OperationResult:
        return OperationResult.done()

    @catalog.function("slow", name="Slow")
    async def _slow(ctx: OperationContext) -> OperationResult:
        await go.wait()
        return OperationResult.done()

    return catalog


async def until(check: Callable[[], bool]) -> None:
    """Wait until ``check()`` is true (bounded, so a broken run fails instead of hanging)."""
    with anyio.fail_after(30):
        while not check():
            await anyio.sleep(0.001)


async def test_a_run_shorter_than_the_interval_is_stored_in_one_batch(
    stores: SqliteStores,
) -> None:
    await use_profile(stores, op("fast"))
    batches = Batches(stores)
    go = anyio.Event()
    go.set()
    runner = make_runner(stores=stores, catalog=gated(go), event_batch_seconds=HOUR)
    result = await runner.run(generate())
    assert result.status == RunStatus.DONE
    stored = await stores.runs.events(result.run.run_id)
    assert batches.batches == [stored]
    assert [event.seq for event in stored] == list(range(1, len(stored) + 1))
    assert (stored[0].type, stored[-1].type) == ("run.started", "run.finished")


async def test_with_no_interval_events_are_stored_whenever_the_run_waits(
    stores: SqliteStores,
) -> None:
    await use_profile(stores, op("fast"))
    batches = Batches(stores)
    runner = make_runner(stores=stores, catalog=gated(anyio.Event()), event_batch_seconds=0)
    result = await runner.run(generate())
    stored = await stores.runs.events(result.run.run_id)
    assert len(batches.batches) > 1
    assert [event for batch in batches.batches for event in batch] == stored


async def test_the_sink_gets_events_before_their_batch_is_due(stores: SqliteStores) -> None:
    await use_profile(stores, op("slow"))
    batches = Batches(stores)
    sink = RecordingSink()
    go = anyio.Event()
    runner = make_runner(stores=stores, catalog=gated(go), events=sink, event_batch_seconds=HOUR)
    async with anyio.create_task_group() as tg:
        results = []

        async def turn() -> None:
            results.append(await runner.run(generate()))

        tg.start_soon(turn)
        await until(lambda: "operation.started" in [e.type for e in sink.events])
        assert batches.batches == []  # not due: nothing stored while the operation waits
        go.set()
    (result,) = results
    stored = await stores.runs.events(result.run.run_id)
    assert sink.events == stored
    assert batches.batches == [stored]


async def test_a_due_batch_is_stored_while_the_run_still_waits(stores: SqliteStores) -> None:
    await use_profile(stores, op("slow"))
    batches = Batches(stores)
    go = anyio.Event()
    runner = make_runner(stores=stores, catalog=gated(go), event_batch_seconds=0.005)
    async with anyio.create_task_group() as tg:
        tg.start_soon(runner.run, generate())
        await until(lambda: "operation.started" in batches.types)
        assert batches.types[0] == "run.started"
        assert "run.finished" not in batches.types  # the run is still waiting for ``go``
        go.set()
    assert batches.types[-1] == "run.finished"
    assert len(batches.batches) > 1


@pytest.mark.parametrize("value", [-0.5, math.nan])
def test_the_interval_is_a_number_of_seconds_not_below_zero(value: float) -> None:
    with pytest.raises(ConfigError) as error:
        make_runner(event_batch_seconds=value)
    assert error.value.code == "config_error"
    assert error.value.details["field"] == "event_batch_seconds"
