"""Where operations execute. The runner only calls ``await executor.execute(op, ctx)``.

That single call is the whole contract, so an executor can run operations in the
event loop, in worker threads, or hand them to a distributed backend (which would
look the operation up by ``ctx.definition.operation_id`` on the worker side and ship
``ctx`` as data) without any change to the runner.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Protocol

import anyio
import anyio.to_thread

from .._config import require
from ..model import OperationResult
from ..operations import Operation, OperationContext, SyncOperation

__all__ = ["DEFAULT_CONCURRENCY", "Executor", "InProcessExecutor", "ThreadExecutor"]

DEFAULT_CONCURRENCY = 256
"""Default number of operations executing at once in one executor.

High enough that a hook of I/O-bound operations never queues in practice; the limit
exists to bound fan-out in pathological profiles, not to throttle normal ones.
"""


class Executor(Protocol):
    """Runs one operation execution and returns its result."""

    async def execute(
        self, operation: Operation[Any], ctx: OperationContext[Any]
    ) -> OperationResult:
        """Execute ``operation`` with ``ctx``; exceptions propagate to the runner."""
        ...


class InProcessExecutor:
    """Runs operations as tasks of the current event loop, at most ``limit`` at once."""

    def __init__(self, *, limit: int = DEFAULT_CONCURRENCY) -> None:
        self.limit = limit
        require(self, "limit", isinstance(limit, int) and limit >= 1, "an integer >= 1")
        self._running = 0
        self._waiters: deque[anyio.Event] = deque()

    async def execute(
        self, operation: Operation[Any], ctx: OperationContext[Any]
    ) -> OperationResult:
        """Await ``operation.execute(ctx)`` inside the concurrency limit (FIFO when full)."""
        if not self._acquire_nowait():
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
        try:
            return await operation.execute(ctx)
        finally:
            self._release()

    def _acquire_nowait(self) -> bool:
        """Take a slot when one is free and nobody queues for it; False otherwise."""
        if self._running >= self.limit or self._waiters:
            return False
        self._running += 1
        return True

    def _release(self) -> None:
        """Give back a slot; a queued caller gets it directly."""
        if self._waiters:
            # The slot passes straight to the next waiter: _running stays the same.
            self._waiters.popleft().set()
        else:
            self._running -= 1


class ThreadExecutor:
    """Runs :class:`SyncOperation` work in worker threads, at most ``max_threads`` at once.

    Async operations still run in the event loop (under ``limit``). A thread cannot be
    cancelled: on abort or timeout the runner waits for it to return, so blocking
    operations should poll ``ctx.aborted``.
    """

    def __init__(self, *, max_threads: int = 8, limit: int = DEFAULT_CONCURRENCY) -> None:
        self.max_threads = max_threads
        require(
            self,
            "max_threads",
            isinstance(max_threads, int) and max_threads >= 1,
            "an integer >= 1",
        )
        self._inline = InProcessExecutor(limit=limit)
        self._threads: anyio.CapacityLimiter | None = None

    async def execute(
        self, operation: Operation[Any], ctx: OperationContext[Any]
    ) -> OperationResult:
        """Run sync operations in a worker thread, async ones in the loop."""
        if isinstance(operation, SyncOperation):
            if self._threads is None:
                self._threads = anyio.CapacityLimiter(self.max_threads)
            return await anyio.to_thread.run_sync(operation.run_sync, ctx, limiter=self._threads)
        return await self._inline.execute(operation, ctx)
