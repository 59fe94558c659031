"""Explaining runs to people and UIs.

- :func:`build_report` turns a run's stored records into a :class:`RunReport` ("why this
  answer"): the effective prompt and where each part came from, what every operation did,
  the artifacts read, included and written, the generation settings and the outcome.
  ``Runner.explain(run_id)`` builds it for a stored run; :func:`render_markdown` renders it.
- :func:`sse_event` and :func:`sse_stream` frame run events as Server-Sent Events;
  :class:`EventLog` is the client side: events deduplicated and ordered by ``seq``.
- :func:`session_view`, :func:`ui_projection` and :func:`artifact_diff` present a
  session's artifacts.
"""

from __future__ import annotations

from ._artifacts import SessionView as SessionView
from ._artifacts import artifact_diff as artifact_diff
from ._artifacts import session_view as session_view
from ._artifacts import ui_projection as ui_projection
from ._build import build_report as build_report
from ._event_log import EventLog as EventLog
from ._markdown import render_markdown as render_markdown
from ._sse import sse_comment as sse_comment
from ._sse import sse_event as sse_event
from ._sse import sse_stream as sse_stream
from ._types import ReportArtifacts as ReportArtifacts
from ._types import ReportExcerpt as ReportExcerpt
from ._types import ReportGeneration as ReportGeneration
from ._types import ReportInput as ReportInput
from ._types import ReportMessage as ReportMessage
from ._types import ReportOperation as ReportOperation
from ._types import ReportOutcome as ReportOutcome
from ._types import ReportPrivacy as ReportPrivacy
from ._types import ReportPrompt as ReportPrompt
from ._types import ReportStart as ReportStart
from ._types import RunReport as RunReport

__all__ = [
    "EventLog",
    "ReportArtifacts",
    "ReportExcerpt",
    "ReportGeneration",
    "ReportInput",
    "ReportMessage",
    "ReportOperation",
    "ReportOutcome",
    "ReportPrivacy",
    "ReportPrompt",
    "ReportStart",
    "RunReport",
    "SessionView",
    "artifact_diff",
    "build_report",
    "render_markdown",
    "session_view",
    "sse_comment",
    "sse_event",
    "sse_stream",
    "ui_projection",
]
