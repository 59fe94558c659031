"""One active run per chat branch, across every process that opens the file.

A branch's holder and its waiters are rows of ``branch_queue``, served in ticket order
(first come, first served). Each row carries a lease (``expires_at``, unix seconds) that
its process renews, the holder from a task running beside the held block, a waiter
while it polls. A row whose lease ran out belongs to a process that stopped (it died or
hung): the others skip it and the next write on the branch deletes it. Closing the stores
deletes the rows of their holders and waiters at once (see ``Database.close``).
"""

from __future__ import annotations

import logging
import sqlite3
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial

import anyio

from ...errors import StoreError
from .._branch_hold import beside, branch_busy
from ._db import Database

__all__ = ["BranchHolds"]

_log = logging.getLogger("opsrun.stores.sqlite")

_QUEUE = "SELECT owner, expires_at FROM branch_queue WHERE chat_id = ? AND branch_id = ?"


def _enqueue(
    chat_id: str,
    branch_id: str,
    owner: str,
    now: float,
    lease: float,
    wait: bool,
    conn: sqlite3.Connection,
) -> None:
    """Add ``owner`` at the end of the branch's queue (refused if busy and not ``wait``)."""
    conn.execute(
        "DELETE FROM branch_queue WHERE chat_id = ? AND branch_id = ? AND expires_at < ?",
        (chat_id, branch_id, now),
    )
    if not wait and conn.execute(_QUEUE + " LIMIT 1", (chat_id, branch_id)).fetchone():
        raise branch_busy(chat_id, branch_id)
    conn.execute(
        "INSERT INTO branch_queue (chat_id, branch_id, owner, expires_at) VALUES (?, ?, ?, ?)",
        (chat_id, branch_id, owner, now + lease),
    )


def _enqueue_first(
    chat_id: str, branch_id: str, owner: str, now: float, lease: float, conn: sqlite3.Connection
) -> bool:
    """Queue ``owner`` and tell whether it heads the queue, in one transaction."""
    _enqueue(chat_id, branch_id, owner, now, lease, True, conn)
    first, _ = _place(chat_id, branch_id, owner, now, conn)
    return first


def _place(
    chat_id: str, branch_id: str, owner: str, now: float, conn: sqlite3.Connection
) -> tuple[bool, float | None]:
    """Whether ``owner`` heads the branch's live queue, and when its own row expires."""
    rows = conn.execute(
        _QUEUE + " AND (expires_at >= ? OR owner = ?) ORDER BY ticket",
        (chat_id, branch_id, now, owner),
    ).fetchall()
    mine = next((expires for who, expires in rows if who == owner), None)
    head = next((who for who, expires in rows if expires >= now), None)
    return head == owner, mine


def _renew(owner: str, now: float, lease: float, conn: sqlite3.Connection) -> bool:
    """Extend ``owner``'s lease unless it already ran out; True when renewed."""
    renewed = conn.execute(
        "UPDATE branch_queue SET expires_at = ? WHERE owner = ? AND expires_at >= ?",
        (now + lease, owner, now),
    ).rowcount
    return bool(renewed)


def _requeue(
    chat_id: str, branch_id: str, owner: str, now: float, lease: float, conn: sqlite3.Connection
) -> None:
    """Renew a waiter's lease; one whose lease ran out queues again at the end."""
    if not _renew(owner, now, lease, conn):
        conn.execute("DELETE FROM branch_queue WHERE owner = ?", (owner,))
        _enqueue(chat_id, branch_id, owner, now, lease, True, conn)


def _dequeue(
    chat_id: str, branch_id: str, owner: str, now: float, conn: sqlite3.Connection
) -> None:
    """Remove ``owner``'s row, and rows of the branch whose lease ran out."""
    conn.execute(
        "DELETE FROM branch_queue WHERE owner = ?"
        " OR (chat_id = ? AND branch_id = ? AND expires_at < ?)",
        (owner, chat_id, branch_id, now),
    )


class BranchHolds:
    """Holds chat branches through ``branch_queue`` (see the module docstring)."""

    def __init__(
        self,
        db: Database,
        *,
        lease_seconds: float,
        poll_interval: tuple[float, float] = (0.002, 0.05),
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._db = db
        self._lease = lease_seconds
        self._poll = poll_interval
        self._clock = clock

    @asynccontextmanager
    async def hold(self, chat_id: str, branch_id: str, *, wait: bool) -> AsyncIterator[None]:
        """Hold the branch for the block; wait for earlier holders or refuse at once.

        An exception of the block reaches the caller unchanged. Closing the stores
        releases the branch, also while the block still runs.

        Raises:
            StoreError: ``wait`` is False and the branch is held (code ``branch_busy``),
                the stores were closed (``store_closed``), or the database failed.
        """
        owner = uuid.uuid4().hex
        self._db.branch_owners.add(owner)  # before its row exists: closing deletes it
        try:
            if not wait:
                enqueue = partial(_enqueue, chat_id, branch_id, owner)
                await self._db.write(partial(enqueue, self._clock(), self._lease, False))
            else:  # the common case, a free branch, is one write
                queue = partial(_enqueue_first, chat_id, branch_id, owner)
                if not await self._db.write(partial(queue, self._clock(), self._lease)):
                    await self._wait_turn(chat_id, branch_id, owner)
            async with beside(partial(self._keep, chat_id, branch_id, owner)):
                yield
        finally:
            with anyio.CancelScope(shield=True):
                await self._release(chat_id, branch_id, owner)

    async def _wait_turn(self, chat_id: str, branch_id: str, owner: str) -> None:
        delay, longest = self._poll
        while True:
            now = self._clock()
            first, expires = await self._db.read(partial(_place, chat_id, branch_id, owner, now))
            if expires is None or expires < now + self._lease / 2:
                renew = partial(_requeue, chat_id, branch_id, owner)
                await self._db.write(partial(renew, self._clock(), self._lease))
                continue
            if first:
                return
            await anyio.sleep(delay)
            delay = min(delay * 2, longest)

    async def _keep(self, chat_id: str, branch_id: str, owner: str) -> None:
        """Renew the holder's lease every third of it while the block runs (until the
        stores close, which releases the branch)."""
        while True:
            await anyio.sleep(self._lease / 3)
            try:
                kept = await self._db.write(partial(_renew, owner, self._clock(), self._lease))
            except StoreError as exc:  # the next renewal may succeed; the lease has slack
                if self._db.closed:
                    return
                _log.warning("could not renew the hold of %s/%s: %s", chat_id, branch_id, exc)
                continue
            if not kept:
                _log.warning(
                    "the hold of chat %r branch %r ran out before it was renewed; another "
                    "run may hold the branch now",
                    chat_id,
                    branch_id,
                )
                return

    async def _release(self, chat_id: str, branch_id: str, owner: str) -> None:
        """Delete ``owner``'s row; once the stores are closed, closing deleted it."""
        try:
            if not self._db.closed:
                await self._db.write(partial(_dequeue, chat_id, branch_id, owner, self._clock()))
        except StoreError as exc:  # closed meanwhile (which deleted it), or its lease runs out
            if not self._db.closed:
                _log.warning("could not release a branch hold: %s", exc)
        finally:
            self._db.branch_owners.discard(owner)
