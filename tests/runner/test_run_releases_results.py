"""A run in flight lets go of what it no longer needs: operation results, once their hook
is committed (a long main LLM call does not hold them)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import AsyncIterator, Iterator

import anyio
import pytest

from _support import generate, make_runner, op, use_profile
from opsrun.model import Hook, OperationResult, OperationStatus
from opsrun.operations import AbortSignal, OperationCatalog, OperationContext
from opsrun.ports import MainLlmDone, MainLlmRequest, ProviderCapabilities
from opsrun.stores import InMemoryStores

pytestmark = pytest.mark.anyio


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


class Looking:
    """A main LLM that runs ``look`` when it is called, then answers "OK"."""

    capabilities = ProviderCapabilities()

    def __init__(self, look: list[bool], results: list[weakref.ref[OperationResult]]) -> None:
        self.look = look
        self.results = results

    async def _reply(self) -> AsyncIterator[str | MainLlmDone]:
        await anyio.sleep(0)  # the run waits here, as for a real provider
        self.look.append(all(ref() is None for ref in self.results))
        yield "OK"
        yield MainLlmDone(text="OK")

    def stream(self, request: MainLlmRequest) -> AsyncIterator[str | MainLlmDone]:
        return self._reply()


@pytest.mark.usefixtures("no_collector")
async def test_operation_results_are_let_go_once_their_hook_is_committed() -> None:
    stores = InMemoryStores()
    catalog = OperationCatalog()
    results: list[weakref.ref[OperationResult]] = []
    looked: list[bool] = []

    async def keep(ctx: OperationContext) -> OperationResult:
        await anyio.sleep(0)  # as a task: its dependant waits for it
        result = OperationResult.done()
        results.append(weakref.ref(result))
        return result

    catalog.function("a", name="A")(keep)
    catalog.function("b", name="B")(keep)
    await use_profile(stores, op("a"), op("b", depends_on=("a",)), op("c", Hook.AFTER_MAIN_LLM))
    catalog.function("c", name="C")(keep)
    runner = make_runner(stores=stores, catalog=catalog, main_llm=Looking(looked, results))
    run = await runner.run(generate())
    assert run.status == "done"
    assert [r.status for r in run.operation_runs] == [OperationStatus.DONE] * 3
    assert [r.committed for r in run.operation_runs] == [True] * 3
    assert looked == [True]  # both before_main_llm results were gone by the main LLM call
    assert len(results) == 3


async def test_the_runs_own_signal_aborts_it_and_reaches_operations_subscribers() -> None:
    stores = InMemoryStores()
    catalog = OperationCatalog()
    heard: list[str] = []
    signals: list[AbortSignal] = []

    @catalog.function("waits", name="Waits")
    async def waits(ctx: OperationContext) -> OperationResult:
        signals.append(ctx.abort)
        ctx.abort.subscribe(heard.append)
        await anyio.sleep_forever()
        raise AssertionError("aborted before")

    @catalog.function("aborts", name="Aborts")
    async def aborts(ctx: OperationContext) -> OperationResult:
        ctx.abort.abort("stop")
        return OperationResult.done()

    await use_profile(stores, op("waits"), op("aborts", order=2))
    run = await make_runner(stores=stores, catalog=catalog).run(generate())
    assert run.status == "aborted"
    assert run.run.abort_reason == "stop"
    assert heard == ["stop"]
    assert isinstance(signals[0], AbortSignal)
    signals[0].abort("again")  # after the run: nothing left to cancel, nothing breaks
    assert heard == ["stop"]
