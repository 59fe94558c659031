"""Building models from values already known to be valid, without validating them again.

The runner makes many records per run (events, operation records, messages) from values
that came out of validated models or that it made itself with the right types.
Validating them once more is most of what building them costs; a :class:`Builder`
builds the same instance directly, as ``BaseModel.model_construct`` does, with the
field defaults worked out once per class instead of once per instance.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import datetime
from enum import Enum
from typing import Any, Generic, TypeVar

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

__all__ = ["Builder"]

M = TypeVar("M", bound=BaseModel)

_REQUIRED: Any = object()
"""Placeholder of a required field in the defaults (every call must give it)."""


class Builder(Generic[M]):
    """Builds instances of one model class from trusted values.

    ``builder(**values)`` returns what ``cls(**values)`` would: the same field values
    in the same order, the same ``model_fields_set`` (the names given), defaults for
    the rest. Nothing is checked: every value must already be what validation keeps
    (the field's type, as a validated model holds it), and every required field must
    be given. Values are passed by field name, not by alias.

    Raises:
        TypeError: ``cls`` has a ``model_post_init``, private attributes, is a root
            model, or has a default factory that reads the other fields; validation
            would do more than set fields for it.
    """

    __slots__ = ("_cls", "_defaults", "_factories", "_given", "_sets")

    def __init__(self, cls: type[M]) -> None:
        if cls.__pydantic_post_init__ or cls.__private_attributes__ or cls.__pydantic_root_model__:
            raise TypeError(f"{cls.__name__} needs validation to be built")
        defaults: dict[str, Any] = {}
        factories: list[tuple[str, Callable[[], Any]]] = []
        for name, field in cls.model_fields.items():
            factory = field.default_factory
            if factory is not None:
                if field.default_factory_takes_validated_data:
                    raise TypeError(f"{cls.__name__}.{name} has a factory that reads data")
                factories.append((name, factory))  # type: ignore[arg-type]  # takes no data
                defaults[name] = None
            elif field.default is PydanticUndefined:
                defaults[name] = _REQUIRED
            elif _shared(field.default):
                defaults[name] = field.default
            else:  # a mutable default: each instance gets its own copy, as validation does
                factories.append((name, _copier(field.default)))
                defaults[name] = None
        self._cls = cls
        self._defaults = defaults
        self._factories = tuple(factories)
        self._given: set[str] = set()
        self._sets: dict[tuple[str, ...], set[str]] | None = (
            {} if cls.model_config.get("frozen") else None
        )

    def bind(self, fixed: dict[str, Any]) -> Builder[M]:
        """A builder whose instances all have ``fixed`` (trusted values, as given to a call)."""
        bound: Builder[M] = Builder.__new__(Builder)
        bound._cls = self._cls
        bound._defaults = {**self._defaults, **fixed}
        factories = self._factories
        if factories:
            factories = tuple(f for f in factories if f[0] not in fixed)
        bound._factories = factories
        bound._given = self._given.union(fixed)
        bound._sets = None if self._sets is None else {}
        return bound

    def __call__(self, **values: Any) -> M:
        """A new instance with ``values`` (trusted, by field name) and defaults."""
        return self.build(values)

    def build_all(self, values: dict[str, Any]) -> M:
        """A new instance from a value for every field, in field order (``values`` becomes
        its dict: do not use it afterwards)."""
        return self._new(values, tuple(values))

    def build(self, values: dict[str, Any]) -> M:
        """A new instance with ``values`` (trusted, by field name; not kept) and defaults."""
        data = self._defaults.copy()
        data.update(values)
        if self._factories:
            for name, factory in self._factories:
                if name not in values:
                    data[name] = factory()
        return self._new(data, tuple(values))

    def build_over(self, base: dict[str, Any], values: dict[str, Any]) -> M:
        """A new instance with ``base`` and then ``values`` (trusted, by field name; neither
        kept), and defaults: what ``build({**base, **values})`` returns, without the merged
        dict."""
        data = self._defaults.copy()
        data.update(base)
        data.update(values)
        if self._factories:
            for name, factory in self._factories:
                if name not in values and name not in base:
                    data[name] = factory()
        return self._new(data, (*base, *values))

    def _new(self, data: dict[str, Any], names: tuple[str, ...]) -> M:
        """An instance whose dict is ``data``, with ``names`` (and the bound fields) given.

        Instances of a frozen model share one fields set per combination of names:
        pydantic never changes the set of a frozen instance (``model_copy`` copies it
        first), and a set less per instance is an object less for the garbage collector
        to visit while runs are in flight.
        """
        sets = self._sets
        if sets is None:
            fields_set = self._given.union(names)
        else:
            shared = sets.get(names)
            if shared is None:
                shared = sets[names] = self._given.union(names)
            fields_set = shared
        cls = self._cls
        instance = cls.__new__(cls)
        _set(instance, "__dict__", data)
        _set(instance, "__pydantic_fields_set__", fields_set)
        _set(instance, "__pydantic_extra__", None)
        _set(instance, "__pydantic_private__", None)
        return instance


_set = object.__setattr__
"""Sets an attribute of a frozen model (as pydantic itself does)."""

_IMMUTABLE = (str, int, float, bool, bytes, type(None), frozenset, Enum, datetime)


def _shared(value: object) -> bool:
    """True when ``value`` may be shared by every instance (it cannot change)."""
    if isinstance(value, tuple):
        return all(_shared(item) for item in value)
    return isinstance(value, _IMMUTABLE) or (
        isinstance(value, BaseModel) and bool(value.model_config.get("frozen"))
    )


def _copier(value: object) -> Callable[[], Any]:
    """A factory of deep copies of ``value``."""
    return lambda: copy.deepcopy(value)
