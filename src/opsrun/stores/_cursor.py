"""What the store implementations share: page cursors, times as integers, argument checks.

A cursor is the position of the last item of a page, as URL-safe base64 of a JSON
array that starts with the query's name, so a cursor of one query is refused by
another. Times in cursors and orderings are integer microseconds since the Unix epoch
(:func:`micros`), exact and comparable across time zones.
"""

from __future__ import annotations

import base64
import binascii
import json
from datetime import UTC, datetime, timedelta
from typing import Any

from ..errors import ConfigError, StoreError

__all__ = [
    "check_limit",
    "check_prune",
    "decode_cursor",
    "encode_cursor",
    "from_micros",
    "micros",
]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def micros(moment: datetime) -> int:
    """``moment`` as integer microseconds since the Unix epoch (naive times count as UTC)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    delta = moment - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


_MIN_MICROS = -62_135_596_800_000_000
"""``micros`` of the earliest ``datetime`` (year 1, UTC)."""
_MAX_MICROS = 253_402_300_799_999_999
"""``micros`` of the latest ``datetime`` (year 9999, UTC): the numbers a cursor holds
(times, and counters far below it) stay in this range, which SQLite's and PostgreSQL's
64-bit integers hold too."""


def from_micros(value: int) -> datetime:
    """The UTC time ``value`` microseconds after the Unix epoch (inverse of :func:`micros`)."""
    return _EPOCH + timedelta(microseconds=value)


def encode_cursor(query: str, *position: int | str) -> str:
    """The cursor of ``query`` that continues after ``position``."""
    raw = json.dumps([query, *position], separators=(",", ":"), ensure_ascii=False)
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(query: str, cursor: str, *types: type[int] | type[str]) -> tuple[Any, ...]:
    """The position in a cursor of ``query``, checked against ``types``.

    Raises:
        StoreError: the cursor was not made by ``query`` (code ``bad_cursor``).
    """
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        decoded = json.loads(raw.decode())
    except (binascii.Error, UnicodeDecodeError, ValueError, TypeError):
        decoded = None
    if (
        isinstance(decoded, list)
        and len(decoded) == len(types) + 1
        and decoded[0] == query
        and all(type(v) is t for v, t in zip(decoded[1:], types, strict=True))
        and all(_MIN_MICROS <= v <= _MAX_MICROS for v in decoded[1:] if type(v) is int)
    ):
        return tuple(decoded[1:])
    raise StoreError(
        f"not a cursor of {query}: {cursor[:64]!r}",
        code="bad_cursor",
        details={"query": query, "cursor": cursor[:64]},
    )


def check_limit(limit: int) -> None:
    """Refuse a page size below 1.

    Raises:
        ConfigError: ``limit`` is not an integer of at least 1.
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ConfigError(
            f"limit must be an integer >= 1, got {limit!r}", details={"field": "limit"}
        )


def check_prune(older_than: datetime | None, keep_last: int | None) -> None:
    """Refuse a prune without a rule, or with a negative ``keep_last``.

    Raises:
        ConfigError: neither rule is given, or ``keep_last`` is below 0.
    """
    if older_than is None and keep_last is None:
        raise ConfigError(
            "prune_runs needs older_than, keep_last or both",
            details={"field": "older_than"},
        )
    if keep_last is not None and (
        isinstance(keep_last, bool) or not isinstance(keep_last, int) or keep_last < 0
    ):
        raise ConfigError(
            f"keep_last must be an integer >= 0, got {keep_last!r}",
            details={"field": "keep_last"},
        )
