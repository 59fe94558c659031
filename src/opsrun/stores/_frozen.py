"""Read-only JSON containers, so the in-memory stores keep and hand out snapshots.

The record models are frozen, but a ``dict`` or ``list`` inside one (an artifact value,
a variant's ``meta``, an operation's summary) could still be changed in place, and the
change would reach the stored record without a store call. So :func:`freeze_model`
returns the record itself when it holds no such container, or else a copy in which
every dict is a :class:`FrozenDict` and every list a :class:`FrozenList`: equal to the
original, serialised the same, but refusing changes with ``TypeError``. The stores hand
their frozen records out as they are, so reads copy nothing, whatever the size of a
chat. Containers that are already frozen are shared, not copied again.

Which fields of a model may hold a container is worked out once per model class from
its annotations, so a record is walked only where a container can be.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import date, datetime, time, timedelta
from enum import Enum
from types import NoneType, UnionType
from typing import (
    Annotated,
    Any,
    Literal,
    NoReturn,
    TypeAlias,
    TypeVar,
    Union,
    get_args,
    get_origin,
)

from pydantic import BaseModel

from ..model import ChatMessage, MessageVariant

__all__ = ["FROZEN_EMPTY", "FrozenDict", "FrozenList", "freeze", "freeze_model"]

M = TypeVar("M", bound=BaseModel)

_HINT = "it is part of a stored record; change a copy (copy.deepcopy(x) gives a plain one)"


def _refuse(*_: Any, **__: Any) -> NoReturn:
    raise TypeError(f"this container is read-only: {_HINT}")


class FrozenDict(dict[Any, Any]):
    """A ``dict`` that refuses changes; ``copy.copy`` and ``copy.deepcopy`` give plain ones."""

    __slots__ = ()

    __setitem__ = __delitem__ = __ior__ = _refuse
    clear = pop = popitem = setdefault = update = _refuse

    def __copy__(self) -> dict[Any, Any]:
        return dict(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[Any, Any]:
        return {copy.deepcopy(k, memo): copy.deepcopy(v, memo) for k, v in self.items()}

    def __reduce__(self) -> tuple[type[FrozenDict], tuple[dict[Any, Any]]]:
        return (FrozenDict, (dict(self),))


class FrozenList(list[Any]):
    """A ``list`` that refuses changes; ``copy.copy`` and ``copy.deepcopy`` give plain ones."""

    __slots__ = ()

    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse
    append = extend = insert = pop = remove = clear = sort = reverse = _refuse

    def __copy__(self) -> list[Any]:
        return list(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> list[Any]:
        return [copy.deepcopy(v, memo) for v in self]

    def __reduce__(self) -> tuple[type[FrozenList], tuple[list[Any]]]:
        return (FrozenList, (list(self),))


_ATOMS: frozenset[type] = frozenset(
    {str, int, float, bool, type(None), bytes, datetime, date, time, timedelta}
)
"""Types whose values are immutable and hold nothing (the common leaves, checked first)."""
_FROZEN: frozenset[type] = frozenset({FrozenDict, FrozenList})
_INERT: frozenset[type] = _ATOMS | _FROZEN
"""Values a freezer returns as they are."""
_NO_ITEMS: tuple[()] = ()
"""The empty tuple (one object in CPython): a field's usual default."""
FROZEN_EMPTY = FrozenDict()
"""The one empty frozen dict: every empty dict freezes to it."""

_Freezer: TypeAlias = Callable[[Any], Any]


def freeze(value: Any) -> Any:
    """``value`` itself when it holds no plain dict or list, else a frozen copy of it.

    Tuples and models are copied only when something inside them is.
    """
    cls = type(value)
    if cls is dict:
        return _freeze_dict(value) if value else FROZEN_EMPTY
    if cls in _ATOMS or cls in _FROZEN:
        return value
    if isinstance(value, dict):
        return _freeze_dict(value)
    if isinstance(value, list):
        return FrozenList([freeze(v) for v in value])
    if cls is tuple:
        return _freeze_items(value, freeze)
    if isinstance(value, BaseModel):
        return freeze_model(value)
    return value


def _freeze_dict(value: dict[Any, Any]) -> FrozenDict:
    return FrozenDict({k: freeze(v) for k, v in value.items()})


def _freeze_items(items: tuple[Any, ...], freezer: _Freezer) -> tuple[Any, ...]:
    """``items`` itself when ``freezer`` changes none of them, else the frozen tuple."""
    if not items:
        return items
    frozen = [freezer(item) for item in items]
    for old, new in zip(items, frozen, strict=True):
        if old is not new:
            return tuple(frozen)
    return items


def _tuple_freezer(item: _Freezer) -> _Freezer:
    def freeze_tuple(items: tuple[Any, ...]) -> tuple[Any, ...]:
        return _freeze_items(items, item) if items else items

    return freeze_tuple


