"""Event numbering inside a run, and the client-side event log."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime
from typing import Any, TypeVar

import anyio
from pydantic import BaseModel

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

__all__ = ["EventLog"]

_log = logging.getLogger("opsrun.events")

M = TypeVar("M", bound=BaseModel)

_setattr = object.__setattr__


def prevalidated(model: type[M], values: dict[str, Any], fields_set: set[str]) -> M:
    """The ``model`` instance with ``values``, built without validating them again.

    For values that already have their field types (taken from validated models or made
    by the runner itself): the result equals what the validating constructor returns
    when given the ``fields_set`` names. ``values`` must hold every field, in field
    order (``__dict__`` order is what ``repr`` shows); the model stays frozen.

    ``fields_set`` is shared, not copied, as ``model_construct(_fields_set=...)`` does:
    pydantic never changes the fields-set of a frozen model (copies get their own).
    """
    instance = object.__new__(model)
    _setattr(instance, "__dict__", values)
    _setattr(instance, "__pydantic_fields_set__", fields_set)
    _setattr(instance, "__pydantic_extra__", None)
    _setattr(instance, "__pydantic_private__", None)
    return instance


_HEAD = ("seq", "ts", "run_id", "chat_id", "user_message_id", "trigger", "type")
_STARTED = (*_HEAD, "hook", "operation_id", "operation_name")
_FINISHED = (*_STARTED, "status", "skipped_reason", "error", "duration_ms")
_RUN_FIELDS = set(_HEAD) - {"seq", "ts", "type"}
"""The fields every event copies from the run (the emitter's ``base``)."""
_STARTED_SET = set(_STARTED) - {"type"}
_FINISHED_SET = set(_FINISHED) - {"type"}
"""The fields the validating constructor would be given (``type`` keeps its default)."""

OPERATION_EVENTS_PREVALIDATED = (
    tuple(OperationStarted.model_fields) == _STARTED
    and tuple(OperationFinished.model_fields) == _FINISHED
)
"""Whether the operation events can skip validation: only while the fields are these."""


class EventEmitter:
    """Numbers a run's events 1, 2, … and delivers them in order from one task.

    ``emit`` never waits: events queue in memory and a single pump task hands them to
    the run store and the sink in batches, so a slow sink cannot reorder events or
    stall operations. ``close`` flushes what is queued.
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
        # Field values of the operation events, in field order, to copy and fill in; the
        # run's own fields come from the run, a validated model.
        self._prevalidated = OPERATION_EVENTS_PREVALIDATED and set(base) == _RUN_FIELDS
        self._started: dict[str, Any] = dict.fromkeys(_STARTED)
        self._started.update(base, type="operation.started")
        self._finished: dict[str, Any] = dict.fromkeys(_FINISHED)
        self._finished.update(base, type="operation.finished")

    def _queue_event(self, event: RunEvent) -> None:
        if self._closed:
            raise anyio.ClosedResourceError
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

    def operation_started(self, hook: Hook, operation_id: str, operation_name: str) -> None:
        """Emit ``operation.started``."""
        self._emit_operation(
            OperationStarted,
            self._started,
            _STARTED_SET,
            hook=hook,
            operation_id=operation_id,
            operation_name=operation_name,
        )

    def operation_finished(
        self,
        hook: Hook,
        operation_id: str,
        operation_name: str,
        status: OperationStatus,
        skipped_reason: SkippedReason | None,
        error: OperationError | None,
        duration_ms: float | None,
    ) -> None:
        """Emit ``operation.finished``."""
        self._emit_operation(
            OperationFinished,
            self._finished,
            _FINISHED_SET,
            hook=hook,
            operation_id=operation_id,
            operation_name=operation_name,
            status=status,
            skipped_reason=skipped_reason,
            error=error,
            duration_ms=duration_ms,
        )

    def _emit_operation(
        self,
        event_type: type[Any],
        template: dict[str, Any],
        fields_set: set[str],
        **fields: Any,
    ) -> None:
        """Queue an operation event, built without revalidation when that is safe."""
        self.seq += 1
        ts = self._clock.now()
        if not (self._prevalidated and isinstance(ts, datetime)):
            # e.g. a host clock of another type: the model validates (or converts) it
            self._queue_event(event_type(seq=self.seq, ts=ts, **self._base, **fields))
            return
        values = template.copy()
        values["seq"] = self.seq
        values["ts"] = ts
        values.update(fields)
        self._queue_event(prevalidated(event_type, values, fields_set))

    async def pump(self) -> None:
        """Deliver queued events until :meth:`close`; run this in the run's task group."""
        while True:
            if not self._queue:
                if self._closed:
                    return
                self._wakeup = wakeup = anyio.Event()
                await wakeup.wait()
                continue
            # Everything queued so far goes out as one batch, in order.
            batch, self._queue = self._queue, []
            await self._store.append_events(batch[0].run_id, batch)
            if self._sink is not None:
                for item in batch:
                    try:
                        await self._sink.emit(item)
                    except Exception:  # a broken sink must not break the run
                        _log.exception("event sink failed on %s", item.type)

    def close(self) -> None:
        """Stop accepting events; the pump ends after delivering the queue."""
        self._closed = True
        wakeup = self._wakeup
        if wakeup is not None:
            self._wakeup = None
            wakeup.set()


class EventLog:
    """Client-side view of run events: duplicates dropped, ordered by ``seq``.

    Feed it events as they arrive (over SSE, after reconnects, out of order);
    :meth:`events` returns each ``(runId, seq)`` once, sorted by ``seq`` per run.
    """

    def __init__(self) -> None:
        self._events: dict[tuple[str, int], RunEvent] = {}

    def add(self, event: RunEvent) -> bool:
        """Record ``event``; return False when it was a duplicate."""
        key = (event.run_id, event.seq)
        if key in self._events:
            return False
        self._events[key] = event
        return True

    def extend(self, events: Iterable[RunEvent]) -> int:
        """Record several events; return how many were new."""
        return sum(self.add(e) for e in events)

    def events(self, run_id: str | None = None) -> list[RunEvent]:
        """Events of one run (or of all runs) ordered by (runId, seq)."""
        keys = sorted(k for k in self._events if run_id is None or k[0] == run_id)
        return [self._events[k] for k in keys]

    def missing(self, run_id: str) -> list[int]:
        """Sequence numbers absent below the highest seen for ``run_id`` (gaps to refetch)."""
        seqs = {seq for rid, seq in self._events if rid == run_id}
        if not seqs:
            return []
        return [s for s in range(1, max(seqs) + 1) if s not in seqs]
