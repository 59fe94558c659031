"""Run events: types, seq numbering, names, sinks and the client EventLog."""

from __future__ import annotations

import random

import anyio
import pytest

from _support import A, B, generate, make_runner, op
from opsrun.errors import ProviderError
from opsrun.model import (
    FailedType,
    FinishReason,
    Hook,
    MainLlmStatus,
    OperationFinished,
    OperationProfile,
    OperationResult,
    OperationStarted,
    OperationStatus,
    RunEvent,
    RunEventAdapter,
    RunPhase,
    RunStatus,
    Trigger,
)
from opsrun.operations import OperationCatalog, OperationContext
from opsrun.report import EventLog
from opsrun.runner import Runner
from opsrun.stores import InMemoryStores
from opsrun.testing import ScriptedMainLlm

pytestmark = pytest.mark.anyio

ALL_TYPES = {
    "run.started",
    "run.phase_changed",
    "operation.started",
    "operation.finished",
    "main_llm.started",
    "main_llm.delta",
    "main_llm.finished",
    "run.finished",
}


class RecordingSink:
    def __init__(self, *, fail_on: str | None = None) -> None:
        self.events: list[RunEvent] = []
        self.fail_on = fail_on

    async def emit(self, event: RunEvent) -> None:
        self.events.append(event)
        if event.type == self.fail_on:
            raise RuntimeError("sink down")


def runner_with(
    stores: InMemoryStores, catalog: OperationCatalog, llm: ScriptedMainLlm, sink: RecordingSink
) -> Runner:
    return make_runner(stores=stores, catalog=catalog, main_llm=llm, events=sink)


def build(fail: bool = False) -> OperationCatalog:
    catalog = OperationCatalog()

    @catalog.function("prep", name="Prepare the scene")
    async def _prep(ctx: OperationContext) -> OperationResult:
        if fail:
            return OperationResult.failed("prep_failed", "no scene")
        return OperationResult.done()

    @catalog.function("track", name="Stat tracker")
    async def _track(ctx: OperationContext) -> OperationResult:
        return OperationResult.done()

    @catalog.function("off", name="Disabled one")
    async def _off(ctx: OperationContext) -> OperationResult:
        return OperationResult.done()

    return catalog


async def profile(stores: InMemoryStores, *, required: bool = False) -> None:
    await stores.profiles.save_profile(
        OperationProfile(
            profile_id="p",
            name="P",
            operation_profile_session_id="s1",
            operations=(
                op("prep", B, required=required),
                op("off", B, enabled=False),
                op("track", A),
            ),
        )
    )


def check_seq(events: list[RunEvent]) -> None:
    assert [e.seq for e in events] == list(range(1, len(events) + 1))


async def test_every_event_type_in_order() -> None:
    stores = InMemoryStores()
    await profile(stores)
    reply = "Once upon a time, in a land far away, there lived a parser."
    llm = ScriptedMainLlm([reply], chunk_size=7)
    sink = RecordingSink()
    catalog = build()
    result = await runner_with(stores, catalog, llm, sink).run(generate())
    assert result.status == RunStatus.DONE

    stored_events = await stores.runs.events(result.run.run_id)
    assert stored_events == sink.events
    events = sink.events
    check_seq(events)
    assert {e.type for e in events} == ALL_TYPES
    assert events[0].type == "run.started"
    assert events[-1].type == "run.finished"
    for e in events:
        assert e.run_id == result.run.run_id
        assert e.chat_id == "c"
        assert e.user_message_id == result.run.user_message_id
        assert e.trigger == Trigger.GENERATE
        if e.type in ("operation.started", "operation.finished"):
            assert e.operation_name == catalog[e.operation_id].name
    phases = [e.phase for e in events if e.type == "run.phase_changed"]
    assert phases == list(RunPhase)
    deltas = [e.text for e in events if e.type == "main_llm.delta"]
    assert len(deltas) > 1
    assert "".join(deltas) == reply
    types = [e.type for e in events]
    assert types.index("main_llm.started") < types.index("main_llm.delta")
    finished = next(e for e in events if e.type == "main_llm.finished")
    assert finished.status == MainLlmStatus.DONE
    assert finished.finish_reason == FinishReason.COMPLETED
    # every executed operation: started before finished; the disabled one only finishes
    per_op: dict[tuple[str, Hook], list[tuple[int, str]]] = {}
    for e in events:
        if isinstance(e, OperationStarted | OperationFinished):
            per_op.setdefault((e.operation_id, e.hook), []).append((e.seq, e.type))
    assert [t for _, t in per_op[("prep", B)]] == ["operation.started", "operation.finished"]
    assert [t for _, t in per_op[("track", A)]] == ["operation.started", "operation.finished"]
    assert [t for _, t in per_op[("off", B)]] == ["operation.finished"]
    off = next(e for e in events if e.type == "operation.finished" and e.operation_id == "off")
    assert off.status == OperationStatus.SKIPPED
    assert off.skipped_reason == "disabled"
    last = events[-1]
    assert last.status == RunStatus.DONE
    assert last.failed_type is None
    # events round-trip through JSON
    for e in events:
        assert RunEventAdapter.validate_json(RunEventAdapter.dump_json(e)) == e


