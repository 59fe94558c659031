"""The operation catalog: operation ids mapped to implementations, and profile checks."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from pydantic import BaseModel

from ..errors import ConfigError, ProfileInvalid
from ..model import OperationCapabilities, OperationDefinition, OperationProfile, ProfileIssue
from ._operation import FunctionOperation, KindFactory, Operation, OperationFn
from ._validate import validate_profile

__all__ = ["OperationCatalog"]


class OperationCatalog(Mapping[str, OperationDefinition]):
    """Operation definitions by id, each with its implementation.

    The catalog is the one place a profile is validated (:meth:`validate`,
    :meth:`ensure_valid`): every operation validates its own ``params`` with its own
    ``params_model``. ``kinds`` maps a kind name to a factory used by
    :meth:`add_definition` for operations implemented generically by their kind (see
    :func:`opsrun.kinds.builtin_kinds`).

    Raises:
        ConfigError: an operation given at construction cannot be added (see :meth:`add`).
    """

    def __init__(
        self,
        operations: Iterable[Operation[Any]] = (),
        *,
        kinds: Mapping[str, KindFactory] | None = None,
    ) -> None:
        self._operations: dict[str, Operation[Any]] = {}
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
    def add(self, operation: Operation[Any]) -> Operation[Any]:
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

    def add_definition(self, definition: OperationDefinition) -> Operation[Any]:
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
    def implementation(self, operation_id: str) -> Operation[Any]:
        """Return the implementation of ``operation_id``.

        Raises:
            ConfigError: if the id is not registered.
        """
        try:
            return self._operations[operation_id]
        except KeyError:
            raise ConfigError(f"operation {operation_id!r} is not in the catalog") from None

    def validate(self, profile: OperationProfile) -> list[ProfileIssue]:
        """Return every problem of ``profile`` against this catalog; ``[]`` means valid.

        Checks ids, dependencies (unknown, self, across hooks, cycles), artifact tags
        (one writer per tag, statically known) and each operation's params against its
        own ``params_model`` and :meth:`Operation.check`. Never raises for a problem of
        the profile.
        """
        return validate_profile(profile, self, self._operations)

    def ensure_valid(self, profile: OperationProfile) -> None:
        """Check ``profile`` like :meth:`validate` and raise if anything is wrong.

        Raises:
            ProfileInvalid: with every issue in ``.issues`` (code ``profile_invalid``).
        """
        issues = self.validate(profile)
        if issues:
            summary = "; ".join(f"{i.code.value}({i.operation_id or '-'})" for i in issues[:10])
            more = f" and {len(issues) - 10} more" if len(issues) > 10 else ""
            raise ProfileInvalid(
                f"profile {profile.profile_id!r} has {len(issues)} problem(s): {summary}{more}",
                issues=issues,
            )

    def parse_params(self, operation_id: str, params: Mapping[str, Any]) -> Any:
        """Validate ``params`` with the operation's params model (raw dict without one).

        Raises:
            ConfigError: if the id is not registered.
            pydantic.ValidationError: if the params do not fit the model.
        """
        model = self.implementation(operation_id).params_model
        return dict(params) if model is None else model.model_validate(params)
