"""Fallback metrics over driver traces, and the check for making protocol v2 the only one.

Over the last ``window`` APPLY turns (traces with ``mode == "apply"``, newest by
``created_at``):

- ``fallback_rate = fallback_count / apply_count``;
- ``fallback_rate_excluding_non_utf8``: the same with the turns that fell back because of
  ``ERR_NON_UTF8_FILE`` left out of both counts (a limit of the data, not of v2);
- the fallbacks by reason and by stage;
- for ``ERR_PATCH_APPLY_FAILED``: how many turns met it, how many a v2 repair cured
  (the turn ended without a fallback) and how many fell back.

v2 may become the only protocol (``fallback_to_v1=False``) when, over a full window,
``fallback_rate_excluding_non_utf8`` and the share of turns meeting
``ERR_PATCH_APPLY_FAILED`` and ``ERR_V2_UPDATE_EXISTING_FORBIDDEN`` are each under the
threshold (1%), and repairs cure patch failures at least as often as fallbacks do.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._trace import TRACE_DIR

__all__ = ["FallbackMetrics", "fallback_metrics", "load_traces"]

_PATCH_FAILED = "ERR_PATCH_APPLY_FAILED"
_UPDATE_FORBIDDEN = "ERR_V2_UPDATE_EXISTING_FORBIDDEN"
_NON_UTF8 = "ERR_NON_UTF8_FILE"


@dataclass(frozen=True, slots=True, kw_only=True)
class FallbackMetrics:
    """What :func:`fallback_metrics` found. Rates are fractions (0.01 is 1%)."""

    window: int
    """How many of the newest APPLY turns were counted at most."""
    threshold: float
    """The rate each graduation criterion must stay under."""
    apply_count: int
    """APPLY turns counted."""
    fallback_count: int
    """Of those, turns that fell back from v2 to v1."""
    fallback_rate: float
    """``fallback_count / apply_count`` (0 when there are none)."""
    non_utf8_fallbacks: int
    """Fallbacks caused by ``ERR_NON_UTF8_FILE``."""
    fallback_rate_excluding_non_utf8: float
    """The fallback rate with non-UTF-8 fallbacks left out of both counts."""
    by_reason: dict[str, int] = field(default_factory=dict)
    """Fallbacks per reason code."""
    by_stage: dict[str, int] = field(default_factory=dict)
    """Fallbacks per stage (``schema``, ``validate``, ``preview``, ``apply``)."""
    patch_apply_failed: int = 0
    """Turns that met ``ERR_PATCH_APPLY_FAILED`` in v2."""
    patch_apply_repaired: int = 0
    """Of those, turns a v2 repair cured (no fallback, not failed)."""
    patch_apply_fallbacks: int = 0
    """Of those, turns that fell back to v1."""
    update_existing_forbidden: int = 0
    """Turns that met ``ERR_V2_UPDATE_EXISTING_FORBIDDEN``."""
    ready_for_v2_only: bool = False
    """Every graduation criterion holds over a full window."""
    unmet: tuple[str, ...] = ()
    """The criteria that do not hold, in words."""

    def to_dict(self) -> dict[str, Any]:
        """The metrics as JSON values."""
        return {name: getattr(self, name) for name in self.__dataclass_fields__} | {
            "unmet": list(self.unmet)
        }


def _rate(part: int, whole: int) -> float:
    return part / whole if whole else 0.0


def _codes(trace: Mapping[str, Any]) -> set[str]:
    """The error codes a trace lists (none when ``errors`` is not a list)."""
    errors = trace.get("errors")
    if not isinstance(errors, list):
        return set()
    return {str(e["code"]) for e in errors if isinstance(e, Mapping) and e.get("code")}


def fallback_metrics(
    traces: Iterable[Mapping[str, Any]], *, window: int = 100, threshold: float = 0.01
) -> FallbackMetrics:
    """Compute the fallback metrics of the newest ``window`` APPLY traces."""
    applies = sorted(
        (t for t in traces if t.get("mode") == "apply"), key=lambda t: str(t.get("created_at"))
    )[-window:]
    fell_back = [t for t in applies if t.get("protocol_fallback_attempted") is True]
    reasons = Counter(str(t.get("protocol_fallback_reason")) for t in fell_back)
    stages = Counter(str(t.get("protocol_fallback_stage")) for t in fell_back)
    non_utf8 = reasons.get(_NON_UTF8, 0)
    patch_turns = [t for t in applies if _PATCH_FAILED in _codes(t)]
    patch_fallbacks = sum(1 for t in patch_turns if t.get("protocol_fallback_attempted") is True)
    patch_repaired = sum(
        1
        for t in patch_turns
        if t.get("protocol_fallback_attempted") is not True and t.get("status") != "failed"
    )
    forbidden = sum(1 for t in applies if _UPDATE_FORBIDDEN in _codes(t))
    count = len(applies)
    excluding = _rate(len(fell_back) - non_utf8, count - non_utf8)
    unmet: list[str] = []
    if count < window:
        unmet.append(f"only {count} APPLY turns; the check needs {window}")
    if excluding >= threshold:
        unmet.append(f"fallback rate excluding non-UTF-8 is {excluding:.2%}")
    if _rate(len(patch_turns), count) >= threshold:
        unmet.append(f"{_PATCH_FAILED} met in {_rate(len(patch_turns), count):.2%} of turns")
    if patch_repaired < patch_fallbacks:
        unmet.append(f"{_PATCH_FAILED} fell back more often than repairs cured it")
    if _rate(forbidden, count) >= threshold:
        unmet.append(f"{_UPDATE_FORBIDDEN} met in {_rate(forbidden, count):.2%} of turns")
    return FallbackMetrics(
        window=window,
        threshold=threshold,
        apply_count=count,
        fallback_count=len(fell_back),
        fallback_rate=_rate(len(fell_back), count),
        non_utf8_fallbacks=non_utf8,
        fallback_rate_excluding_non_utf8=excluding,
        by_reason=dict(reasons),
        by_stage=dict(stages),
        patch_apply_failed=len(patch_turns),
        patch_apply_repaired=patch_repaired,
        patch_apply_fallbacks=patch_fallbacks,
        update_existing_forbidden=forbidden,
        ready_for_v2_only=not unmet,
        unmet=tuple(unmet),
    )


def load_traces(root: str | os.PathLike[str]) -> tuple[list[dict[str, Any]], int]:
    """Read ``<root>/.opsrun/traces/*.json``; return the traces and how many were unreadable.

    A file counts as unreadable when it cannot be read, is not JSON (too deeply nested
    included), is not an object, or has an ``errors`` field that is not a list.
    """
    folder = Path(root) / TRACE_DIR
    traces: list[dict[str, Any]] = []
    bad = 0
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else ():
        try:
            value = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError):
            bad += 1
            continue
        if isinstance(value, dict) and isinstance(value.get("errors", []), list):
            traces.append(value)
        else:
            bad += 1
    return traces, bad
