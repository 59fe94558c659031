"""Observability: OpenTelemetry spans of runs, and run ids on log records.

``Runner(telemetry=Telemetry())`` traces each run (the extra ``opsrun[otel]``);
:class:`RunLogFilter` puts ``run_id`` and ``operation_id`` on log records. See
``docs/observability.md`` for the span tree and every attribute.
"""

from __future__ import annotations

from ._logs import RunLogFilter as RunLogFilter
from ._logs import log_context as log_context
from ._telemetry import Telemetry as Telemetry

__all__ = ["RunLogFilter", "Telemetry", "log_context"]
