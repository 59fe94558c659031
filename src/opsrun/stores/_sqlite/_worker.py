"""A thread that owns one SQLite connection and runs the store calls handed to it.

Each call is one hop to the thread and one back: the caller queues a job and waits for
the thread to wake its event loop (``call_soon_threadsafe`` on asyncio, the trio token's
``run_sync_soon`` on trio), which costs about half of ``anyio.to_thread.run_sync``. The
writer's thread commits the write jobs it finds queued together in one transaction
(group commit): each job runs in a savepoint of its own, so one that fails rolls back
alone, and every caller returns once the shared ``COMMIT`` is done.

A caller that is cancelled while its job is queued or running waits for the job to
finish (a job is never abandoned halfway) and returns its result; the cancellation
takes effect at the caller's next checkpoint, as with ``anyio.to_thread.run_sync``.
The thread keeps no reference to the stores between jobs, so stores that are
garbage-collected without ``close()`` stop it too.
"""

from __future__ import annotations

import asyncio
import queue
import sqlite3
import threading
from collections.abc import Callable
from contextlib import suppress
from functools import partial
from typing import Any, Generic, TypeVar

import anyio
import anyio.lowlevel

__all__ = ["Job", "Worker"]

T = TypeVar("T")

_GROUP = 64
"""The most write jobs one transaction commits together."""


class Job(Generic[T]):
    """One store call: ``fn`` on the connection, and how to wake the caller."""

    __slots__ = ("_wake", "error", "fn", "result", "write")

    def __init__(self, fn: Callable[[sqlite3.Connection], T], *, write: bool) -> None:
        self.fn = fn
        self.write = write
        self.result: T | None = None
        self.error: BaseException | None = None
        self._wake: Callable[[], object] = _nothing

    def finish(self) -> None:
        """Wake the caller (from the worker thread)."""
        with suppress(RuntimeError):  # its event loop is closed: nobody is waiting
            self._wake()

    async def wait(self, submit: Callable[[Job[T]], None]) -> T:
        """Queue this job with ``submit`` and wait until the thread ran it.

        Raises:
            BaseException: whatever ``fn`` (or the commit) raised.
        """
        await anyio.lowlevel.checkpoint_if_cancelled()
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not asyncio: trio
            await self._wait_trio(submit)
        else:
            future: asyncio.Future[None] = loop.create_future()
            self._wake = partial(loop.call_soon_threadsafe, _resolve, future)
            submit(self)
            with anyio.CancelScope(shield=True):
                await future
        if self.error is not None:
            raise self.error
        return self.result  # type: ignore[return-value]  # set when error is None

    async def _wait_trio(self, submit: Callable[[Job[T]], None]) -> None:
        import trio  # only ever imported on trio, where it is installed

        token = trio.lowlevel.current_trio_token()
        done = trio.Event()
        self._wake = lambda: token.run_sync_soon(done.set)
        submit(self)
        with anyio.CancelScope(shield=True):
            await done.wait()


