"""The client-side event log: run events deduplicated and ordered by ``seq``."""

from __future__ import annotations

from collections.abc import Iterable

from ..model import RunEvent

__all__ = ["EventLog"]


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
