"""Blocking work of a driver turn that a cancellation must stop, not abandon.

The apply writes the tree, runs the check and commits in a thread. Cancelling the turn
while it runs sets a ``threading.Event`` the apply polls (it kills the check and rolls
back when it can), and the turn waits, shielded, for the thread to finish: the tree and
the journal are never left half done, and the turn knows whether the apply committed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

import anyio
import anyio.lowlevel

__all__ = ["Stoppable", "run_stoppable"]

T = TypeVar("T")


@dataclass(slots=True)
class Stoppable(Generic[T]):
    """What a stoppable call returned or raised, and whether the caller was cancelled."""

    value: T | None = None
    error: Exception | None = None
    cancelled: bool = False
    cancel_exc: BaseException | None = None

    async def resume_cancel(self) -> None:
        """Raise the cancellation that came during the call (call it after cleaning up).

        Raises:
            BaseException: the backend's cancellation exception, when the call was cancelled.
        """
        if self.cancel_exc is not None:
            raise self.cancel_exc
        if self.cancelled:  # a cancel scope is still cancelled: its next checkpoint raises
            await anyio.lowlevel.checkpoint()


async def run_stoppable(fn: Callable[[threading.Event], T], *, name: str) -> Stoppable[T]:
    """Run ``fn(stop)`` in a new thread and wait until it returns, even when cancelled.

    A cancellation of the calling task sets ``stop`` (``fn`` should then give up as soon
    as it safely can) and is reported in the result, not raised, so that the caller can
    finish its bookkeeping before calling :meth:`Stoppable.resume_cancel`.

    Raises:
        BaseException: only what ``fn`` raised that is not an ``Exception`` (for example
            ``KeyboardInterrupt``); an ``Exception`` is returned in ``error``.
    """
    stop = threading.Event()
    finished = threading.Event()
    result: Stoppable[T] = Stoppable()
    fatal: list[BaseException] = []

    def body() -> None:
        try:
            result.value = fn(stop)
        except Exception as exc:
            result.error = exc
        except BaseException as exc:
            fatal.append(exc)
        finally:
            finished.set()

    async def watch() -> None:
        try:
            await anyio.sleep_forever()
        finally:
            if not finished.is_set():
                result.cancelled = True
            stop.set()

    threading.Thread(target=body, name=name).start()
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(watch)
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(finished.wait)
            group.cancel_scope.cancel()
    except anyio.get_cancelled_exc_class() as exc:  # trio, or asyncio's own cancellation
        stop.set()
        result.cancelled = True
        result.cancel_exc = exc
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(finished.wait)
    if fatal:
        raise fatal[0]
    return result