def _nothing() -> None:
    pass


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class Worker:
    """A daemon thread running jobs on ``conn`` in order (see the module docstring).

    Write jobs run inside ``BEGIN IMMEDIATE`` … ``COMMIT``; read jobs run as they are.
    ``closed_error`` makes the error that jobs get once the worker is stopping.
    """

    def __init__(
        self,
        conn: sqlite3.Connection,
        *,
        name: str,
        translate: Callable[[Exception], BaseException],
        closed_error: Callable[[], BaseException],
        after_commit: Callable[[], None] | None = None,
    ) -> None:
        self._queue: queue.SimpleQueue[Job[Any] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(
            target=_serve,
            args=(self._queue, conn, translate, closed_error, after_commit),
            name=name,
            daemon=True,
        )
        self._thread.start()

    def submit(self, job: Job[Any]) -> None:
        """Queue ``job`` (from any thread)."""
        self._queue.put(job)

    def stop(self) -> None:
        """Finish the job in progress, fail the queued ones, close the connection, and
        wait for the thread (unless called from it)."""
        self._queue.put(None)
        if threading.current_thread() is not self._thread:
            self._thread.join()


def _serve(
    jobs: queue.SimpleQueue[Job[Any] | None],
    conn: sqlite3.Connection,
    translate: Callable[[Exception], BaseException],
    closed_error: Callable[[], BaseException],
    after_commit: Callable[[], None] | None,
) -> None:
    """The worker thread: run jobs until told to stop, then close ``conn``.

    ``after_commit`` is called after each transaction that committed.
    """
    try:
        while _serve_next(jobs, conn, translate, after_commit):
            pass  # each round's jobs are dropped here: they may hold the stores
    finally:
        _fail_queued(jobs, closed_error)
        conn.close()


def _serve_next(
    jobs: queue.SimpleQueue[Job[Any] | None],
    conn: sqlite3.Connection,
    translate: Callable[[Exception], BaseException],
    after_commit: Callable[[], None] | None,
) -> bool:
    """Run the next job, or the next group of writes; False once told to stop."""
    job = jobs.get()
    if job is None:
        return False
    if not job.write:
        _run_read(job, conn, translate)
        return True
    group = [job]
    while len(group) < _GROUP:
        try:
            more = jobs.get_nowait()
        except queue.Empty:
            break
        if more is None:
            _run_writes(group, conn, translate, after_commit)
            return False
        if not more.write:  # reads keep their place: run the writes before first
            _run_writes(group, conn, translate, after_commit)
            group = []
            _run_read(more, conn, translate)
            continue
        group.append(more)
    if group:
        _run_writes(group, conn, translate, after_commit)
    return True


def _fail_queued(
    jobs: queue.SimpleQueue[Job[Any] | None], closed_error: Callable[[], BaseException]
) -> None:
    while True:
        try:
            job = jobs.get_nowait()
        except queue.Empty:
            return
        if job is not None:
            job.error = closed_error()
            job.finish()


def _run_read(
    job: Job[Any], conn: sqlite3.Connection, translate: Callable[[Exception], BaseException]
) -> None:
    try:
        job.result = job.fn(conn)
    except Exception as exc:  # handed to the caller, translated
        job.error = translate(exc)
    except BaseException as exc:  # handed to the caller as it is
        job.error = exc
    job.finish()


def _run_writes(
    group: list[Job[Any]],
    conn: sqlite3.Connection,
    translate: Callable[[Exception], BaseException],
    after_commit: Callable[[], None] | None,
) -> None:
    """Run ``group`` in one transaction, each job in a savepoint when there are several."""
    try:
        conn.execute("BEGIN IMMEDIATE")
    except Exception as exc:  # every job of the group gets it
        error = translate(exc)
        for job in group:
            job.error = error
            job.finish()
        return
    alone = len(group) == 1
    try:
        for job in group:
            _run_write(job, conn, translate, alone=alone)
        if alone and group[0].error is not None:
            conn.execute("ROLLBACK")
        else:
            conn.execute("COMMIT")
            if after_commit is not None:
                after_commit()
    except Exception as exc:  # the commit failed: nothing was written
        if conn.in_transaction:
            with suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
        error = translate(exc)
        for job in group:
            job.error = job.error or error
    for job in group:
        job.finish()


def _run_write(
    job: Job[Any],
    conn: sqlite3.Connection,
    translate: Callable[[Exception], BaseException],
    *,
    alone: bool,
) -> None:
    if not alone:
        conn.execute("SAVEPOINT job")
    try:
        job.result = job.fn(conn)
    except BaseException as exc:  # handed to the caller
        job.error = translate(exc) if isinstance(exc, Exception) else exc
        if not alone:
            conn.execute("ROLLBACK TO job")
    if not alone:
        conn.execute("RELEASE job")