def freeze_model(model: M) -> M:
    """``model`` itself when no field of it holds a plain dict or list, else a copy
    whose containers are frozen (the copy is not validated again: it is equal)."""
    cls = type(model)
    try:
        freezer = _FREEZERS[cls]
    except KeyError:
        freezer = _model_freezer(cls)
    return model if freezer is None else freezer(model)


def _replace(model: M, update: dict[str, Any]) -> M:
    """``model.model_copy(update=update)``, without its overhead (it runs on every save).

    The copy shares the original's set of explicitly set fields: frozen models never
    change it in place.
    """
    new = _new(type(model))
    _setattr(new, "__dict__", {**model.__dict__, **update})
    _set_fields_set(new, model.__pydantic_fields_set__)
    _set_extra(new, model.__pydantic_extra__)
    _set_private(new, model.__pydantic_private__)
    return new


_new = object.__new__
_setattr = object.__setattr__
_set_fields_set = BaseModel.__dict__["__pydantic_fields_set__"].__set__
_set_extra = BaseModel.__dict__["__pydantic_extra__"].__set__
_set_private = BaseModel.__dict__["__pydantic_private__"].__set__


def _freeze_message(message: ChatMessage) -> ChatMessage:
    """The freezer of :class:`ChatMessage`, written out: it runs on every save of a turn."""
    variants = message.variants
    frozen: list[MessageVariant] | None = None
    for index, variant in enumerate(variants):
        values = variant.__dict__
        meta, blocks = values["meta"], values["blocks"]
        if type(meta) is FrozenDict and all(type(block) is FrozenDict for block in blocks):
            continue
        if type(variant) is not MessageVariant:  # a subclass: it may hold more
            new = freeze_model(variant)
        else:
            new = _replace(variant, {"meta": freeze(meta), "blocks": _freeze_items(blocks, freeze)})
        if frozen is None:
            frozen = list(variants)
        frozen[index] = new
    return message if frozen is None else _replace(message, {"variants": tuple(frozen)})


_FREEZERS: dict[type[BaseModel], _Freezer | None] = {ChatMessage: _freeze_message}
"""Model class -> the function that freezes its records; None when they hold no container."""
_PLANNING: set[type[BaseModel]] = set()


def _model_freezer(cls: type[BaseModel]) -> _Freezer | None:
    """The freezer of ``cls``'s records, made once from its fields' annotations.

    It walks only the fields whose values may hold a dict or list.
    """
    _PLANNING.add(cls)
    try:
        fields = tuple(
            (name, freezer)
            for name, info in cls.model_fields.items()
            if (freezer := _field_freezer(info.annotation)) is not None
        )
    finally:
        _PLANNING.discard(cls)

    def freeze_record(model: BaseModel) -> BaseModel:
        values = model.__dict__
        update: dict[str, Any] | None = None
        for name, freezer in fields:
            old = values[name]
            if type(old) in _INERT or old is _NO_ITEMS:  # the common cases, without a call
                continue
            new = freezer(old)
            if new is not old:
                if update is None:
                    update = {}
                update[name] = new
        return model if update is None else _replace(model, update)

    _FREEZERS[cls] = made = freeze_record if fields else None
    return made


def _field_freezer(annotation: Any) -> _Freezer | None:
    """How to freeze a value of ``annotation``; None when it cannot hold a container."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _field_freezer(get_args(annotation)[0])
    if origin is Literal:
        return None
    if origin is Union or origin is UnionType:
        options = [a for a in get_args(annotation) if a is not NoneType]
        inner = [_field_freezer(a) for a in options]
        if all(f is None for f in inner):
            return None
        if len(inner) == 1:
            return _or_none(inner[0])
        return freeze
    if origin is tuple:
        args = get_args(annotation)
        if len(args) == 2 and args[1] is Ellipsis:
            item = _field_freezer(args[0])
            return None if item is None else _tuple_freezer(item)
        return None if all(_field_freezer(a) is None for a in args) else freeze
    if origin is None and isinstance(annotation, type):
        return _class_freezer(annotation)
    # dict[...], list[...] and other generics, Any, type variables, forward references
    return freeze


def _class_freezer(cls: type) -> _Freezer | None:
    """How to freeze an instance of ``cls``; None when it cannot hold a container."""
    if cls in _ATOMS or issubclass(cls, Enum | str | int | float):
        return None
    if not issubclass(cls, BaseModel):
        return freeze
    if cls in _PLANNING:  # a model that contains itself
        return freeze
    known = _FREEZERS.get(cls, _PENDING)
    made = _model_freezer(cls) if known is _PENDING else known
    # Dispatch on the value's own class: it may be a subclass.
    return None if made is None else freeze_model


def _pending(value: Any) -> Any:
    raise AssertionError("a marker, never called")


_PENDING: _Freezer = _pending
"""Marks a model class whose freezer is not made yet."""


def _or_none(freezer: _Freezer | None) -> _Freezer | None:
    if freezer is None:
        return None

    def freeze_optional(value: Any) -> Any:
        return value if value is None else freezer(value)

    return freeze_optional