async def test_failed_run_events_carry_failed_type() -> None:
    stores = InMemoryStores()
    await profile(stores, required=True)
    sink = RecordingSink()
    result = await runner_with(stores, build(fail=True), ScriptedMainLlm(), sink).run(generate())
    assert result.failed_type == FailedType.BEFORE_BARRIER
    check_seq(sink.events)
    types = [e.type for e in sink.events]
    assert "main_llm.started" not in types
    last = sink.events[-1]
    assert last.type == "run.finished"
    assert last.status == RunStatus.FAILED
    assert last.failed_type == FailedType.BEFORE_BARRIER
    assert last.failed_details is not None
    assert last.failed_details.operation_id == "prep"
    prep = next(
        e for e in sink.events if e.type == "operation.finished" and e.operation_id == "prep"
    )
    assert prep.error is not None
    assert prep.error.code == "prep_failed"
    track = next(
        e for e in sink.events if e.type == "operation.finished" and e.operation_id == "track"
    )
    assert track.skipped_reason == "main_llm_not_run"


async def test_main_llm_error_events() -> None:
    stores = InMemoryStores()
    await profile(stores)
    sink = RecordingSink()
    llm = ScriptedMainLlm([ProviderError("upstream 500")])
    result = await runner_with(stores, build(), llm, sink).run(generate())
    assert result.failed_type == FailedType.MAIN_LLM
    check_seq(sink.events)
    finished = next(e for e in sink.events if e.type == "main_llm.finished")
    assert finished.status == MainLlmStatus.ERROR
    assert finished.finish_reason == FinishReason.PROVIDER_ERROR
    assert finished.error is not None
    assert finished.error.code == "provider_error"
    last = sink.events[-1]
    assert last.type == "run.finished"
    assert last.failed_type == FailedType.MAIN_LLM


async def test_broken_sink_does_not_break_the_run() -> None:
    stores = InMemoryStores()
    await profile(stores)
    sink = RecordingSink(fail_on="operation.started")
    result = await runner_with(stores, build(), ScriptedMainLlm(), sink).run(generate())
    assert result.status == RunStatus.DONE
    assert sink.events == await stores.runs.events(result.run.run_id)
    assert sink.events[-1].type == "run.finished"


class SlowSink:
    """A sink whose delivery takes a while (a websocket write); the caller's scope is
    cancelled while it delivers ``cut_on``."""

    def __init__(self, cut_on: str) -> None:
        self.events: list[RunEvent] = []
        self.cut_on = cut_on
        self.scope: anyio.CancelScope | None = None

    async def emit(self, event: RunEvent) -> None:
        if event.type == self.cut_on and self.scope is not None:
            self.scope.cancel()
            self.scope = None
        await anyio.sleep(0.001)
        self.events.append(event)


@pytest.mark.parametrize("cut_on", ["run.started", "main_llm.started", "run.finished"])
async def test_a_delivery_cut_short_by_the_caller_is_made_again(cut_on: str) -> None:
    stores = InMemoryStores()
    await profile(stores)
    sink = SlowSink(cut_on)
    llm = ScriptedMainLlm(default="hello", delay=0.001)
    runner = make_runner(stores=stores, catalog=build(), main_llm=llm, events=sink)
    with anyio.CancelScope() as scope:
        sink.scope = scope
        await runner.run(generate())
    assert scope.cancelled_caught
    (run,) = (await stores.runs.list_runs("c")).items
    stored = await stores.runs.events(run.run_id)
    assert stored[-1].type == "run.finished"
    log = EventLog()
    log.extend(sink.events)
    assert log.events(run.run_id) == stored  # every event reached the sink


async def test_seq_restarts_per_run() -> None:
    stores = InMemoryStores()
    await profile(stores)
    sink = RecordingSink()
    runner = runner_with(stores, build(), ScriptedMainLlm(), sink)
    first = await runner.run(generate("a"))
    second = await runner.run(generate("b"))
    for run in (first, second):
        check_seq([e for e in sink.events if e.run_id == run.run.run_id])


async def test_event_log_dedupes_reorders_and_reports_gaps() -> None:
    stores = InMemoryStores()
    await profile(stores)
    sink = RecordingSink()
    runner = runner_with(stores, build(), ScriptedMainLlm(), sink)
    run_a = (await runner.run(generate("a"))).run.run_id
    run_b = (await runner.run(generate("b"))).run.run_id
    events = list(sink.events)
    rng = random.Random(3)
    shuffled = events + rng.sample(events, len(events) // 2)
    rng.shuffle(shuffled)

    log = EventLog()
    added = log.extend(shuffled)
    assert added == len(events)
    assert log.add(events[0]) is False
    assert log.events(run_a) == [e for e in events if e.run_id == run_a]
    assert log.events(run_b) == [e for e in events if e.run_id == run_b]
    assert log.events() == sorted(events, key=lambda e: (e.run_id, e.seq))
    assert log.missing(run_a) == []
    assert log.missing("unknown") == []

    gappy = EventLog()
    of_a = [e for e in events if e.run_id == run_a]
    gappy.extend(e for e in of_a if e.seq not in (2, 5))
    assert gappy.missing(run_a) == [2, 5]
    gappy.extend(of_a)
    assert gappy.missing(run_a) == []
    assert gappy.events(run_a) == of_a
