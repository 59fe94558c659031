"""The run engine: operations around one main LLM call per chat turn.

Build a :class:`Runner` from stores, a main LLM and an :class:`OperationCatalog`,
then ``await runner.run(RunRequest(...))``.
"""

from __future__ import annotations

from ._commit import apply_retention as apply_retention
from ._commit import commit_order as commit_order
from ._commit import next_artifact as next_artifact
from ._context import AbortSignal as AbortSignal
from ._context import OperationContext as OperationContext
from ._context import RunMeta as RunMeta
from ._events import EventLog as EventLog
from ._executor import DEFAULT_CONCURRENCY as DEFAULT_CONCURRENCY
from ._executor import Executor as Executor
from ._executor import InProcessExecutor as InProcessExecutor
from ._executor import ThreadExecutor as ThreadExecutor
from ._explain import ReportArtifacts as ReportArtifacts
from ._explain import ReportExcerpt as ReportExcerpt
from ._explain import ReportGeneration as ReportGeneration
from ._explain import ReportInput as ReportInput
from ._explain import ReportMessage as ReportMessage
from ._explain import ReportOperation as ReportOperation
from ._explain import ReportOutcome as ReportOutcome
from ._explain import ReportPrivacy as ReportPrivacy
from ._explain import ReportPrompt as ReportPrompt
from ._explain import ReportStart as ReportStart
from ._explain import RunReport as RunReport
from ._explain import build_report as build_report
from ._inclusion import InclusionPlan as InclusionPlan
from ._inclusion import InclusionRecord as InclusionRecord
from ._inclusion import assemble_prompt as assemble_prompt
from ._inclusion import expand_inclusion as expand_inclusion
from ._inclusion import plan_inclusions as plan_inclusions
from ._inclusion import select_versions as select_versions
from ._kind_llm import LlmOperation as LlmOperation
from ._kind_template import TemplateOperation as TemplateOperation
from ._kinds import TokenCounter as TokenCounter
from ._kinds import approximate_tokens as approximate_tokens
from ._kinds import builtin_kinds as builtin_kinds
from ._lifecycle import SessionView as SessionView
from ._lifecycle import artifact_diff as artifact_diff
from ._lifecycle import session_view as session_view
from ._lifecycle import ui_projection as ui_projection
from ._liquid import TemplateCacheInfo as TemplateCacheInfo
from ._liquid import TemplateEngine as TemplateEngine
from ._liquid import TemplateLimits as TemplateLimits
from ._operation import FunctionOperation as FunctionOperation
from ._operation import Operation as Operation
from ._operation import OperationCatalog as OperationCatalog
from ._operation import OperationFn as OperationFn
from ._operation import SyncOperation as SyncOperation
from ._prompt import EffectivePrompt as EffectivePrompt
from ._prompt import build_prompt as build_prompt
from ._prompt import effective_prompt as effective_prompt
from ._prompt import prompt_hash as prompt_hash
from ._prompt import to_provider_messages as to_provider_messages
from ._report_md import render_markdown as render_markdown
from ._runner import Runner as Runner
from ._runner import SystemClock as SystemClock
from ._runner import UuidIds as UuidIds
from ._snapshot import SnapshotPolicy as SnapshotPolicy
from ._snapshot import take_snapshot as take_snapshot
from ._sse import sse_comment as sse_comment
from ._sse import sse_event as sse_event
from ._sse import sse_stream as sse_stream
from ._window import HistoryWindow as HistoryWindow
from ._window import TrimmedMessage as TrimmedMessage
from ._window import TrimReason as TrimReason
from ._window import TrimResult as TrimResult
from ._window import trim_history as trim_history

__all__ = [
    "DEFAULT_CONCURRENCY",
    "AbortSignal",
    "EffectivePrompt",
    "EventLog",
    "Executor",
    "FunctionOperation",
    "HistoryWindow",
    "InProcessExecutor",
    "InclusionPlan",
    "InclusionRecord",
    "LlmOperation",
    "Operation",
    "OperationCatalog",
    "OperationContext",
    "OperationFn",
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
    "RunMeta",
    "RunReport",
    "Runner",
    "SessionView",
    "SnapshotPolicy",
    "SyncOperation",
    "SystemClock",
    "TemplateCacheInfo",
    "TemplateEngine",
    "TemplateLimits",
    "TemplateOperation",
    "ThreadExecutor",
    "TokenCounter",
    "TrimReason",
    "TrimResult",
    "TrimmedMessage",
    "UuidIds",
    "apply_retention",
    "approximate_tokens",
    "artifact_diff",
    "assemble_prompt",
    "build_prompt",
    "build_report",
    "builtin_kinds",
    "commit_order",
    "effective_prompt",
    "expand_inclusion",
    "next_artifact",
    "plan_inclusions",
    "prompt_hash",
    "render_markdown",
    "select_versions",
    "session_view",
    "sse_comment",
    "sse_event",
    "sse_stream",
    "take_snapshot",
    "to_provider_messages",
    "trim_history",
    "ui_projection",
]
