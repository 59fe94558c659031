"""Event numbering inside a run: one ``seq`` per event, delivered in order."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol, cast, runtime_checkable

import anyio
import anyio.lowlevel

from ..model import (
    Hook,
    MainLlmDelta,
    MainLlmFinished,
    MainLlmStarted,
    OperationError,
    OperationFinished,
    OperationStarted,
    OperationStatus,
    RunEvent,
    RunFinished,
    RunPhaseChanged,
    RunStarted,
    SkippedReason,
)
from ..model._build import Builder
from ..ports import Clock, EventSink, RunStore

__all__ = ["EventEmitter", "ImmediateEventLog"]

_log = logging.getLogger("opsrun.events")

_BUILDERS: dict[type[Any], Builder[Any]] = {
    event_type: Builder(event_type)
    for event_type in (
        RunStarted,
        RunPhaseChanged,
        OperationStarted,
        OperationFinished,
        MainLlmStarted,
        MainLlmDelta,
        MainLlmFinished,
        RunFinished,
    )
}
"""Builds each event type from the runner's own values, without validating them again."""


@runtime_checkable
class ImmediateEventLog(Protocol):
    """A run store that appends events at once, without waiting (the in-memory one).

    With such a store and no sink, a run's events need no delivery task: each is
    appended as it is emitted.
    """

    def append_events_now(self, run_id: str, events: Sequence[RunEvent]) -> None:
        """Append events to the run's log now, as ``RunStore.append_events`` does."""
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

    ``emit`` never waits. With no sink and a store that appends at once
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
        *,
        base: dict[str, Any],
        clock: Clock,
        sink: EventSink | None,
        store: RunStore,
        batch_seconds: float = 0.0,
    ) -> None:
        self._base = base
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
        self._run_id: str = base["run_id"]

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

    def emit(self, event_type: type[Any], **fields: Any) -> RunEvent:
        """Build the next event of ``event_type`` and queue it for delivery.

        ``fields`` come from validated models or from the runner, with the types the
        event holds; only a host clock's reading may be of another type, and then the
        event is validated.
        """
        return self._emit(event_type, self._clock.now(), fields)

    def _emit(self, event_type: type[Any], ts: object, fields: dict[str, Any]) -> RunEvent:
        """Build the next event (``seq``) of ``event_type`` stamped ``ts`` and deliver or
        queue it."""
        self.seq += 1
        fields["seq"] = self.seq
        fields["ts"] = ts
        event: RunEvent
        if type(ts) is datetime:
            event = _BUILDERS[event_type].build_over(self._base, fields)
        else:
            event = event_type(**self._base, **fields)
        if self._now is not None:
            self._now.append_events_now(self._run_id, (event,))
        else:
            self._queue_event(event)
        return event

    def operation_started(
        self, ts: datetime, hook: Hook, operation_id: str, operation_name: str
    ) -> None:
        """Emit ``operation.started`` stamped ``ts`` (the operation's ``started_at``)."""
        fields = {"hook": hook, "operation_id": operation_id, "operation_name": operation_name}
        self._emit(OperationStarted, ts, fields)

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
        self._emit(OperationFinished, ts, fields)

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
        cancellation resumes where it stopped. A sink that raises (a stray cancellation
        included) loses that event, not the run.
        """
        sink = self._sink
        if sink is None:
            return
        queue = self._queue
        while self._sent < len(queue):
            item = queue[self._sent]
            self._sent += 1
            try:
                await sink.emit(item)
            except Exception:  # a broken sink must not break the run
                _log.exception("event sink failed on %s", item.type)
            except anyio.get_cancelled_exc_class():
                await anyio.lowlevel.checkpoint_if_cancelled()  # a real one goes on here
                _log.error("event sink raised a cancellation of its own on %s", item.type)
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
