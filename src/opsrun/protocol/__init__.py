"""The LLM edit-plan protocol (v1 and v2): parse, validate, patch, apply, and the loop.

Parse an LLM answer with :func:`parse_plan`, check it with :func:`validate_plan`
(every rule, all violations at once), and apply it in :func:`canonical_order`.
Schemas ship as package data; :func:`load_schema` returns the canonical schema
or the variant derived for providers with strict structured outputs.
:class:`PlanDriver` runs the whole loop (propose, validate, repair, fall back, preview,
apply) against a project directory with any LLM provider.
"""

from __future__ import annotations

from ._apply import ApplyResult as ApplyResult
from ._apply import CheckCommand as CheckCommand
from ._apply import apply_plan as apply_plan
from ._content import looks_like_unified_diff as looks_like_unified_diff
from ._context import ContextBlock as ContextBlock
from ._context import EnvBlock as EnvBlock
from ._context import FileBlock as FileBlock
from ._context import FileSystemContext as FileSystemContext
from ._context import LogsBlock as LogsBlock
from ._context import ProjectContext as ProjectContext
from ._context import Refusal as Refusal
from ._context import SearchBlock as SearchBlock
from ._context import render_context as render_context
from ._diet import ContextLimits as ContextLimits
from ._diet import Diet as Diet
from ._diet import apply_diet as apply_diet
from ._driver import DriverResult as DriverResult
from ._driver import PlanDriver as PlanDriver
from ._driver_config import DriverConfig as DriverConfig
from ._driver_state import FilePlanState as FilePlanState
from ._driver_state import InMemoryPlanState as InMemoryPlanState
from ._driver_state import PlanState as PlanState
from ._driver_state import SavedPlan as SavedPlan
from ._events import EVENT_NAMES as EVENT_NAMES
from ._events import PlanEvent as PlanEvent
from ._events import PlanEventSink as PlanEventSink
from ._fs import FileSystem as FileSystem
from ._journal import TransactionOutcome as TransactionOutcome
from ._journal import recover as recover
from ._journal import undo as undo
from ._limits import PathPolicy as PathPolicy
from ._limits import PlanLimits as PlanLimits
from ._limits import Violation as Violation
from ._memory import MEMORY_PATCH_KEYS as MEMORY_PATCH_KEYS
from ._memory import ProjectPrefs as ProjectPrefs
from ._memory import UserPrefs as UserPrefs
from ._memory import apply_memory_patch as apply_memory_patch
from ._memory import check_memory_patch as check_memory_patch
from ._memory_store import FileMemory as FileMemory
from ._memory_store import InMemoryMemory as InMemoryMemory
from ._memory_store import MemoryStore as MemoryStore
from ._memory_store import MemoryUpdater as MemoryUpdater
from ._memory_store import memory_block as memory_block
from ._metrics import FallbackMetrics as FallbackMetrics
from ._metrics import fallback_metrics as fallback_metrics
from ._metrics import load_traces as load_traces
from ._parse import normalize_eol as normalize_eol
from ._parse import parse_plan as parse_plan
from ._parse import plan_from_json as plan_from_json
from ._patch import apply_patch as apply_patch
from ._patch import apply_patch_detailed as apply_patch_detailed
from ._patch import check_base_sha256 as check_base_sha256
from ._patch import replace_range as replace_range
from ._patch import sha256_hex as sha256_hex
from ._patch_place import HunkPlacement as HunkPlacement
from ._patch_place import PatchResult as PatchResult
from ._patch_place import PatchTolerance as PatchTolerance
from ._plan import Action as Action
from ._plan import ActionKind as ActionKind
from ._plan import ContextRequest as ContextRequest
from ._plan import ContextRequestType as ContextRequestType
from ._plan import Plan as Plan
from ._plan import canonical_order as canonical_order
from ._preview import DiffItem as DiffItem
from ._preview import preview_plan as preview_plan
from ._prompts import REPAIR_HINTS as REPAIR_HINTS
from ._prompts import system_prompt as system_prompt
from ._schemas import load_schema as load_schema
from ._schemas import schema_hash as schema_hash
from ._validate import NO_CHANGES_PREFIX as NO_CHANGES_PREFIX
from ._validate import validate_plan as validate_plan

__all__ = [
    "EVENT_NAMES",
    "MEMORY_PATCH_KEYS",
    "NO_CHANGES_PREFIX",
    "REPAIR_HINTS",
    "Action",
    "ActionKind",
    "ApplyResult",
    "CheckCommand",
    "ContextBlock",
    "ContextLimits",
    "ContextRequest",
    "ContextRequestType",
    "Diet",
    "DiffItem",
    "DriverConfig",
    "DriverResult",
    "EnvBlock",
    "FallbackMetrics",
    "FileBlock",
    "FileMemory",
    "FilePlanState",
    "FileSystem",
    "FileSystemContext",
    "HunkPlacement",
    "InMemoryMemory",
    "InMemoryPlanState",
    "LogsBlock",
    "MemoryStore",
    "MemoryUpdater",
    "PatchResult",
    "PatchTolerance",
    "PathPolicy",
    "Plan",
    "PlanDriver",
    "PlanEvent",
    "PlanEventSink",
    "PlanLimits",
    "PlanState",
    "ProjectContext",
    "ProjectPrefs",
    "Refusal",
    "SavedPlan",
    "SearchBlock",
    "TransactionOutcome",
    "UserPrefs",
    "Violation",
    "apply_diet",
    "apply_memory_patch",
    "apply_patch",
    "apply_patch_detailed",
    "apply_plan",
    "canonical_order",
    "check_base_sha256",
    "check_memory_patch",
    "fallback_metrics",
    "load_schema",
    "load_traces",
    "looks_like_unified_diff",
    "memory_block",
    "normalize_eol",
    "parse_plan",
    "plan_from_json",
    "preview_plan",
    "recover",
    "render_context",
    "replace_range",
    "schema_hash",
    "sha256_hex",
    "system_prompt",
    "undo",
    "validate_plan",
]
