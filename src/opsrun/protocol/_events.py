"""Log events of the plan protocol: one named record per step, through an injectable sink.

The names are the protocol's (``LLM_REQUEST_SENT``, ``PREVIEW_READY``, ``APPLY_SUCCESS``…),
so a grep over logs or a dashboard built on them keeps working whichever host runs the loop.
The default sink writes one stdlib ``logging`` record per event on the
``opsrun.protocol`` logger; pass ``events=my_list.append`` to collect them instead.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, TypeAlias

from opsrun._redact import redact_value

__all__ = ["EVENT_NAMES", "PlanEvent", "PlanEventSink", "emit", "log_event"]

EVENT_NAMES: Final = frozenset(
    {
        "LLM_REQUEST_SENT",
        "LLM_RESPONSE_OK",
        "LLM_RESPONSE_REPAIR",
        "LLM_REQUEST_TIMEOUT",
        "LLM_REQUEST_FAILED",
        "LLM_RESPONSE_FORMAT_FALLBACK",
        "VALIDATION_FAILED",
        "PROTOCOL_FALLBACK",
        "PLAN_SAVED",
        "PREVIEW_READY",
        "APPLY_SUCCESS",
        "APPLY_ROLLBACK",
        "APPLY_FAILED",
        "CONTEXT_CACHE_HIT",
        "CONTEXT_CACHE_MISS",
        "CONTEXT_DIET_APPLIED",
        "MEMORY_UPDATED",
    }
)
"""Every event name the plan protocol emits."""

_LOGGER = logging.getLogger("opsrun.protocol")


@dataclass(frozen=True, slots=True)
class PlanEvent:
    """One step of the plan protocol, as a log record.

    Attributes:
        name: One of :data:`EVENT_NAMES`.
        fields: The event's data (JSON values only; no file contents, no secrets).
        trace_id: The propose cycle it belongs to, or None outside a driver turn.
    """

    name: str
    fields: Mapping[str, Any] = field(default_factory=dict)
    trace_id: str | None = None

    def line(self) -> str:
        """``NAME key=value …`` — the one-line form the default sink logs."""
        parts = [self.name]
        if self.trace_id is not None:
            parts.append(f"trace_id={self.trace_id}")
        parts.extend(f"{key}={value}" for key, value in self.fields.items())
        return " ".join(parts)


PlanEventSink: TypeAlias = Callable[[PlanEvent], None]
"""Receives each event; it must not raise (a failing sink is logged and ignored)."""


def log_event(event: PlanEvent) -> None:
    """The default sink: one ``logging`` record on ``opsrun.protocol``.

    Warnings for failures (``VALIDATION_FAILED``, ``LLM_REQUEST_TIMEOUT``,
    ``LLM_REQUEST_FAILED``, ``APPLY_ROLLBACK``, ``APPLY_FAILED``), info for the rest.
    The record carries ``opsrun_event`` (the name), ``opsrun_fields`` and ``trace_id``
    attributes for structured handlers.
    """
    level = logging.WARNING if event.name in _WARNINGS else logging.INFO
    if _LOGGER.isEnabledFor(level):
        _LOGGER.log(
            level,
            "%s",
            event.line(),
            extra={
                "opsrun_event": event.name,
                "opsrun_fields": dict(event.fields),
                "trace_id": event.trace_id,
            },
        )


_WARNINGS: Final = frozenset(
    {
        "VALIDATION_FAILED",
        "LLM_REQUEST_TIMEOUT",
        "LLM_REQUEST_FAILED",
        "APPLY_ROLLBACK",
        "APPLY_FAILED",
    }
)


def emit(sink: PlanEventSink | None, name: str, trace_id: str | None = None, **fields: Any) -> None:
    """Send one event to ``sink`` (``log_event`` when None), secrets in its fields masked;
    a failing sink is logged."""
    event = PlanEvent(name, redact_value(fields), trace_id)
    try:
        (sink or log_event)(event)
    except Exception:  # a host's sink must not break the protocol
        _LOGGER.exception("the plan event sink failed on %s", name)
