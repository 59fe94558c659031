"""Operations users write: the base classes and function operations."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from typing import Any, Generic

import anyio.to_thread
from pydantic import BaseModel

from ..model import OperationDefinition, OperationResult
from ._context import OperationContext, P

__all__ = ["FunctionOperation", "KindFactory", "Operation", "OperationFn", "SyncOperation"]

OperationFn = Callable[[OperationContext[Any]], Awaitable[OperationResult]]
"""An async function usable as an operation."""


class Operation(ABC, Generic[P]):
    """Base class of every operation implementation.

    Subclass it, set :attr:`definition` (as a class attribute or in ``__init__``), and
    implement :meth:`execute`. The runner gives you timeouts, cancellation, summaries,
    policy guards and deterministic commit; ``execute`` only computes a result.

    Raising :class:`~opsrun.errors.OperationFailed` ends the run of the operation as
    ``error`` with its code; any other exception is recorded as ``operation_exception``.
    """

    definition: OperationDefinition
    """Identity and capabilities."""
    params_model: type[BaseModel] | None = None
    """Validates ``config.params``; ``ctx.params`` is then an instance of it. Without one
    ``ctx.params`` is the raw dict. The catalog validates a profile's params with it."""

    @abstractmethod
    async def execute(self, ctx: OperationContext[P]) -> OperationResult:
        """Do the work and return a result with effects; never mutates ``ctx``."""

    def check(self, params: P) -> list[str]:
        """Save-time problems of ``params`` beyond their model (empty when none).

        The catalog calls it while validating a profile, with the params validated by
        :attr:`params_model` (the raw dict without one); each problem becomes an
        ``invalid_params`` issue. The built-in kinds parse their templates here and look
        up their provider and schema references, so a profile that would fail at run
        time is refused when it is saved. Never raises for a problem of ``params``.
        """
        return []

    def __repr__(self) -> str:
        definition = getattr(self, "definition", None)
        op_id = definition.operation_id if definition else "?"
        return f"<{type(self).__name__} {op_id}>"


class SyncOperation(Operation[P]):
    """An operation whose work is blocking or CPU-bound: implement :meth:`run_sync`.

    It runs in a worker thread (``ThreadExecutor`` controls how many); cancellation
    cannot interrupt a thread, so long loops should poll ``ctx.aborted``.
    """

    @abstractmethod
    def run_sync(self, ctx: OperationContext[P]) -> OperationResult:
        """Do the work in a worker thread."""

    async def execute(self, ctx: OperationContext[P]) -> OperationResult:
        """Run :meth:`run_sync` in anyio's default worker-thread pool."""
        return await anyio.to_thread.run_sync(self.run_sync, ctx)


class FunctionOperation(Operation[Any]):
    """Wraps an async function ``fn(ctx) -> OperationResult`` as an operation."""

    def __init__(
        self,
        definition: OperationDefinition,
        fn: OperationFn,
        *,
        params_model: type[BaseModel] | None = None,
    ) -> None:
        self.definition = definition
        self._fn = fn
        self.params_model = params_model

    async def execute(self, ctx: OperationContext[Any]) -> OperationResult:
        """Call the wrapped function."""
        return await self._fn(ctx)


KindFactory = Callable[[OperationDefinition], Operation[Any]]
"""Builds the implementation of a kind (``llm``, ``template``…) for one definition."""
