"""Event numbering inside a run: one ``seq`` per event, delivered in order."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol, cast, runtime_checkable

import anyio

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
    events queue in memory and one task (the run's helper) hands them to the run store
    and the sink in batches (:meth:`deliver`), so a slow sink cannot reorder events or
    stall operations; :meth:`wait` waits for the next event or :meth:`close`, and
    ``flush`` delivers what a cancelled delivery left and what was emitted after it
    ended (the record of a run cancelled from outside).
    """

    def __init__(
        self,
        *,
        base: dict[str, Any],
        clock: Clock,
        sink: EventSink | None,
        store: RunStore,
    ) -> None:
        self._base = base
        self._clock = clock
        self._sink = sink
        self._store = store
        self.seq = 0
        self._queue: list[RunEvent] = []
        self._wakeup: anyio.Event | None = None
        self._closed = False
        self._stored = 0
        """How many queued events the store already has."""
        self._sent = 0
        """How many queued events the sink was already handed."""
        self._now = cast(ImmediateEventLog, store) if sink is None and _immediate(store) else None
        """The store, when events are appended as they are emitted."""
        self._run_id: str = base["run_id"]

    @property
    def pending(self) -> bool:
        """True while some queued event is not delivered yet."""
        return bool(self._queue)

    def _queue_event(self, event: RunEvent) -> None:
        self._queue.append(event)
        wakeup = self._wakeup
        if wakeup is not None:
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
        """Return once an event is queued or :meth:`close` was called."""
        if self._queue or self._closed:
            return
        self._wakeup = wakeup = anyio.Event()
        await wakeup.wait()

    async def flush(self) -> None:
        """Deliver what is still queued (after a delivery was cancelled, say)."""
        while self._queue:
            await self.deliver()

    async def deliver(self) -> None:
        """Deliver everything queued so far as one batch, in order.

        Events leave the queue only once the store and the sink have them, so a
        delivery cut short by cancellation resumes where it stopped.
        """
        batch = self._queue[:]
        if self._stored < len(batch):
            await self._store.append_events(batch[0].run_id, batch[self._stored :])
            self._stored = len(batch)
        while self._sink is not None and self._sent < len(batch):
            item = batch[self._sent]
            self._sent += 1
            try:
                await self._sink.emit(item)
            except Exception:  # a broken sink must not break the run
                _log.exception("event sink failed on %s", item.type)
        del self._queue[: len(batch)]
        self._stored = self._sent = 0

    def close(self) -> None:
        """No more events but the run's record: wake :meth:`wait` for good."""
        self._closed = True
        wakeup = self._wakeup
        if wakeup is not None:
            self._wakeup = None
            wakeup.set()
