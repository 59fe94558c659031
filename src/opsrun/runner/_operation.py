"""Operations users write, and the catalog that maps operation ids to them."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from typing import Any, ClassVar

import anyio.to_thread
from pydantic import BaseModel

from .._profiles import BUILTIN_PARAMS_MODELS, validate_profile
from ..errors import ConfigError
from ..model import (
    OperationCapabilities,
    OperationDefinition,
    OperationProfile,
    OperationResult,
    ProfileIssue,
)
from ._context import OperationContext

__all__ = [
    "FunctionOperation",
    "Operation",
    "OperationCatalog",
    "OperationFn",
    "SyncOperation",
]

OperationFn = Callable[[OperationContext], Awaitable[OperationResult]]
"""An async function usable as an operation."""


class Operation(ABC):
    """Base class of every operation implementation.

    Subclass it, set :attr:`definition` (as a class attribute or in ``__init__``), and
    implement :meth:`execute`. The runner gives you timeouts, cancellation, summaries,
    policy guards and deterministic commit; ``execute`` only computes a result.

    Raising :class:`~opsrun.errors.OperationFailed` ends the run of the operation as
    ``error`` with its code; any other exception is recorded as ``operation_exception``.
    """

    definition: OperationDefinition
    """Identity and capabilities."""
    params_model: ClassVar[type[BaseModel] | None] = None
    """Validates ``config.params``; ``ctx.params`` is then an instance of it."""

    @abstractmethod
    async def execute(self, ctx: OperationContext) -> OperationResult:
        """Do the work and return a result with effects; never mutates ``ctx``."""

    def __repr__(self) -> str:
        definition = getattr(self, "definition", None)
        op_id = definition.operation_id if definition else "?"
        return f"<{type(self).__name__} {op_id}>"


class SyncOperation(Operation):
    """An operation whose work is blocking or CPU-bound: implement :meth:`run_sync`.

    It runs in a worker thread (``ThreadExecutor`` controls how many); cancellation
    cannot interrupt a thread, so long loops should poll ``ctx.aborted``.
    """

    @abstractmethod
    def run_sync(self, ctx: OperationContext) -> OperationResult:
        """Do the work in a worker thread."""

    async def execute(self, ctx: OperationContext) -> OperationResult:
        """Run :meth:`run_sync` in anyio's default worker-thread pool."""
        return await anyio.to_thread.run_sync(self.run_sync, ctx)


class FunctionOperation(Operation):
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
        self._params_model = params_model

    @property
    def model(self) -> type[BaseModel] | None:
        """The params model given at construction."""
        return self._params_model

    async def execute(self, ctx: OperationContext) -> OperationResult:
        """Call the wrapped function."""
        return await self._fn(ctx)


KindFactory = Callable[[OperationDefinition], Operation]
"""Builds the implementation of a built-in kind (``llm``, ``template``) for a definition."""


class OperationCatalog(Mapping[str, OperationDefinition]):
    """Operation definitions by id, each with its implementation.

    As a ``Mapping`` it yields definitions, so it can be passed straight to
    :func:`opsrun.validate_profile`. ``kinds`` maps a kind name to a factory used by
    :meth:`add_definition` for operations implemented generically by their kind.
    """

    def __init__(
        self,
        operations: Iterable[Operation] = (),
        *,
        kinds: Mapping[str, KindFactory] | None = None,
    ) -> None:
        self._operations: dict[str, Operation] = {}
        self._kinds: dict[str, KindFactory] = dict(kinds or {})
        for operation in operations:
            self.add(operation)

    # Mapping interface -------------------------------------------------------------------
    def __getitem__(self, operation_id: str) -> OperationDefinition:
        return self._operations[operation_id].definition

    def __iter__(self) -> Iterator[str]:
        return iter(self._operations)

    def __len__(self) -> int:
        return len(self._operations)

    # Registration ------------------------------------------------------------------------
    def add(self, operation: Operation) -> Operation:
        """Register an operation under its definition's id and return it.

        Raises:
            ConfigError: if the id is already registered or the operation has no definition.
        """
        definition = getattr(operation, "definition", None)
        if not isinstance(definition, OperationDefinition):
            raise ConfigError(f"{operation!r} has no OperationDefinition in .definition")
        op_id = definition.operation_id
        if op_id in self._operations:
            raise ConfigError(f"operation {op_id!r} is already in the catalog")
        self._operations[op_id] = operation
        return operation

    def add_function(
        self,
        definition: OperationDefinition,
        fn: OperationFn,
        *,
        params_model: type[BaseModel] | None = None,
    ) -> FunctionOperation:
        """Register an async function as the implementation of ``definition``.

        Raises:
            ConfigError: if the id is already registered.
        """
        operation = FunctionOperation(definition, fn, params_model=params_model)
        self.add(operation)
        return operation

    def function(
        self,
        operation_id: str,
        *,
        name: str,
        kind: str = "compute",
        description: str | None = None,
        write_tag: str | None = None,
        params_model: type[BaseModel] | None = None,
    ) -> Callable[[OperationFn], OperationFn]:
        """Decorator form of :meth:`add_function`; returns the function unchanged.

        Raises:
            ConfigError: if the id is already registered.
        """
        definition = OperationDefinition(
            operation_id=operation_id,
            name=name,
            kind=kind,
            description=description,
            capabilities=OperationCapabilities(
                writes_artifact=write_tag is not None, write_tag=write_tag
            ),
        )

        def register(fn: OperationFn) -> OperationFn:
            self.add_function(definition, fn, params_model=params_model)
            return fn

        return register

    def add_definition(self, definition: OperationDefinition) -> Operation:
        """Register ``definition`` implemented by the factory of its kind.

        Raises:
            ConfigError: if no factory is registered for the kind, or the id is taken.
        """
        factory = self._kinds.get(definition.kind)
        if factory is None:
            raise ConfigError(
                f"no implementation for kind {definition.kind!r} "
                f"(known kinds: {', '.join(sorted(self._kinds)) or 'none'})"
            )
        return self.add(factory(definition))

    # Lookup ------------------------------------------------------------------------------
    def implementation(self, operation_id: str) -> Operation:
        """Return the implementation of ``operation_id``.

        Raises:
            ConfigError: if the id is not registered.
        """
        try:
            return self._operations[operation_id]
        except KeyError:
            raise ConfigError(f"operation {operation_id!r} is not in the catalog") from None

    def params_model(self, operation_id: str) -> type[BaseModel] | None:
        """The params model of an operation: its own, or its kind's built-in one."""
        operation = self._operations.get(operation_id)
        if operation is None:
            return None
        own = (
            operation.model if isinstance(operation, FunctionOperation) else operation.params_model
        )
        return own or BUILTIN_PARAMS_MODELS.get(operation.definition.kind)

    def params_models(self) -> dict[str, type[BaseModel]]:
        """Params models by operation id, for :func:`opsrun.validate_profile`."""
        models: dict[str, type[BaseModel]] = {}
        for op_id in self._operations:
            model = self.params_model(op_id)
            if model is not None:
                models[op_id] = model
        return models

    def validate(self, profile: OperationProfile) -> list[ProfileIssue]:
        """Validate ``profile`` against this catalog (see :func:`opsrun.validate_profile`)."""
        return validate_profile(profile, self, params_models=self.params_models())

    def parse_params(self, operation_id: str, params: Mapping[str, Any]) -> Any:
        """Validate ``params`` with the operation's params model (raw dict without one).

        Raises:
            pydantic.ValidationError: if the params do not fit the model.
        """
        model = self.params_model(operation_id)
        return dict(params) if model is None else model.model_validate(params)
