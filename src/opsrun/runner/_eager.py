"""Running a coroutine eagerly: in the current task until it first suspends.

A hook starts each of its operations as if in a task of its own, but the first steps run
in the hook's own task, in a copy of its context (what a task gets). An operation that
finishes without ever suspending (most do: a template, a check, a computation) then
costs no task at all. One that suspends is adopted: the hook's task drives it to the end,
still in its own context, while the operations after it get tasks of their own. This is
what Python 3.12's eager task factory does for asyncio, made for anyio: the coroutine's
cancel scopes are entered and left in one task, the hook's, and the hook's cancel scope
reaches it as it would reach a task of the hook.
"""

from __future__ import annotations

import contextvars
import types
from collections.abc import Coroutine, Generator
from typing import Any

__all__ = ["Started", "drive", "start"]


class Started:
    """A coroutine that suspended in its first steps: what it waits on, and its context."""

    __slots__ = ("context", "coro", "waiting_on")

    def __init__(
        self, coro: Coroutine[Any, Any, None], context: contextvars.Context, waiting_on: object
    ) -> None:
        self.coro = coro
        self.context = context
        self.waiting_on = waiting_on
        """What the coroutine yielded to the event loop (a future, a trap)."""


def start(coro: Coroutine[Any, Any, None]) -> Started | None:
    """Run ``coro`` now, in a copy of the current context, until it ends or suspends.

    Returns None when it ended, else how to go on with it (:func:`drive`).

    Raises:
        BaseException: whatever ``coro`` raised in its first steps.
    """
    context = contextvars.copy_context()
    try:
        waiting_on = context.run(coro.send, None)
    except StopIteration:
        return None
    return Started(coro, context, waiting_on)


@types.coroutine
def drive(started: Started) -> Generator[Any, Any, None]:
    """Await the rest of a started coroutine in the current task, in its own context.

    Every value the event loop sends and every exception it throws (a cancellation)
    is passed on to the coroutine, and what it yields goes back to the loop.

    Raises:
        BaseException: whatever the coroutine raised.
    """
    coro, context, waiting_on = started.coro, started.context, started.waiting_on
    del started
    while True:
        try:
            sent = yield waiting_on
        except BaseException as exc:  # delivered to the coroutine, which decides
            try:
                waiting_on = context.run(coro.throw, exc)
            except StopIteration:
                return
        else:
            try:
                waiting_on = context.run(coro.send, sent)
            except StopIteration:
                return
