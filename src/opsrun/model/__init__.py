"""The vocabulary of opsrun as pydantic v2 models: no I/O, no concurrency.

JSON uses camelCase names (``operationId``, ``dependsOn``,
``basedOnVersion``); Python attributes are snake_case; both are accepted on input.
"""

from __future__ import annotations

from typing import Any

from ._artifact import AfterLastUser as AfterLastUser
from ._artifact import AfterMessageId as AfterMessageId
from ._artifact import Anchor as Anchor
from ._artifact import Artifact as Artifact
from ._artifact import ArtifactVersion as ArtifactVersion
from ._artifact import ArtifactWrite as ArtifactWrite
from ._artifact import BeforeLastAssistant as BeforeLastAssistant
from ._artifact import DurableRetention as DurableRetention
from ._artifact import OverwriteRetention as OverwriteRetention
from ._artifact import PromptInclusion as PromptInclusion
from ._artifact import RelativeToAnchor as RelativeToAnchor
from ._artifact import RelativeToEnd as RelativeToEnd
from ._artifact import Retention as Retention
from ._artifact import RetentionAdapter as RetentionAdapter
from ._artifact import Tag as Tag
from ._artifact import UiPresentation as UiPresentation
from ._artifact import VersionSelector as VersionSelector
from ._artifact import WindowRetention as WindowRetention
from ._artifact import WriteArtifactSpec as WriteArtifactSpec
from ._artifact import check_tag as check_tag
from ._base import MAX_JSON_DEPTH as MAX_JSON_DEPTH
from ._base import JsonObject as JsonObject
from ._base import JsonValue as JsonValue
from ._base import Model as Model
from ._chat import ChatMessage as ChatMessage
from ._chat import MessageVariant as MessageVariant
from ._chat import PromptMessage as PromptMessage
from ._chat import PromptSource as PromptSource
from ._chat import turn_order as turn_order
from ._effects import AppendAfterLastUser as AppendAfterLastUser
from ._effects import AssistantBlocks as AssistantBlocks
from ._effects import AssistantMeta as AssistantMeta
from ._effects import AssistantVariant as AssistantVariant
from ._effects import InsertAtDepth as InsertAtDepth
from ._effects import OperationEffects as OperationEffects
from ._effects import OperationError as OperationError
from ._effects import OperationResult as OperationResult
from ._effects import PromptEffect as PromptEffect
from ._effects import PromptEffectAdapter as PromptEffectAdapter
from ._effects import SystemUpdate as SystemUpdate
from ._effects import TurnEffect as TurnEffect
from ._effects import TurnEffectAdapter as TurnEffectAdapter
from ._effects import UserVariant as UserVariant
from ._enums import ArtifactUsage as ArtifactUsage
from ._enums import ChatRole as ChatRole
from ._enums import ContentFormat as ContentFormat
from ._enums import DomainRole as DomainRole
from ._enums import FailedType as FailedType
from ._enums import FinishReason as FinishReason
from ._enums import Hook as Hook
from ._enums import MainLlmStatus as MainLlmStatus
from ._enums import OperationStatus as OperationStatus
from ._enums import RunPhase as RunPhase
from ._enums import RunStatus as RunStatus
from ._enums import SkippedReason as SkippedReason
from ._enums import Trigger as Trigger
from ._events import MainLlmDelta as MainLlmDelta
from ._events import MainLlmFinished as MainLlmFinished
from ._events import MainLlmStarted as MainLlmStarted
from ._events import OperationFinished as OperationFinished
from ._events import OperationStarted as OperationStarted
from ._events import RunEvent as RunEvent
from ._events import RunEventAdapter as RunEventAdapter
from ._events import RunFinished as RunFinished
from ._events import RunPhaseChanged as RunPhaseChanged
from ._events import RunStarted as RunStarted
from ._issues import ProfileIssue as ProfileIssue
from ._issues import ProfileIssueCode as ProfileIssueCode
from ._operation import DebugConfig as DebugConfig
from ._operation import OperationCapabilities as OperationCapabilities
from ._operation import OperationConfig as OperationConfig
from ._operation import OperationDefinition as OperationDefinition
from ._operation import OperationProfile as OperationProfile
from ._operation import OperationProfileSession as OperationProfileSession
from ._operation import OperationProfileSessionKey as OperationProfileSessionKey
from ._operation import ProfileOperation as ProfileOperation
from ._params import AppendAfterLastUserTarget as AppendAfterLastUserTarget
from ._params import Budget as Budget
from ._params import InsertAtDepthTarget as InsertAtDepthTarget
from ._params import LlmParams as LlmParams
from ._params import OutputSpec as OutputSpec
from ._params import PromptEffectTarget as PromptEffectTarget
from ._params import RetryPolicy as RetryPolicy
from ._params import Samplers as Samplers
from ._params import SystemUpdateTarget as SystemUpdateTarget
from ._params import TemplateParams as TemplateParams
from ._prompt import AugmentationStorage as AugmentationStorage
from ._prompt import InclusionAction as InclusionAction
from ._prompt import InclusionRecord as InclusionRecord
from ._prompt import Phase as Phase
from ._prompt import PromptSnapshot as PromptSnapshot
from ._prompt import SnapshotMessage as SnapshotMessage
from ._prompt import TrimmedRange as TrimmedRange
from ._run import AppliedEffect as AppliedEffect
from ._run import ArtifactRef as ArtifactRef
from ._run import FailedDetails as FailedDetails
from ._run import MainLlmCall as MainLlmCall
from ._run import OperationRun as OperationRun
from ._run import Run as Run
from ._run import RunRequest as RunRequest
from ._run import RunResult as RunResult
from ._run import Usage as Usage
from ._store import ArchivedVersion as ArchivedVersion
from ._store import ChatSummary as ChatSummary
from ._store import Page as Page


