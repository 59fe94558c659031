"""One active run per chat branch, across every process that uses the schema.

A holder takes a transaction-scoped advisory lock (``pg_advisory_xact_lock``) keyed by the
schema, chat and branch, on a pooled connection it keeps for the whole hold; ending the
transaction releases the lock. PostgreSQL also releases it when the connection ends, so
a branch is free as soon as its holder's process dies (the kernel closes its socket) or
its host stops answering TCP keepalives. No lease to renew, no table row to clean up.

The transaction takes no snapshot and writes nothing, so keeping it open does not hold
back vacuum; it turns off the session's idle-in-transaction and statement timeouts for
itself only. Waiters of one process queue on a local lock first, so a process spends at
most one connection per branch; across processes they queue in PostgreSQL's lock queue,
in arrival order. A waiter that gives up (is cancelled) has its statement cancelled on
the server.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial

import anyio
import anyio.from_thread
import psycopg
from psycopg import sql
from psycopg.pq import ConnStatus, TransactionStatus

from ...errors import StoreError
from .._branch_hold import beside, branch_busy
from ._db import Database, HeldConnection, wait_readable
from ._schema import Conn, advisory_key

__all__ = ["BranchHolds"]

_log = logging.getLogger("opsrun.stores.postgres")

HOLD_APPLICATION_NAME = "opsrun branch hold"
"""``application_name`` of a connection while it holds or waits for a branch."""


def _begin_and_try(conn: Conn, key: int, keepalive: int | None) -> bool:
    """Start the hold's transaction, with settings that last as long as it does, and try
    the lock: one round trip. True when the lock is taken.

    A simple query (no parameters: the values are literals) leaves no portal, so the
    transaction keeps no snapshot once it returns.
    """
    settings = [
        ("idle_in_transaction_session_timeout", "0"),
        ("statement_timeout", "0"),
        ("lock_timeout", "0"),
        ("application_name", HOLD_APPLICATION_NAME),
    ]
    if keepalive is not None:  # the server notices a vanished host after ~2x keepalive
        settings += [
            ("tcp_keepalives_idle", str(keepalive)),
            ("tcp_keepalives_interval", str(max(1, keepalive // 3))),
            ("tcp_keepalives_count", "3"),
        ]
    query = sql.SQL("BEGIN; SELECT {}; SELECT pg_try_advisory_xact_lock({})").format(
        sql.SQL(", ").join(
            sql.SQL("set_config({}, {}, true)").format(sql.Literal(name), sql.Literal(value))
            for name, value in settings
        ),
        sql.Literal(key),
    )
    cursor = conn.execute(query, prepare=False)
    while cursor.nextset():  # the last statement's result
        pass
    row = cursor.fetchone()
    return row is not None and bool(row[0])


def _held(conn: Conn) -> None:
    """Leave the hold's transaction without a snapshot.

    A statement with parameters leaves its portal open, and the portal its snapshot
    (which holds back vacuum), until the next statement: one without parameters, sent
    as a simple query, closes it.
    """
    conn.execute("SELECT", prepare=False)


def _end(conn: Conn) -> None:
    """End the hold's transaction (releasing the lock); close a connection that fails."""
    if conn.closed:
        return
    try:
        if conn.pgconn.transaction_status != TransactionStatus.IDLE:
            conn.execute("ROLLBACK")
    except psycopg.Error as exc:  # the lock ended with the session anyway
        _log.warning("could not end a branch hold cleanly: %s", exc)
        conn.close()


class BranchHolds:
    """Holds chat branches with advisory locks (see the module docstring)."""

    def __init__(self, db: Database, *, keepalive: int | None) -> None:
        self._db = db
        self._keepalive = keepalive
        self._local: dict[int, tuple[anyio.Lock, int]] = {}
        """Per branch key: the lock its holders and waiters in this process queue on, and
        how many of them there are."""

    @asynccontextmanager
    async def hold(self, chat_id: str, branch_id: str, *, wait: bool) -> AsyncIterator[None]:
        """Hold the branch for the block; wait for earlier holders or refuse at once.

        An exception of the block reaches the caller unchanged.

        Raises:
            StoreError: ``wait`` is False and the branch is held (code ``branch_busy``),
                or PostgreSQL failed.
        """
        key = advisory_key(self._db.schema, "branch", chat_id, branch_id)
        # Taking the connection tries the lock, and giving it back ends the hold's
        # transaction, each in the same thread hop.
        try_lock = partial(_begin_and_try, key=key, keepalive=self._keepalive)
        async with (
            self._local_turn(key, chat_id, branch_id, wait=wait),
            self._db.hold_connection(try_lock, _end) as (held, locked),
        ):
            if not locked:
                if not wait:
                    raise branch_busy(chat_id, branch_id)
                await self._wait_for_lock(held, key)
            async with beside(partial(self._watch, held.conn, chat_id, branch_id)):
                yield

    @asynccontextmanager
    async def _local_turn(
        self, key: int, chat_id: str, branch_id: str, *, wait: bool
    ) -> AsyncIterator[None]:
        """Queue behind this process's other holders and waiters of the branch."""
        lock, users = self._local.get(key, (None, 0))
        if lock is None:
            lock = anyio.Lock()
        if not wait and lock.locked():
            raise branch_busy(chat_id, branch_id)
        self._local[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._local[key]
            if users == 1:
                del self._local[key]
            else:
                self._local[key] = (lock, users - 1)

    async def _wait_for_lock(self, held: HeldConnection, key: int) -> None:
        """Take the lock that the hold's transaction (begun) found taken, waiting in
        PostgreSQL's queue; a cancelled caller cancels the statement on the server,
        waits for the thread and closes the connection."""
        conn, finished = held.conn, anyio.Event()

        def take() -> None:
            try:
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (key,))
                _held(conn)
            finally:
                anyio.from_thread.run_sync(finished.set)

        try:
            await held.run(take, abandon_on_cancel=True)
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                if not finished.is_set():
                    try:
                        await held.run(conn.cancel_safe)
                    except StoreError as exc:  # closing the connection below ends it anyway
                        _log.warning("could not cancel a branch wait: %s", exc)
                await finished.wait()
                conn.close()  # may hold the lock or a stray cancel request: never reused
            raise

    async def _watch(self, conn: Conn, chat_id: str, branch_id: str) -> None:
        """Warn if the server ends the hold's connection while the block runs."""
        while True:
            await wait_readable(conn.fileno())
            try:
                conn.pgconn.consume_input()
                if conn.pgconn.status == ConnStatus.OK:
                    continue
            except psycopg.Error:
                pass
            _log.warning(
                "the connection holding chat %r branch %r was lost; another run may hold "
                "the branch now",
                chat_id,
                branch_id,
            )
            return
