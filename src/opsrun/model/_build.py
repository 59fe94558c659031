"""Building models from values already known to be valid, without validating them again.

The runner makes many records per run (events, operation records, messages) from values
that came out of validated models or that it made itself with the right types.
Validating them once more is most of what building them costs; a :class:`Builder`
builds the same instance directly, as ``BaseModel.model_construct`` does, with the
field defaults worked out once per class instead of once per instance.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from datetime import datetime
from enum import Enum
from functools import partial
from typing import Any, Generic, TypeVar

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

__all__ = ["Builder", "Shape", "replaced"]

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
                factories.append((name, _quick(factory)))  # type: ignore[arg-type]  # no data
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

    def shape(self, names: Iterable[str]) -> Shape[M]:
        """A builder of instances that are always given exactly ``names``: their fields
        set is worked out once, here, instead of once per instance.

        Raises:
            ValueError: a name is not a field of the model.
        """
        given = self._given.union(names)
        unknown = given.difference(self._defaults)
        if unknown:
            raise ValueError(f"{self._cls.__name__} has no field {sorted(unknown)[0]!r}")
        factories = tuple(f for f in self._factories if f[0] not in given)
        return Shape(self._cls, self._defaults, factories, given, frozen=self._sets is not None)

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
        return _instance(self._cls, data, fields_set)


class Shape(Generic[M]):
    """Builds instances of one model class that are each given the same field names
    (see :meth:`Builder.shape`); the values are trusted as a :class:`Builder`'s are."""

    __slots__ = ("_defaults", "_factories", "_fields_set", "_frozen", "cls")

    def __init__(
        self,
        cls: type[M],
        defaults: dict[str, Any],
        factories: tuple[tuple[str, Callable[[], Any]], ...],
        fields_set: set[str],
        *,
        frozen: bool,
    ) -> None:
        self.cls = cls
        """The model class."""
        self._defaults = defaults
        self._factories = factories
        """The factories of the fields left to their defaults."""
        self._fields_set = fields_set
        """The names given: shared by the instances of a frozen model (see ``_new``)."""
        self._frozen = frozen

    def build_all(self, values: dict[str, Any]) -> M:
        """A new instance from a value for every field, in field order, which are the
        shape's names (``values`` becomes its dict: do not use it afterwards)."""
        fields_set = self._fields_set if self._frozen else set(self._fields_set)
        return _instance(self.cls, values, fields_set)

    def build(self, values: dict[str, Any]) -> M:
        """A new instance with ``values`` (trusted, by field name; not kept), which give
        exactly the shape's names, and defaults."""
        data = self._defaults.copy()
        data.update(values)
        for name, factory in self._factories:
            data[name] = factory()
        fields_set = self._fields_set if self._frozen else set(self._fields_set)
        return _instance(self.cls, data, fields_set)

    def build_over(self, base: dict[str, Any], values: dict[str, Any]) -> M:
        """A new instance with ``base`` and then ``values`` (trusted, by field name;
        neither kept), which together give exactly the shape's names, and defaults."""
        data = self._defaults.copy()
        data.update(base)
        data.update(values)
        for name, factory in self._factories:
            data[name] = factory()
        fields_set = self._fields_set if self._frozen else set(self._fields_set)
        return _instance(self.cls, data, fields_set)


def replaced(model: M, update: dict[str, Any]) -> M:
    """What ``model.model_copy(update=update)`` returns, without its overhead: ``update``
    holds trusted values by field name (as a :class:`Builder` takes them; not kept).

    A copy of a frozen model shares the fields set of ``model`` when ``update`` adds no
    name to it (pydantic never changes the set of a frozen instance, see ``_new``).
    Models with extra fields or private attributes, and mutable ones, are copied by
    ``model_copy`` itself.
    """
    cls = type(model)
    frozen = _FROZEN.get(cls)
    if frozen is None:
        frozen = _FROZEN[cls] = bool(cls.model_config.get("frozen"))
    if not frozen or model.__pydantic_extra__ is not None or model.__pydantic_private__ is not None:
        return model.model_copy(update=update)
    fields_set = model.__pydantic_fields_set__
    if not fields_set.issuperset(update):
        fields_set = fields_set.union(update)
    return _instance(cls, {**model.__dict__, **update}, fields_set)


_FROZEN: dict[type[BaseModel], bool] = {}
"""Per model class: are its instances frozen."""


def _instance(cls: type[M], data: dict[str, Any], fields_set: set[str]) -> M:
    """An instance of ``cls`` whose dict is ``data`` and fields set ``fields_set``, with
    no extra fields and no private attributes: what validation makes of them."""
    instance = _new_object(cls)
    _set_dict(instance, data)
    _set_fields_set(instance, fields_set)
    _set_extra(instance, None)
    _set_private(instance, None)
    return instance


# ``object.__new__(cls)`` rather than ``cls.__new__(cls)``: pydantic's metaclass has a
# ``__getattr__``, which makes every attribute look-up on a model class slower. The
# slots of BaseModel are set through their descriptors (as ``object.__setattr__`` does
# for pydantic, by name), which also skips a frozen model's ``__setattr__``.
_new_object = object.__new__
_set_dict = BaseModel.__dict__["__dict__"].__set__
_set_fields_set = BaseModel.__dict__["__pydantic_fields_set__"].__set__
_set_extra = BaseModel.__dict__["__pydantic_extra__"].__set__
_set_private = BaseModel.__dict__["__pydantic_private__"].__set__

_IMMUTABLE = (str, int, float, bool, bytes, type(None), frozenset, Enum, datetime)


def _shared(value: object) -> bool:
    """True when ``value`` may be shared by every instance (it cannot change)."""
    if isinstance(value, tuple):
        return all(_shared(item) for item in value)
    return isinstance(value, _IMMUTABLE) or (
        isinstance(value, BaseModel) and bool(value.model_config.get("frozen"))
    )


def _quick(factory: Callable[[], Any]) -> Callable[[], Any]:
    """``factory``, or a quicker maker of what it makes: for a model class (a
    ``default_factory=SomeModel``) whose instances made from nothing are its defaults
    only (no required field, no model validator, no default validated), a builder of
    it, which makes equal instances with the same (empty) fields set."""
    if not (isinstance(factory, type) and issubclass(factory, BaseModel)) or factory in _MAKING:
        return factory
    fields = factory.model_fields.values()
    if (
        factory.__init__ is not BaseModel.__init__
        or factory.__pydantic_decorators__.model_validators
        or factory.model_config.get("validate_default")
        or any(field.is_required() or field.validate_default for field in fields)
    ):
        return factory
    _MAKING.add(factory)
    try:
        builder = Builder(factory)
    except TypeError:  # it needs validation to be built
        return factory
    finally:
        _MAKING.discard(factory)
    return partial(builder.build, {})


_MAKING: set[type[BaseModel]] = set()
"""Model classes whose builder is being made (a model may make itself by default)."""


def _copier(value: object) -> Callable[[], Any]:
    """A factory of deep copies of ``value``."""
    return lambda: copy.deepcopy(value)
