"""What the stores' chat branch holds share: the refusal, and a task kept beside a hold."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any

import anyio

from ..errors import StoreError

__all__ = ["beside", "branch_busy"]


def branch_busy(chat_id: str, branch_id: str) -> StoreError:
    """The error of a holder that does not wait, on a branch that is held."""
    return StoreError(
        f"chat {chat_id!r} branch {branch_id!r} already has an active run",
        code="branch_busy",
        details={"chat_id": chat_id, "branch_id": branch_id},
    )


@asynccontextmanager
async def beside(task: Callable[[], Coroutine[Any, Any, None]]) -> AsyncIterator[None]:
    """Run ``task`` in the background while the block runs; cancel it when the block ends.

    An exception of the block reaches the caller unchanged, not wrapped in a group.

    Raises:
        Exception: what the block raised.
    """
    failure: Exception | None = None
    async with anyio.create_task_group() as tg:
        tg.start_soon(task)
        try:
            yield
        except Exception as exc:  # raised below, outside the task group, unwrapped
            failure = exc
        finally:
            tg.cancel_scope.cancel()
    if failure is not None:
        raise failure
