"""One SQLite file shared by every store: its connections, transactions and worker threads.

Blocking ``sqlite3`` calls run in threads of the stores' own, one per connection
(:mod:`._worker`), so the stores work on asyncio and trio. Writes go through one writer
connection, one transaction at a time (its thread in this process, ``BEGIN IMMEDIATE``
across processes); writes queued together share a transaction. Reads use a second
connection and, in WAL mode, never wait for a writer. A call is never abandoned: a
cancelled caller waits for its transaction to commit or roll back.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import weakref
from collections.abc import Callable, Iterable
from functools import partial
from typing import TypeVar

import pydantic

from ...errors import StoreError
from ._cache import RecordCache
from ._checkpoint import BACKSTOP_PAGES, Checkpointer
from ._schema import migrate
from ._worker import Job, Worker

__all__ = ["Database"]

T = TypeVar("T")

_log = logging.getLogger("opsrun.stores.sqlite")

_BUSY_CODES = frozenset({5, 6})  # SQLITE_BUSY, SQLITE_LOCKED (primary result codes)


def _translate(exc: Exception, path: str) -> Exception:
    """A ``StoreError`` for a foreign exception raised inside a store call (SQLite's, or a
    record that does not parse); any other exception as it is."""
    if not isinstance(exc, sqlite3.Error | pydantic.ValidationError):
        return exc
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
    # check_same_thread=False: opened here, used by the connection's worker thread.
    return sqlite3.connect(
        path, timeout=busy_timeout, isolation_level=None, check_same_thread=False
    )


class Database:
    """One SQLite database: a writer connection, a reader connection, the schema.

    Opening applies the pending migrations. ``":memory:"`` (or ``""``) opens a private
    database that lives as long as this object, over a single connection.

    Raises:
        StoreError: the file cannot be opened (``store_error``), another process keeps
            it locked longer than ``busy_timeout`` (``store_busy``), its schema is
            newer than this release (``schema_too_new``), or its schema version is not
            an integer (``store_corrupt``).
    """

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout: float) -> None:
        self.path = os.fspath(path)
        self.private = self.path in (":memory:", "")
        self.records = RecordCache()
        """Records parsed from their stored text, reused while the text is the same."""
        self.branch_owners: set[str] = set()
        """The owners of the ``branch_queue`` rows (branch holders and waiters) that this
        object added and has not removed yet: closing removes them."""
        self._closed = False
        try:
            writer = _connect(self.path, busy_timeout)
        except sqlite3.Error as exc:
            raise _store_error(exc, self.path) from exc
        reader = writer
        checkpoints: sqlite3.Connection | None = None
        try:
            if not self.private:
                writer.execute("PRAGMA journal_mode = WAL").fetchall()
                writer.execute("PRAGMA synchronous = NORMAL")
                writer.execute(f"PRAGMA wal_autocheckpoint = {BACKSTOP_PAGES}")
            migrate(writer)
            if not self.private:
                reader = _connect(self.path, busy_timeout)
                reader.execute("PRAGMA query_only = ON")
                checkpoints = _connect(self.path, busy_timeout)
        except BaseException as exc:
            writer.close()
            if reader is not writer:
                reader.close()
            if isinstance(exc, sqlite3.Error):
                raise _store_error(exc, self.path) from exc
            raise
        translate = _Translate(self.path)
        closed = _Closed(self.path)
        name = f"opsrun-sqlite {os.path.basename(self.path) or 'memory'}"
        self.checkpointer: Checkpointer | None = None
        """Checkpoints the WAL off the writer's path (a file database only)."""
        if checkpoints is not None:
            self.checkpointer = Checkpointer(checkpoints, name=f"{name} checkpoints")
        self._writer = Worker(
            writer,
            name=name,
            translate=translate,
            closed_error=closed,
            after_commit=None if self.checkpointer is None else self.checkpointer.committed,
        )
        self._reader = self._writer
        if reader is not writer:
            self._reader = Worker(
                reader, name=f"{name} reads", translate=translate, closed_error=closed
            )
        # Stores dropped without close() stop their threads and close their connections.
        self._finalizer = weakref.finalize(
            self, _stop, self._writer, self._reader, self.checkpointer, self.branch_owners
        )

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called."""
        return self._closed

    def close(self) -> None:
        """Release the branches this object holds or waits for, then close both
        connections (waits for a running call); later calls raise."""
        self._closed = True
        self._finalizer()

    async def read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` on the reader connection in its thread.

        Raises:
            StoreError: SQLite failed or a stored record does not parse.
        """
        self._check_open()
        return await Job(fn, write=False).wait(self._reader.submit)

    async def write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` in a ``BEGIN IMMEDIATE`` transaction on the writer connection.

        The transaction commits before this returns (possibly together with other
        writes queued at the same time, each in a savepoint of its own); when ``fn``
        raises, its changes roll back (a ``StoreError`` that ``fn`` raises reaches the
        caller unchanged).

        Raises:
            StoreError: SQLite failed, the database stayed locked longer than the busy
                timeout (``store_busy``), or ``fn`` refused the write.
        """
        self._check_open()
        return await Job(fn, write=True).wait(self._writer.submit)

    def _check_open(self) -> None:
        if self._closed:
            raise _Closed(self.path)()


def _store_error(exc: sqlite3.Error, path: str) -> StoreError:
    error = _translate(exc, path)
    assert isinstance(error, StoreError)  # a sqlite3.Error always translates
    return error


def _forget_owners(owners: Iterable[str], conn: sqlite3.Connection) -> None:
    """Delete the ``branch_queue`` rows of ``owners``."""
    conn.executemany("DELETE FROM branch_queue WHERE owner = ?", [(o,) for o in owners])


def _stop(
    writer: Worker, reader: Worker, checkpointer: Checkpointer | None, branch_owners: set[str]
) -> None:
    """Release the branches of ``branch_owners`` and stop the threads.

    The release is the writer's last job (queued before the stop), so other processes
    and store objects can take the branches at once, not after their leases.
    """
    release: Job[None] | None = None
    if branch_owners:
        release = Job(partial(_forget_owners, tuple(branch_owners)), write=True)
        writer.submit(release)
    for worker in dict.fromkeys((writer, reader)):  # the private database's worker once
        worker.stop()
    if checkpointer is not None:
        checkpointer.stop()
    if release is not None and release.error is not None:  # their leases run out instead
        _log.warning("could not release the branches held on close: %s", release.error)


class _Translate:
    """The translation of a worker's exceptions for one file (holds no store)."""

    def __init__(self, path: str) -> None:
        self._path = path

    def __call__(self, exc: Exception) -> Exception:
        return _translate(exc, self._path)


class _Closed:
    """The error of a call on closed stores."""

    def __init__(self, path: str) -> None:
        self._path = path

    def __call__(self) -> StoreError:
        return StoreError(
            f"the SQLite stores of {self._path!r} are closed",
            code="store_closed",
            details={"path": self._path},
        )
