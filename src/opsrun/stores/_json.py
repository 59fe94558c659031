"""The JSON text the SQL stores keep for a record.

A record built without validation (``model_copy(update=...)``, ``model_construct``) may
hold text that has no UTF-8 form: a lone UTF-16 surrogate, as a JSON escape like
``"\\ud83d"`` cut from its pair decodes to. Rather than fail the write, which would lose
a finished run's record, such text is stored with U+FFFD in place of each lone
surrogate (a split pair is joined).
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, TypeAdapter
from pydantic_core import PydanticSerializationError, to_json

from ..model._base import mended

__all__ = ["record_json", "values_json"]

T = TypeVar("T")


def record_json(record: BaseModel) -> str:
    """``record`` as JSON text, text without a UTF-8 form mended.

    Raises:
        PydanticSerializationError: ``record`` holds a value that is not JSON.
    """
    try:
        return record.model_dump_json()
    except PydanticSerializationError:
        return _mended_json(record.model_dump())


def values_json(adapter: TypeAdapter[T], value: T) -> str:
    """``value`` as JSON text by ``adapter``, text without a UTF-8 form mended.

    Raises:
        PydanticSerializationError: ``value`` holds a value that is not JSON.
    """
    try:
        return adapter.dump_json(value).decode()
    except PydanticSerializationError:
        return _mended_json(adapter.dump_python(value))


def _mended_json(data: Any) -> str:
    return to_json(mended(data)).decode()
