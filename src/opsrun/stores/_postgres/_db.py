"""The connections of the PostgreSQL stores: two psycopg pools, used from worker threads.

psycopg's async API runs on asyncio only, so the stores call its blocking API in worker
threads (``anyio.to_thread``) and run on asyncio and trio alike. Each store call takes a
connection of the calls' pool (``max_size``) for one transaction; a capacity limiter of
as many tokens gates the calls, so a call waits for another call's connection in the
event loop (where it can be cancelled), not in a worker thread. Branch holds take their
connections from a pool of their own (``max_holds``), so holders and waiters never
starve the calls a run makes. A started transaction is never abandoned: a cancelled
caller waits for it to commit or roll back.
"""

from __future__ import annotations

import math
import os
import select
import socket
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import anyio
import anyio.lowlevel
import psycopg
import pydantic
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg.pq import ConnStatus
from psycopg_pool import ConnectionPool, PoolClosed, PoolTimeout

from ...errors import ConfigError, StoreError
from ._schema import Conn, check_version, migrate

__all__ = ["Database", "HeldConnection", "check_idle", "wait_readable"]

T = TypeVar("T")

# SQLSTATE classes and codes that mean "try again later" rather than "this is broken".
_UNAVAILABLE_CLASSES = frozenset({"08", "53", "57"})  # connection, resources, operator
_BUSY = frozenset({"40001", "40P01", "55P03", "57014"})  # serialization, deadlock, locks


async def wait_readable(fd: int) -> None:
    """Wait until the socket ``fd`` has data to read (or was closed by its peer)."""
    wait = getattr(anyio, "wait_readable", None)
    if wait is not None:
        await wait(fd)
        return
    # anyio < 4.7 waits on socket objects only: wait on a duplicate of the descriptor.
    with socket.socket(fileno=os.dup(fd)) as sock:
        await anyio.wait_socket_readable(sock)


def check_idle(conn: Conn) -> None:
    """Check a pooled connection as a call takes it, without a round trip when it is quiet.

    An idle connection receives nothing unless the server ended it (a restart, an
    administrator's ``pg_terminate_backend``, an idle timeout), which it announces with
    a message or by closing the socket. So a connection whose socket has nothing to
    read is used as it is; one that has is checked with an empty query, which fails
    on a dead connection and makes the pool replace it.

    Raises:
        psycopg.Error: the connection does not work.
    """
    if conn.closed or conn.pgconn.status != ConnStatus.OK:
        raise psycopg.OperationalError("the connection is closed")
    if _readable(conn.fileno()):
        ConnectionPool.check_connection(conn)


def _readable(fd: int) -> bool:
    """Whether ``fd`` has something to read or was closed, without waiting."""
    if hasattr(select, "poll"):  # not limited to descriptors below FD_SETSIZE
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        return bool(poller.poll(0))
    readable, _, _ = select.select([fd], [], [], 0)  # Windows
    return bool(readable)


def _connect_kwargs(dsn: str, timeout: float) -> dict[str, Any]:
    """Connection parameters the stores add unless the DSN sets them.

    Raises:
        ConfigError: ``dsn`` is not a PostgreSQL connection string.
    """
    try:
        given = conninfo_to_dict(dsn)
    except psycopg.Error as exc:
        raise ConfigError(
            f"not a PostgreSQL connection string: {exc}", details={"field": "dsn"}
        ) from exc
    defaults = {"application_name": "opsrun", "connect_timeout": max(1, math.ceil(timeout))}
    return {key: value for key, value in defaults.items() if key not in given}


def _close_pools(*pools: ConnectionPool[Conn]) -> None:
    """Close ``pools`` (blocking)."""
    for pool in pools:
        pool.close()


@dataclass(frozen=True, slots=True)
class _Open:
    """What an open database has: the pools and the limits on their use."""

    pool: ConnectionPool[Conn]
    """Connections of store calls."""
    hold_pool: ConnectionPool[Conn]
    """Connections of branch holds."""
    calls: anyio.CapacityLimiter
    """Store calls in progress (each holds one pooled connection)."""
    holds: anyio.Semaphore
    """Branch holds and waiters (each holds one pooled connection)."""
    hold_threads: anyio.CapacityLimiter
    """Worker threads of branch holds (one each at a time)."""


