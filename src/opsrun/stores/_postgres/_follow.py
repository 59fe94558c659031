"""Following a run's events across processes: ``LISTEN`` here, ``NOTIFY`` from the writers.

Every write that a follower must see (appended events, a deleted run, a turn taken over)
notifies the run's channel in its own transaction, so the notification arrives once the
write is committed. A follower listens on a connection of its own, outside the pool (a
pooled connection would carry the ``LISTEN`` to other callers), and then reads the
stored events after the last one it yielded: once when it starts listening, so nothing
committed before is missed, and again after each notification. Notifications carry no
data; they only say "read again", so a lost or merged one costs nothing.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass
from functools import partial

import psycopg

from ...errors import NotFound
from ...model import RunEvent, RunFinished
from ._db import Database, wait_readable
from ._schema import Conn, advisory_key

__all__ = ["RunState", "channel", "follow", "notify"]


@dataclass(frozen=True, slots=True)
class RunState:
    """What a follower needs to know of a run besides its events."""

    finished_seq: int | None
    """The ``seq`` of its stored ``run.finished`` event, if stored."""
    taken_over: bool
    """True when its turn went to a retry after its process died (it will not finish)."""


ReadRun = Callable[[Conn, str, int], tuple[RunState | None, list[RunEvent]]]
"""Reads a run's state (None when there is no such run) and its events after a seq."""


def channel(schema: str, run_id: str) -> str:
    """The notification channel of a run (a name well within PostgreSQL's 63 bytes)."""
    return f"opsrun_{advisory_key(schema, 'run', run_id) & (2**64 - 1):016x}"


def notify(conn: Conn, schema: str, run_ids: Sequence[str]) -> None:
    """Wake the followers of ``run_ids`` once the current transaction commits."""
    channels = [channel(schema, run_id) for run_id in run_ids]
    conn.execute("SELECT pg_notify(c, '') FROM unnest(%s::text[]) AS c", (channels,))


def _read(
    read: ReadRun, run_id: str, after_seq: int, conn: Conn
) -> tuple[RunState | None, list[RunEvent]]:
    return read(conn, run_id, after_seq)


async def _notified(db: Database, listener: Conn) -> None:
    """Wait for at least one notification (or anything else) on ``listener``.

    Raises:
        StoreError: the connection was lost (``store_unavailable``).
    """
    await wait_readable(listener.fileno())
    try:
        listener.pgconn.consume_input()
        while listener.pgconn.notifies() is not None:
            pass
    except psycopg.Error as exc:
        raise db.translate(exc) from exc


async def follow(
    db: Database, run_id: str, after_seq: int, read: ReadRun
) -> AsyncGenerator[RunEvent, None]:
    """Yield the run's events after ``after_seq`` as they are stored, until the run ends.

    Raises:
        NotFound: there is no such run, or it was deleted while followed.
        StoreError: PostgreSQL failed, or the listening connection was lost.
    """
    listener = await db.listen(channel(db.schema, run_id))
    try:
        seen = after_seq
        while True:
            reading = partial(_read, read, run_id, seen)
            state, batch = await db.call(reading, transaction=False)
            if state is None:
                raise NotFound(f"no run {run_id!r}")
            for event in batch:
                yield event
                seen = event.seq
                if isinstance(event, RunFinished):
                    return
            if batch:
                continue  # more may have come meanwhile: read again before waiting
            if state.finished_seq is not None or state.taken_over:
                return  # finished at or before after_seq, or taken over: nothing will come
            with db.until_closed():  # closed stores: the next read raises store_closed
                await _notified(db, listener)
    finally:
        listener.close()