def profile_json_schema() -> dict[str, Any]:
    """Return the JSON Schema of :class:`OperationProfile` (camelCase), for profile editors."""
    return OperationProfile.model_json_schema(by_alias=True, mode="validation")


__all__ = [
    "MAX_JSON_DEPTH",
    "AfterLastUser",
    "AfterMessageId",
    "Anchor",
    "AppendAfterLastUser",
    "AppendAfterLastUserTarget",
    "AppliedEffect",
    "ArchivedVersion",
    "Artifact",
    "ArtifactRef",
    "ArtifactUsage",
    "ArtifactVersion",
    "ArtifactWrite",
    "AssistantBlocks",
    "AssistantMeta",
    "AssistantVariant",
    "AugmentationStorage",
    "BeforeLastAssistant",
    "Budget",
    "ChatMessage",
    "ChatRole",
    "ChatSummary",
    "ContentFormat",
    "DebugConfig",
    "DomainRole",
    "DurableRetention",
    "FailedDetails",
    "FailedType",
    "FinishReason",
    "Hook",
    "InclusionAction",
    "InclusionRecord",
    "InsertAtDepth",
    "InsertAtDepthTarget",
    "JsonObject",
    "JsonValue",
    "LlmParams",
    "MainLlmCall",
    "MainLlmDelta",
    "MainLlmFinished",
    "MainLlmStarted",
    "MainLlmStatus",
    "MessageVariant",
    "Model",
    "OperationCapabilities",
    "OperationConfig",
    "OperationDefinition",
    "OperationEffects",
    "OperationError",
    "OperationFinished",
    "OperationProfile",
    "OperationProfileSession",
    "OperationProfileSessionKey",
    "OperationResult",
    "OperationRun",
    "OperationStarted",
    "OperationStatus",
    "OutputSpec",
    "OverwriteRetention",
    "Page",
    "Phase",
    "ProfileIssue",
    "ProfileIssueCode",
    "ProfileOperation",
    "PromptEffect",
    "PromptEffectAdapter",
    "PromptEffectTarget",
    "PromptInclusion",
    "PromptMessage",
    "PromptSnapshot",
    "PromptSource",
    "RelativeToAnchor",
    "RelativeToEnd",
    "Retention",
    "RetentionAdapter",
    "RetryPolicy",
    "Run",
    "RunEvent",
    "RunEventAdapter",
    "RunFinished",
    "RunPhase",
    "RunPhaseChanged",
    "RunRequest",
    "RunResult",
    "RunStarted",
    "RunStatus",
    "Samplers",
    "SkippedReason",
    "SnapshotMessage",
    "SystemUpdate",
    "SystemUpdateTarget",
    "Tag",
    "TemplateParams",
    "Trigger",
    "TrimmedRange",
    "TurnEffect",
    "TurnEffectAdapter",
    "UiPresentation",
    "Usage",
    "UserVariant",
    "VersionSelector",
    "WindowRetention",
    "WriteArtifactSpec",
    "check_tag",
    "profile_json_schema",
    "turn_order",
]