class HeldConnection:
    """A pooled connection that a branch hold keeps, and the threads that use it."""

    def __init__(self, conn: Conn, db: Database, limiter: anyio.CapacityLimiter) -> None:
        self.conn = conn
        self._db = db
        self._limiter = limiter

    async def run(self, fn: Callable[..., T], *args: object, abandon_on_cancel: bool = False) -> T:
        """Run ``fn(*args)`` in a worker thread (see :meth:`Database.in_thread`).

        Raises:
            StoreError: PostgreSQL failed.
        """
        return await self._db.in_thread(
            fn, *args, limiter=self._limiter, abandon_on_cancel=abandon_on_cancel
        )


class Database:
    """A pool of connections to one PostgreSQL database and the schema the stores use.

    Nothing connects until :meth:`open`.

    Raises:
        ConfigError: ``dsn`` is not a PostgreSQL connection string.
    """

    def __init__(
        self,
        dsn: str,
        *,
        schema: str,
        min_size: int,
        max_size: int,
        max_holds: int,
        timeout: float,
    ) -> None:
        self.dsn = dsn
        self.schema = schema
        self._min_size = min_size
        self._max_size = max_size
        self._max_holds = max_holds
        self._timeout = timeout
        self._kwargs = _connect_kwargs(dsn, timeout)
        self._open_state: _Open | None = None
        self._state: Literal["new", "open", "closed"] = "new"
        self._waits: set[anyio.CancelScope] = set()
        self._opening: anyio.Lock | None = None
        """Serialises :meth:`open` (made by its first call, inside the event loop)."""

    @property
    def state(self) -> Literal["new", "open", "closed"]:
        """``new`` until opened, then ``open``, then ``closed``."""
        return self._state

    # --- lifecycle ---------------------------------------------------------------------

    def connect(self) -> Conn:
        """A new connection of its own, in autocommit mode (blocking)."""
        return psycopg.Connection.connect(self.dsn, autocommit=True, **self._kwargs)

    async def open(self, *, apply_migrations: bool) -> None:
        """Check (or migrate) the schema over a first connection, then start the pools.

        Raises:
            StoreError: the server cannot be reached (``store_unavailable``), the schema
                is outdated (``schema_outdated``) or newer (``schema_too_new``) or its
                version is not an integer (``store_corrupt``), the stores were closed
                (``store_closed``), or PostgreSQL failed.
        """
        if self._opening is None:
            self._opening = anyio.Lock()
        # Concurrent openers queue here: the first starts the pools, the others find
        # them started.
        async with self._opening:
            if self._state == "open":
                return
            self._check_not_closed()
            # Pools that started are closed, not lost, when the caller was cancelled or
            # the stores were closed meanwhile; the stores may then be opened again.
            with anyio.CancelScope(shield=True):
                pool, hold_pool = await anyio.to_thread.run_sync(self._open, apply_migrations)
            try:
                await anyio.lowlevel.checkpoint_if_cancelled()
                self._check_not_closed()
            except BaseException:
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(_close_pools, pool, hold_pool)
                raise
            # The limiters belong to the event loop the stores serve: made here, inside it.
            self._open_state = _Open(
                pool=pool,
                hold_pool=hold_pool,
                calls=anyio.CapacityLimiter(self._max_size),
                holds=anyio.Semaphore(self._max_holds),
                hold_threads=anyio.CapacityLimiter(self._max_holds),
            )
            self._state = "open"

    def _open(self, apply_migrations: bool) -> tuple[ConnectionPool[Conn], ConnectionPool[Conn]]:
        try:
            with self.connect() as conn:
                if apply_migrations:
                    migrate(conn, self.schema)
                else:
                    check_version(conn, self.schema)
        except psycopg.Error as exc:
            raise self.translate(exc) from exc
        pool = self._pool("calls", self._min_size, self._max_size, workers=2)
        hold_pool = self._pool("holds", 0, self._max_holds, workers=1)
        # Waiting for the first connections makes ``open`` fail fast on a bad pool and keeps
        # the pool's own threads quiet once the stores are handed over.
        try:
            pool.open(wait=True, timeout=self._timeout)
        except PoolTimeout as exc:
            pool.close()
            raise self.translate(exc) from exc
        hold_pool.open()
        return pool, hold_pool

    def _pool(
        self, name: str, min_size: int, max_size: int, *, workers: int
    ) -> ConnectionPool[Conn]:
        return ConnectionPool(
            self.dsn,
            kwargs={"autocommit": True, **self._kwargs},
            min_size=min_size,
            max_size=max_size,
            timeout=self._timeout,
            # A connection the server dropped (a restart) is replaced instead of failing
            # a call; a quiet one is used without a round trip (see check_idle).
            check=check_idle,
            name=f"opsrun.{self.schema}.{name}",
            num_workers=workers,
            open=False,
        )

    async def migrate(self) -> int:
        """Apply the migrations the schema lacks over a connection of its own.

        Raises:
            StoreError: the server cannot be reached (``store_unavailable``), the schema
                is newer than this release (``schema_too_new``) or its version is not an
                integer (``store_corrupt``), or PostgreSQL failed.
        """

        def run() -> int:
            try:
                with self.connect() as conn:
                    return migrate(conn, self.schema)
            except psycopg.Error as exc:
                raise self.translate(exc) from exc

        return await anyio.to_thread.run_sync(run)

    async def close(self) -> None:
        """Close the pools (waits for calls in progress) and end the waits of
        :meth:`until_closed`; later calls raise ``store_closed``."""
        opened, self._open_state, self._state = self._open_state, None, "closed"
        for scope in self._waits:
            scope.cancel()
        if opened is not None:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(_close_pools, opened.pool, opened.hold_pool)

    @contextmanager
    def until_closed(self) -> Iterator[None]:
        """A block that :meth:`close` ends: it is cancelled, and the code after it runs.

        For waits outside the pools (a follower's wait for notifications), which closing
        the pools would not end.
        """
        scope = anyio.CancelScope()
        if self._state == "closed":
            scope.cancel()
        self._waits.add(scope)
        try:
            with scope:
                yield
        finally:
            self._waits.discard(scope)

    def _check_not_closed(self) -> None:
        if self._state == "closed":
            raise StoreError(
                f"the PostgreSQL stores of schema {self.schema!r} are closed",
                code="store_closed",
                details={"schema": self.schema, "state": "closed"},
            )

    def _ready(self) -> _Open:
        self._check_not_closed()
        if self._open_state is None:
            raise StoreError(
                f"the PostgreSQL stores of schema {self.schema!r} are not open yet: use "
                "`async with PostgresStores(...)` or `await stores.open()`",
                code="store_closed",
                details={"schema": self.schema, "state": "new"},
            )
        return self._open_state

    # --- calls -------------------------------------------------------------------------

    async def call(self, fn: Callable[[Conn], T], *, transaction: bool = True) -> T:
        """Run ``fn`` in one transaction on a pooled connection, in a worker thread.

        The transaction commits when ``fn`` returns and rolls back when it raises (a
        ``StoreError`` that ``fn`` raises reaches the caller unchanged). ``fn`` that runs
        one statement, atomic by itself, passes ``transaction=False``: that saves the
        round trips of ``BEGIN`` and ``COMMIT``.

        Raises:
            StoreError: the stores are not open, PostgreSQL failed, no connection came
                within ``timeout`` (``store_unavailable``), or ``fn`` refused the write.
        """
        opened = self._ready()
        call = self._call if transaction else self._single
        return await anyio.to_thread.run_sync(call, opened.pool, fn, limiter=opened.calls)

    def _call(self, pool: ConnectionPool[Conn], fn: Callable[[Conn], T]) -> T:
        try:
            with pool.connection() as conn, conn.transaction():
                return fn(conn)
        except (psycopg.Error, pydantic.ValidationError) as exc:
            raise self.translate(exc) from exc

    def _single(self, pool: ConnectionPool[Conn], fn: Callable[[Conn], T]) -> T:
        try:
            with pool.connection() as conn:
                return fn(conn)
        except (psycopg.Error, pydantic.ValidationError) as exc:
            raise self.translate(exc) from exc

    async def in_thread(
        self,
        fn: Callable[..., T],
        *args: object,
        limiter: anyio.CapacityLimiter,
        abandon_on_cancel: bool = False,
    ) -> T:
        """Run ``fn(*args)`` in a worker thread of ``limiter``, outside any transaction.

        Raises:
            StoreError: PostgreSQL failed.
        """

        def run() -> T:
            try:
                return fn(*args)
            except psycopg.Error as exc:
                raise self.translate(exc) from exc

        return await anyio.to_thread.run_sync(
            run, limiter=limiter, abandon_on_cancel=abandon_on_cancel
        )

    @asynccontextmanager
    async def hold_connection(
        self, first: Callable[[Conn], T], last: Callable[[Conn], None]
    ) -> AsyncIterator[tuple[HeldConnection, T]]:
        """A pooled connection for one branch hold, and what ``first(conn)`` returned.

        ``first`` runs in the thread that takes the connection, ``last`` in the one that
        gives it back to the pool (also when ``first`` failed). At most ``max_holds``
        are out at once; more callers wait here, cancellably. A connection that the
        block closed is replaced by the pool. The connection works, and goes back, even
        if the stores are closed meanwhile.

        Raises:
            StoreError: the stores are not open, no connection came within ``timeout``
                (``store_unavailable``), or PostgreSQL failed.
        """
        opened = self._ready()
        pool = opened.hold_pool

        def give_back(conn: Conn) -> None:
            try:
                last(conn)
            finally:
                pool.putconn(conn)

        def take() -> tuple[Conn, T]:
            conn = pool.getconn()
            try:
                return conn, first(conn)
            except BaseException:
                give_back(conn)
                raise

        async with opened.holds:
            conn, result = await self.in_thread(take, limiter=opened.hold_threads)
            try:
                yield HeldConnection(conn, self, opened.hold_threads), result
            finally:
                with anyio.CancelScope(shield=True):
                    await self.in_thread(give_back, conn, limiter=opened.hold_threads)

    async def listen(self, channel: str) -> Conn:
        """A new connection of its own that listens on ``channel`` (autocommit).

        The caller closes it.

        Raises:
            StoreError: the stores are not open, or PostgreSQL failed.
        """
        self._ready()

        def run() -> Conn:
            conn = self.connect()
            try:
                conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
            except BaseException:
                conn.close()
                raise
            return conn

        limiter = anyio.to_thread.current_default_thread_limiter()
        return await self.in_thread(run, limiter=limiter)

    # --- errors ------------------------------------------------------------------------

    def translate(self, exc: Exception) -> StoreError:
        """A ``StoreError`` for a foreign exception raised inside a store call."""
        if isinstance(exc, StoreError):
            return exc
        details: dict[str, Any] = {"schema": self.schema}
        if isinstance(exc, pydantic.ValidationError):
            details["errors"] = [e["msg"] for e in exc.errors()[:5]]
            return StoreError(
                f"a stored record does not parse: {exc.error_count()} error(s)",
                code="store_corrupt",
                details=details,
            )
        if isinstance(exc, PoolClosed):
            details["state"] = "closed"
            return StoreError(
                f"the PostgreSQL stores of schema {self.schema!r} are closed",
                code="store_closed",
                details=details,
            )
        sqlstate = getattr(exc, "sqlstate", None)
        details["sqlstate"] = sqlstate
        if sqlstate in _BUSY:
            code = "store_busy"
        elif isinstance(exc, PoolTimeout) or (
            isinstance(exc, psycopg.OperationalError)
            and (sqlstate is None or sqlstate[:2] in _UNAVAILABLE_CLASSES)
        ):
            code = "store_unavailable"
        else:
            code = "store_error"
        return StoreError(f"PostgreSQL: {exc}", code=code, details=details)
