"""Base classes shared by every model: camelCase JSON, snake_case Python."""

from __future__ import annotations

import re
from typing import Any, TypeAlias

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

JsonValue: TypeAlias = Any
"""Any JSON-compatible value (``dict``/``list``/``str``/``int``/``float``/``bool``/``None``)."""

JsonObject: TypeAlias = dict[str, Any]
"""A JSON object."""


_SURROGATE = re.compile("[\ud800-\udfff]")
"""A UTF-16 surrogate: in a Python string, text that cannot be encoded as UTF-8."""


def check_id(value: object) -> object:
    """Return ``value`` unless it is an id that contains NUL (``\\x00``) or a lone UTF-16
    surrogate, which some stores cannot keep in a key (a validator run before the
    field's own checks; what is not a string is left to them).

    Raises:
        PydanticCustomError: it does (error type ``nul_character`` or
            ``surrogate_character``).
    """
    if not isinstance(value, str):
        return value
    if "\x00" in value:
        raise PydanticCustomError(
            "nul_character",
            "an id must not contain NUL (\\x00): stores keep ids as text, which cannot hold it",
        )
    if _SURROGATE.search(value):
        raise PydanticCustomError(
            "surrogate_character",
            "an id must be valid Unicode: it holds a lone UTF-16 surrogate",
        )
    return value


MAX_JSON_DEPTH = 100
"""How deeply a JSON value kept in a record may nest (``[[1]]`` is 2 levels deep).

Every store, serialiser and parser a record passes through handles this depth; a
deeper value would be stored by one and refused, or crash the interpreter's stack,
in another."""


def well_formed(value: Any) -> Any:
    """``value`` (a string, or JSON made of dicts, lists and scalars) with each lone
    UTF-16 surrogate replaced by U+FFFD and each surrogate pair joined into its
    character, so it encodes as UTF-8 (a JavaScript client may send half an emoji).
    ``value`` itself when it needs no change.

    Raises:
        PydanticCustomError: it nests deeper than :data:`MAX_JSON_DEPTH` (error type
            ``json_too_deep``), or holds a float that is NaN or infinite, which JSON
            cannot hold (``json_not_finite``; stores would keep it as ``null``).
    """
    if isinstance(value, str):
        return _well_formed_text(value)
    if isinstance(value, float):
        return _finite(value)
    if not isinstance(value, dict | list | tuple):
        return value
    # One pass without recursion (a value may be nested deeper than the stack): the
    # depth check, and whether any text needs mending.
    mend = False
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise PydanticCustomError(
                "json_too_deep",
                "a JSON value may nest at most {limit} levels deep",
                {"limit": MAX_JSON_DEPTH},
            )
        children = item.values() if isinstance(item, dict) else item
        for child in children:
            if isinstance(child, str):
                mend = mend or _SURROGATE.search(child) is not None
            elif isinstance(child, dict | list | tuple):
                stack.append((child, depth + 1))
            elif isinstance(child, float):
                _finite(child)
        if isinstance(item, dict) and not mend:
            mend = any(isinstance(k, str) and _SURROGATE.search(k) for k in item)
    return mended(value) if mend else value


def _finite(number: float) -> float:
    if number - number != 0.0:  # NaN or an infinity (both give NaN here)
        raise PydanticCustomError(
            "json_not_finite",
            "a JSON value cannot hold {number}: NaN and infinities are not JSON numbers",
            {"number": repr(number)},
        )
    return number


def _well_formed_text(text: str) -> str:
    if _SURROGATE.search(text) is None:
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def mended(value: Any) -> Any:
    """``value`` (JSON made of dicts, lists, tuples and scalars) with its text mended as
    :func:`well_formed` mends it; recursive, for values whose depth is checked."""
    if isinstance(value, str):
        return _well_formed_text(value)
    if isinstance(value, dict):
        return {mended(k): mended(v) for k, v in value.items()}
    if isinstance(value, list):
        return [mended(v) for v in value]
    if isinstance(value, tuple):
        return tuple(mended(v) for v in value)
    return value


class Model(BaseModel):
    """Mutable-free base: camelCase aliases in JSON, snake_case attributes in Python.

    Both names are accepted on input; JSON output uses the camelCase alias so
    that ``Model.model_validate_json(m.model_dump_json()) == m`` holds.
    Unknown fields are rejected so that typos in hand-written profiles surface.
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        extra="forbid",
        frozen=True,
        use_attribute_docstrings=True,
    )

    def to_json_dict(self) -> JsonObject:
        """Return the model as a JSON-ready ``dict`` with camelCase keys."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)
