"""Event numbering inside a run: one ``seq`` per event, delivered in order."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any, Protocol, TypeVar, cast, runtime_checkable

import anyio
import anyio.lowlevel
from pydantic import BaseModel

from ..model import (
    FailedDetails,
    FailedType,
    FinishReason,
    Hook,
    MainLlmDelta,
    MainLlmFinished,
    MainLlmStarted,
    MainLlmStatus,
    OperationError,
    OperationFinished,
    OperationStarted,
    OperationStatus,
    Run,
    RunEvent,
    RunFinished,
    RunPhase,
    RunPhaseChanged,
    RunStarted,
    RunStatus,
    SkippedReason,
)
from ..model._build import Builder, Shape
from ..ports import Clock, EventSink, RunStore

__all__ = ["EventEmitter", "ImmediateEventLog"]

_log = logging.getLogger("opsrun.events")

E = TypeVar("E", bound=BaseModel)

_BASE = ("run_id", "chat_id", "user_message_id", "trigger")
"""The fields every event of a run shares (the emitter's base), besides ``seq`` and ``ts``."""


def _shape(event_type: type[E], *names: str) -> Shape[E]:
    """How events of ``event_type`` are built: the runner gives every field but ``type``."""
    return Builder(event_type).shape((*_BASE, "seq", "ts", *names))


_RUN_STARTED = _shape(RunStarted)
_PHASE_CHANGED = _shape(RunPhaseChanged, "phase")
_OPERATION_STARTED = _shape(OperationStarted, "hook", "operation_id", "operation_name")
_OPERATION_FINISHED = _shape(
    OperationFinished,
    "hook",
    "operation_id",
    "operation_name",
    "status",
    "skipped_reason",
    "error",
    "duration_ms",
)
_MAIN_LLM_STARTED = _shape(MainLlmStarted)
_MAIN_LLM_DELTA = _shape(MainLlmDelta, "text")
_MAIN_LLM_FINISHED = _shape(MainLlmFinished, "status", "finish_reason", "error")
_RUN_FINISHED = _shape(RunFinished, "status", "failed_type", "failed_details")
"""Build each event type from the runner's own values, without validating them again.

Each event type has one emitting method below, which gives exactly the names of its
shape."""


@runtime_checkable
class ImmediateEventLog(Protocol):
    """A run store that appends events at once, without waiting (the in-memory one).

    With such a store and no sink, a run's events need no delivery task: each is
    appended as it is emitted.
    """

    def append_event_now(self, run_id: str, event: RunEvent) -> None:
        """Append one event to the run's log now, as ``RunStore.append_events`` does."""
        ...


_IMMEDIATE: dict[type, bool] = {}
"""Per store class: is it an :class:`ImmediateEventLog`."""


def _immediate(store: RunStore) -> bool:
    """True when ``store`` appends events at once (checked once per store class)."""
    kind = type(store)
    found = _IMMEDIATE.get(kind)
    if found is None:
        found = _IMMEDIATE[kind] = isinstance(store, ImmediateEventLog)
    return found


class EventEmitter:
    """Numbers a run's events 1, 2, … and delivers them in order.

    Each event type has its method (``run_started``, ``phase_changed``…); none of them
    waits. With no sink and a store that appends at once
    (:class:`ImmediateEventLog`), each event is appended as it is emitted. Otherwise
    events queue in memory and one task (the run's helper) hands them on: to the sink
    as soon as it runs (:meth:`send`), to the run store in batches, each event within
    about ``batch_seconds`` of its emission (:meth:`store`, due at :attr:`store_due`),
    so a slow sink cannot reorder events or stall operations and a store that costs a
    round trip per write is written a few times per run, not once per wait.
    :meth:`wait` waits for news (an event to send, a new batch, :meth:`close`), and
    :meth:`flush` delivers everything still queued (what a cancelled delivery left, and
    what was emitted after the helper ended).
    """

    def __init__(
        self,
        run: Run,
        *,
        clock: Clock,
        sink: EventSink | None,
        store: RunStore,
        batch_seconds: float = 0.0,
    ) -> None:
        self._base = {
            "run_id": run.run_id,
            "chat_id": run.chat_id,
            "user_message_id": run.user_message_id,
            "trigger": run.trigger,
        }
        """The fields every event of the run has (``_BASE``)."""
        self._clock = clock
        self._sink = sink
        self._store = store
        self._batch_seconds = batch_seconds
        self.seq = 0
        self._queue: list[RunEvent] = []
        self._wakeup: anyio.Event | None = None
        self._closed = False
        self._stored = 0
        """How many queued events the store already has."""
        self._sent = 0
        """How many queued events the sink was already handed."""
        self.store_due: float | None = None
        """When the events the store lacks are due (event loop time); None: none lacks."""
        self._now = cast(ImmediateEventLog, store) if sink is None and _immediate(store) else None
        """The store, when events are appended as they are emitted."""
        self._run_id = run.run_id

    @property
    def pending(self) -> bool:
        """True while some queued event is not delivered yet (to the store or the sink)."""
        return bool(self._queue)

    @property
    def unsent(self) -> bool:
        """True while the sink lacks some queued event."""
        return self._sink is not None and self._sent < len(self._queue)

    @property
    def unstored(self) -> bool:
        """True while the store lacks some queued event."""
        return self._stored < len(self._queue)

    def _queue_event(self, event: RunEvent) -> None:
        news = self._sink is not None
        if self.store_due is None:  # the first event of a new batch for the store
            self.store_due = anyio.current_time() + self._batch_seconds
            news = True
        self._queue.append(event)
        wakeup = self._wakeup
        if news and wakeup is not None:
            self._wakeup = None
            wakeup.set()

    def run_started(self) -> None:
        """Emit ``run.started``."""
        self._emit(_RUN_STARTED, self._clock.now(), {})

    def phase_changed(self, phase: RunPhase) -> None:
        """Emit ``run.phase_changed``."""
        self._emit(_PHASE_CHANGED, self._clock.now(), {"phase": phase})

    def operation_started(
        self, ts: datetime, hook: Hook, operation_id: str, operation_name: str
    ) -> None:
        """Emit ``operation.started`` stamped ``ts`` (the operation's ``started_at``)."""
        fields = {"hook": hook, "operation_id": operation_id, "operation_name": operation_name}
        self._emit(_OPERATION_STARTED, ts, fields)

    def operation_finished(
        self,
        ts: datetime,
        hook: Hook,
        operation_id: str,
        operation_name: str,
        status: OperationStatus,
        skipped_reason: SkippedReason | None,
        error: OperationError | None,
        duration_ms: float | None,
    ) -> None:
        """Emit ``operation.finished`` stamped ``ts`` (the operation's ``finished_at``)."""
        fields = {
            "hook": hook,
            "operation_id": operation_id,
            "operation_name": operation_name,
            "status": status,
            "skipped_reason": skipped_reason,
            "error": error,
            "duration_ms": duration_ms,
        }
        self._emit(_OPERATION_FINISHED, ts, fields)

    def main_llm_started(self) -> None:
        """Emit ``main_llm.started``."""
        self._emit(_MAIN_LLM_STARTED, self._clock.now(), {})

    def main_llm_delta(self, text: str) -> None:
        """Emit ``main_llm.delta``."""
        self._emit(_MAIN_LLM_DELTA, self._clock.now(), {"text": text})

    def main_llm_finished(
        self, status: MainLlmStatus, finish_reason: FinishReason, error: OperationError | None
    ) -> None:
        """Emit ``main_llm.finished``."""
        fields = {"status": status, "finish_reason": finish_reason, "error": error}
        self._emit(_MAIN_LLM_FINISHED, self._clock.now(), fields)

    def run_finished(
        self,
        status: RunStatus,
        failed_type: FailedType | None,
        failed_details: FailedDetails | None,
    ) -> None:
        """Emit ``run.finished``."""
        fields = {"status": status, "failed_type": failed_type, "failed_details": failed_details}
        self._emit(_RUN_FINISHED, self._clock.now(), fields)

    def _emit(self, shape: Shape[Any], ts: object, fields: dict[str, Any]) -> None:
        """Build the next event (``seq``) of ``shape`` stamped ``ts`` from ``fields`` (every
        field of the event but the run's own and ``type``) and deliver or queue it.

        ``fields`` come from validated models or from the runner, with the types the
        event holds; only a host clock's reading may be of another type, and then the
        event is validated.
        """
        self.seq += 1
        fields["seq"] = self.seq
        fields["ts"] = ts
        event: RunEvent
        if type(ts) is datetime:
            event = shape.build_over(self._base, fields)
        else:
            event = shape.cls(**self._base, **fields)
        if self._now is not None:
            self._now.append_event_now(self._run_id, event)
        else:
            self._queue_event(event)

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called."""
        return self._closed

    async def wait(self) -> None:
        """Return once there is news: an event for the sink, the first event of a new
        batch for the store, or :meth:`close`."""
        if self._closed:
            return
        self._wakeup = wakeup = anyio.Event()
        await wakeup.wait()

    async def flush(self) -> None:
        """Deliver everything still queued, due or not: to the store, then to the sink
        (a slow sink does not keep the record waiting)."""
        while self._queue:
            await self.store()
            await self.send()

    async def send(self, *, one: bool = False) -> None:
        """Hand the sink the queued events it lacks, in order (with ``one``, only the
        next one).

        An event counts as sent once the sink returned, so a delivery cut short by
        cancellation is made again (the shielded flush of an aborted run), and the sink
        may see that event twice. A sink that raises (a stray cancellation included)
        loses that event, not the run. Calls are never concurrent: the run's helper
        task sends while the run goes on, the flush once it has ended.
        """
        sink = self._sink
        if sink is None:
            return
        queue = self._queue
        while self._sent < len(queue):
            item = queue[self._sent]
            try:
                await sink.emit(item)
            except Exception:  # a broken sink must not break the run
                _log.exception("event sink failed on %s", item.type)
            except anyio.get_cancelled_exc_class():
                # A real cancellation goes on here, with the event still unsent.
                await anyio.lowlevel.checkpoint_if_cancelled()
                _log.error("event sink raised a cancellation of its own on %s", item.type)
            self._sent += 1
            if one:
                break
        self._drop_delivered()

    async def store(self) -> None:
        """Append every queued event the store lacks as one batch.

        Events emitted while the batch is written start the next batch. Cancelled, the
        batch stays queued (a retried batch adds nothing twice).
        """
        batch = self._queue[self._stored :]
        if not batch:
            return
        due, self.store_due = self.store_due, None
        try:
            await self._store.append_events(self._run_id, batch)
        except BaseException:
            if due is not None:  # still due then (events emitted since are due later)
                self.store_due = due
            raise
        self._stored += len(batch)
        self._drop_delivered()

    def _drop_delivered(self) -> None:
        """Drop the events both the store and the sink have."""
        done = self._stored if self._sink is None else min(self._stored, self._sent)
        if done:
            del self._queue[:done]
            self._stored -= done
            if self._sink is not None:
                self._sent -= done

    def close(self) -> None:
        """No more events but the run's record: wake :meth:`wait` for good."""
        self._closed = True
        wakeup = self._wakeup
        if wakeup is not None:
            self._wakeup = None
            wakeup.set()
