"""An event that any thread may set for a task waiting on any event loop.

``anyio.Event`` belongs to the event loop that waits on it: set from another thread
(a host running ``asyncio.run`` per request in a threaded web server), it may never
wake its waiter. A :class:`Wakeup` is made by the waiting task and remembers how to
reach its loop: set from the waiter's own thread it sets the event at once; from
another thread it asks the waiter's loop to (``call_soon_threadsafe`` on asyncio, the
trio token's ``run_sync_soon`` on trio).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from contextlib import suppress

import anyio

__all__ = ["Wakeup"]


class Wakeup:
    """Made by the task that will wait on it (in its event loop); set from any thread."""

    __slots__ = ("_event", "_later", "_thread", "fired")

    def __init__(self) -> None:
        self._event = anyio.Event()
        self._thread = threading.get_ident()
        self._later = _soon_in_this_loop()
        self.fired = False
        """Set was called (the waiter may not have woken yet)."""

    def set(self) -> None:
        """Wake the waiter; a loop that has closed meanwhile has no waiter to wake."""
        self.fired = True
        if threading.get_ident() == self._thread:
            self._event.set()
            return
        with suppress(RuntimeError):  # its event loop is closed
            self._later(self._event.set)

    async def wait(self) -> None:
        """Wait until :meth:`set` is called (at once when it was)."""
        await self._event.wait()


def _soon_in_this_loop() -> Callable[[Callable[[], object]], object]:
    """How another thread schedules a call in the running event loop."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # not asyncio: trio
        import trio  # only ever imported on trio, where it is installed

        return trio.lowlevel.current_trio_token().run_sync_soon
    return loop.call_soon_threadsafe
