"""Event numbering inside a run: one ``seq`` per event, delivered in order."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

import anyio

from ..model import (
    Hook,
    OperationError,
    OperationFinished,
    OperationStarted,
    OperationStatus,
    RunEvent,
    SkippedReason,
)
from ..ports import Clock, EventSink, RunStore

__all__ = ["EventEmitter"]

_log = logging.getLogger("opsrun.events")


class EventEmitter:
    """Numbers a run's events 1, 2, … and delivers them in order from one task.

    ``emit`` never waits: events queue in memory and a single pump task hands them to
    the run store and the sink in batches, so a slow sink cannot reorder events or
    stall operations. After ``close`` the pump ends once the queue is delivered;
    ``flush`` delivers what a cancelled pump left and what was emitted after it ended
    (the record of a run cancelled from outside).
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
        self._templates: dict[type, OperationStarted | OperationFinished] = {}

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
        """Build the next event of ``event_type`` and queue it for delivery."""
        self.seq += 1
        event: RunEvent = event_type(seq=self.seq, ts=self._clock.now(), **self._base, **fields)
        self._queue_event(event)
        return event

    def operation_started(
        self, ts: datetime, hook: Hook, operation_id: str, operation_name: str
    ) -> None:
        """Emit ``operation.started`` stamped ``ts`` (the operation's ``started_at``)."""
        self._emit_operation(
            OperationStarted,
            ts,
            hook=hook,
            operation_id=operation_id,
            operation_name=operation_name,
        )

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
        self._emit_operation(
            OperationFinished,
            ts,
            hook=hook,
            operation_id=operation_id,
            operation_name=operation_name,
            status=status,
            skipped_reason=skipped_reason,
            error=error,
            duration_ms=duration_ms,
        )

    def _emit_operation(
        self, event_type: type[OperationStarted | OperationFinished], ts: object, **fields: Any
    ) -> None:
        """Queue an operation event: validated once per run and type, then copied.

        ``fields`` holds every field that differs between two events of one type in one
        run, each made by the runner from validated models; only the host clock's reading
        can be of another type, and then the event is validated.
        """
        self.seq += 1
        fields["seq"] = self.seq
        fields["ts"] = ts
        template = self._templates.get(event_type)
        if template is None or not isinstance(ts, datetime):
            event: OperationStarted | OperationFinished = event_type(**self._base, **fields)
            self._templates.setdefault(event_type, event)
        else:
            event = template.model_copy(update=fields)
        self._queue_event(event)

    async def pump(self) -> None:
        """Deliver queued events until :meth:`close`; run this in the run's task group."""
        while True:
            if not self._queue:
                if self._closed:
                    return
                self._wakeup = wakeup = anyio.Event()
                await wakeup.wait()
                continue
            await self._deliver()

    async def flush(self) -> None:
        """Deliver what is still queued (after the pump was cancelled, say)."""
        while self._queue:
            await self._deliver()

    async def _deliver(self) -> None:
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
        """End the pump once it has delivered the queue."""
        self._closed = True
        wakeup = self._wakeup
        if wakeup is not None:
            self._wakeup = None
            wakeup.set()
