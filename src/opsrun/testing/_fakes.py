"""Deterministic clock and ids for tests."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

__all__ = ["FakeClock", "SequentialIds"]


class FakeClock:
    """A clock that only moves when told to (``advance``), or by ``tick`` per reading."""

    def __init__(self, start: datetime | None = None, *, tick: timedelta = timedelta(0)) -> None:
        self.current = start or datetime(2026, 1, 1, tzinfo=UTC)
        self.tick = tick

    def now(self) -> datetime:
        """Return the current fake time (then move it by ``tick``)."""
        value = self.current
        self.current = value + self.tick
        return value

    def advance(self, **delta: float) -> None:
        """Move time forward, e.g. ``clock.advance(seconds=5)``."""
        self.current += timedelta(**delta)


class SequentialIds:
    """Ids ``<kind>_1``, ``<kind>_2``, … (one counter for all kinds)."""

    def __init__(self) -> None:
        self._counter = itertools.count(1)

    def new_id(self, kind: str) -> str:
        """Return the next id."""
        return f"{kind}_{next(self._counter)}"
