"""One SQLite file shared by every store: its connections, transactions and worker threads.

Blocking ``sqlite3`` calls run in worker threads (``anyio.to_thread``), so the stores work
on asyncio and trio. Writes go through one writer connection, one transaction at a time
(a lock in this process, ``BEGIN IMMEDIATE`` across processes); reads use a second
connection and, in WAL mode, never wait for a writer. A worker thread is never abandoned:
a cancelled caller waits for its transaction to commit or roll back.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Callable
from contextlib import suppress
from typing import TypeVar

import anyio
import pydantic

from ...errors import StoreError
from ._schema import migrate

__all__ = ["Database"]

T = TypeVar("T")

_BUSY_CODES = frozenset({5, 6})  # SQLITE_BUSY, SQLITE_LOCKED (primary result codes)


def _translate(exc: Exception, path: str) -> StoreError:
    """A ``StoreError`` for a foreign exception raised inside a store call."""
    if isinstance(exc, pydantic.ValidationError):
        return StoreError(
            f"a stored record does not parse: {exc.error_count()} error(s)",
            code="store_corrupt",
            details={"path": path, "errors": [e["msg"] for e in exc.errors()[:5]]},
        )
    code = getattr(exc, "sqlite_errorcode", None)
    name = getattr(exc, "sqlite_errorname", None)
    busy = isinstance(code, int) and code & 0xFF in _BUSY_CODES
    return StoreError(
        f"SQLite: {exc}",
        code="store_busy" if busy else "store_error",
        details={"path": path, "sqlite_error": name},
    )


def _connect(path: str, busy_timeout: float) -> sqlite3.Connection:
    # isolation_level=None: no implicit transactions; writes say BEGIN IMMEDIATE themselves.
    # check_same_thread=False: each call runs in some worker thread, under a lock.
    return sqlite3.connect(
        path, timeout=busy_timeout, isolation_level=None, check_same_thread=False
    )


class Database:
    """One SQLite database: a writer connection, a reader connection, the schema.

    Opening applies the pending migrations. ``":memory:"`` (or ``""``) opens a private
    database that lives as long as this object, over a single connection.

    Raises:
        StoreError: the file cannot be opened (``store_error``), another process keeps
            it locked longer than ``busy_timeout`` (``store_busy``), or its schema is
            newer than this release (``schema_too_new``).
    """

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout: float) -> None:
        self.path = os.fspath(path)
        self.private = self.path in (":memory:", "")
        self._closed = False
        try:
            self._writer = _connect(self.path, busy_timeout)
        except sqlite3.Error as exc:
            raise _translate(exc, self.path) from exc
        try:
            if not self.private:
                self._writer.execute("PRAGMA journal_mode = WAL").fetchall()
                self._writer.execute("PRAGMA synchronous = NORMAL")
            migrate(self._writer)
            self._reader = self._writer
            if not self.private:
                self._reader = _connect(self.path, busy_timeout)
                self._reader.execute("PRAGMA query_only = ON")
        except BaseException as exc:
            self._writer.close()
            if isinstance(exc, sqlite3.Error):
                raise _translate(exc, self.path) from exc
            raise
        self._write_lock = threading.Lock()
        self._read_lock = self._write_lock if self.private else threading.Lock()

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called."""
        return self._closed

    def close(self) -> None:
        """Close both connections (waits for a running call); later calls raise."""
        with self._write_lock:
            if self._closed:
                return
            self._closed = True
            if self._reader is not self._writer:
                with self._read_lock:
                    self._reader.close()
            self._writer.close()

    async def read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` on the reader connection in a worker thread.

        Raises:
            StoreError: SQLite failed or a stored record does not parse.
        """
        return await anyio.to_thread.run_sync(self._read, fn)

    async def write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` in one ``BEGIN IMMEDIATE`` transaction on the writer connection.

        The transaction commits when ``fn`` returns and rolls back when it raises (a
        ``StoreError`` that ``fn`` raises reaches the caller unchanged).

        Raises:
            StoreError: SQLite failed, the database stayed locked longer than the busy
                timeout (``store_busy``), or ``fn`` refused the write.
        """
        return await anyio.to_thread.run_sync(self._write, fn)

    def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        with self._read_lock:
            self._check_open()
            try:
                return fn(self._reader)
            except (sqlite3.Error, pydantic.ValidationError) as exc:
                raise _translate(exc, self.path) from exc

    def _write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        with self._write_lock:
            self._check_open()
            conn = self._writer
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    result = fn(conn)
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        with suppress(sqlite3.Error):
                            conn.execute("ROLLBACK")
                    raise
            except (sqlite3.Error, pydantic.ValidationError) as exc:
                raise _translate(exc, self.path) from exc
            return result

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError(
                f"the SQLite stores of {self.path!r} are closed",
                code="store_closed",
                details={"path": self.path},
            )
