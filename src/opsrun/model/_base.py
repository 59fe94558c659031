"""Base classes shared by every model: camelCase JSON, snake_case Python."""

from __future__ import annotations

from typing import Any, TypeAlias

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

JsonValue: TypeAlias = Any
"""Any JSON-compatible value (``dict``/``list``/``str``/``int``/``float``/``bool``/``None``)."""

JsonObject: TypeAlias = dict[str, Any]
"""A JSON object."""


def no_nul(value: str | None) -> str | None:
    """Return the id ``value`` unless it contains NUL (``\\x00``), which some stores
    cannot keep in a key.

    Raises:
        PydanticCustomError: it does (error type ``nul_character``).
    """
    if value is not None and "\x00" in value:
        raise PydanticCustomError(
            "nul_character",
            "an id must not contain NUL (\\x00): stores keep ids as text, which cannot hold it",
        )
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
