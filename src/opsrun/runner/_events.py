"""Event numbering inside a run, and the client-side event log."""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from ..model import RunEvent
from ..ports import Clock, EventSink, RunStore

__all__ = ["EventLog"]

_log = logging.getLogger("opsrun.events")


class EventEmitter:
    """Numbers a run's events 1, 2, … and delivers them in order from one task.

    ``emit`` never waits: events queue in an unbounded memory stream and a single
    pump task hands them to the run store and the sink, so a slow sink cannot
    reorder events or stall operations. ``close`` flushes what is queued.
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
        send, receive = anyio.create_memory_object_stream[RunEvent](math.inf)
        self._send: MemoryObjectSendStream[RunEvent] = send
        self._receive: MemoryObjectReceiveStream[RunEvent] = receive

    def emit(self, event_type: type[Any], **fields: Any) -> RunEvent:
        """Build the next event of ``event_type`` and queue it for delivery."""
        self.seq += 1
        event: RunEvent = event_type(seq=self.seq, ts=self._clock.now(), **self._base, **fields)
        self._send.send_nowait(event)
        return event

    async def pump(self) -> None:
        """Deliver queued events until :meth:`close`; run this in the run's task group."""
        async with self._receive:
            async for event in self._receive:
                batch = [event]
                while True:
                    try:
                        batch.append(self._receive.receive_nowait())
                    except (anyio.WouldBlock, anyio.EndOfStream):
                        break
                await self._store.append_events(event.run_id, batch)
                if self._sink is not None:
                    for item in batch:
                        try:
                            await self._sink.emit(item)
                        except Exception:  # a broken sink must not break the run
                            _log.exception("event sink failed on %s", item.type)

    def close(self) -> None:
        """Stop accepting events; the pump ends after delivering the queue."""
        self._send.close()


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
