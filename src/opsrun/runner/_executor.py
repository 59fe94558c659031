"""Where operations execute: admission to a slot, then the execution itself.

The runner waits for a slot (``async with executor.slot(operation)``) and, inside it,
calls ``await executor.execute(operation, ctx)``. An operation's ``timeoutMs`` and its
``operation.started`` event begin once the slot is granted, so time spent queued behind
busy siblings never counts against it. An executor can run operations in the event loop,
in worker threads, or hand them to a distributed backend (which would look the operation
up by ``ctx.definition.operation_id`` on the worker side and ship ``ctx`` as data)
without any change to the runner.
"""

from __future__ import annotations

from collections import deque
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import Any, Protocol

import anyio
import anyio.to_thread

from .._config import require_whole
from ..model import OperationResult
from ..operations import Operation, OperationContext, SyncOperation

__all__ = ["DEFAULT_CONCURRENCY", "Executor", "InProcessExecutor", "ThreadExecutor"]

DEFAULT_CONCURRENCY = 256
"""Default number of operations executing at once in one executor.

High enough that a hook of I/O-bound operations never queues in practice; the limit
exists to bound fan-out in pathological profiles, not to throttle normal ones.
"""


class Executor(Protocol):
    """Admits operations to execution and executes them."""

    def slot(self, operation: Operation[Any]) -> AbstractAsyncContextManager[object]:
        """Wait, on entering, until ``operation`` may execute; free the room on leaving."""
        ...

    async def execute(
        self, operation: Operation[Any], ctx: OperationContext[Any]
    ) -> OperationResult:
        """Execute ``operation`` with ``ctx`` now (inside its slot); exceptions propagate."""
        ...


class _Limit:
    """At most ``limit`` holders at once; waiters are served first in, first out."""

    __slots__ = ("_running", "_waiters", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._running = 0
        self._waiters: deque[anyio.Event] = deque()

    async def __aenter__(self) -> None:
        if self._running < self.limit and not self._waiters:
            self._running += 1
            return
        waiter = anyio.Event()
        self._waiters.append(waiter)
        try:
            await waiter.wait()
        except BaseException:
            # Cancelled while queued: hand a slot we were given to the next in line.
            if waiter in self._waiters:
                self._waiters.remove(waiter)
            elif waiter.is_set():
                self._release()
            raise

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._release()

    def _release(self) -> None:
        if self._waiters:
            # The slot passes straight to the next waiter: the count stays the same.
            self._waiters.popleft().set()
        else:
            self._running -= 1


class InProcessExecutor:
    """Runs operations as tasks of the current event loop, at most ``limit`` at once."""

    def __init__(self, *, limit: int = DEFAULT_CONCURRENCY) -> None:
        require_whole(self, "limit", limit, 1)
        self._limit = _Limit(limit)

    @property
    def limit(self) -> int:
        """How many operations execute at once at most."""
        return self._limit.limit

    def slot(self, operation: Operation[Any]) -> AbstractAsyncContextManager[object]:
        """One of ``limit`` slots (first in, first out when all are taken)."""
        return self._limit

    async def execute(
        self, operation: Operation[Any], ctx: OperationContext[Any]
    ) -> OperationResult:
        """Await ``operation.execute(ctx)``."""
        return await operation.execute(ctx)


class ThreadExecutor:
    """Runs :class:`SyncOperation` work in worker threads, at most ``max_threads`` at once.

    Async operations still run in the event loop (under ``limit``). A thread cannot be
    cancelled: on abort or timeout the runner waits for it to return, so blocking
    operations should poll ``ctx.aborted``.
    """

    def __init__(self, *, max_threads: int = 8, limit: int = DEFAULT_CONCURRENCY) -> None:
        require_whole(self, "max_threads", max_threads, 1)
        require_whole(self, "limit", limit, 1)
        self.max_threads = max_threads
        self._inline = InProcessExecutor(limit=limit)
        self._threads = _Limit(max_threads)

    def slot(self, operation: Operation[Any]) -> AbstractAsyncContextManager[object]:
        """A worker thread for a sync operation, an event-loop slot for an async one."""
        if isinstance(operation, SyncOperation):
            return self._threads
        return self._inline.slot(operation)

    async def execute(
        self, operation: Operation[Any], ctx: OperationContext[Any]
    ) -> OperationResult:
        """Run a sync operation in a worker thread, an async one in the loop."""
        if not isinstance(operation, SyncOperation):
            return await self._inline.execute(operation, ctx)
        # The slot already bounds the threads: a limiter of its own per call never makes
        # a granted slot wait for a thread (anyio's shared one may), and belongs to the
        # event loop at hand (one executor may serve loops of both backends in turn).
        result: OperationResult = await anyio.to_thread.run_sync(
            operation.run_sync, ctx, limiter=anyio.CapacityLimiter(1)
        )
        return result
