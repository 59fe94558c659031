"""Parsed records by their stored text, so a record read again is not parsed again.

Every turn reads its chat's whole history, the profile and the session back; parsing
their JSON (pydantic validation) is most of what those reads cost. The cache keys a
parsed record by its model and its exact stored text, so a row that changed (in any
process) is parsed anew, and one that did not is the same record as before. Cached
records are frozen (:func:`~opsrun.stores._frozen.freeze_model`: their dicts and lists
refuse changes, as the in-memory stores' do), so the readers that share one cannot
change it for the others.
"""

from __future__ import annotations

import threading
from typing import Any, TypeVar

from pydantic import BaseModel

from .._frozen import freeze_model

__all__ = ["RecordCache"]

M = TypeVar("M", bound=BaseModel)

MAX_RECORDS = 4096
"""Records kept; the oldest go first."""
MAX_TEXT = 64 * 1024
"""Longer records are parsed every time (they would crowd the cache out)."""
MAX_CHARS = 8 * 1024 * 1024
"""Characters of stored text the kept records may hold in all: a cache of long messages
stays within tens of megabytes (the text and its parsed record), not hundreds."""


class RecordCache:
    """Parsed records by (model, stored text); safe to share between threads."""

    def __init__(self, size: int = MAX_RECORDS, chars: int = MAX_CHARS) -> None:
        self._size = size
        self._max_chars = chars
        self._chars = 0
        self._records: dict[tuple[type[BaseModel], str], Any] = {}
        self._lock = threading.Lock()

    def parse(self, model: type[M], text: str) -> M:
        """The record ``text`` holds, parsed once while it stays cached.

        Raises:
            pydantic.ValidationError: ``text`` does not parse as ``model``.
        """
        key = (model, text)
        found: M | None = self._records.get(key)
        if found is not None:
            return found
        record = freeze_model(model.model_validate_json(text))
        if len(text) <= MAX_TEXT:
            with self._lock:
                if key not in self._records:
                    records = self._records
                    self._chars += len(text)
                    while records and (len(records) >= self._size or self._chars > self._max_chars):
                        oldest = next(iter(records))
                        del records[oldest]
                        self._chars -= len(oldest[1])
                    records[key] = record
        return record
