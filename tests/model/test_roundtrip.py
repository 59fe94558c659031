"""Every model survives JSON ⇄ Python with camelCase keys; bad input names the bad field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from pydantic import BaseModel, TypeAdapter, ValidationError

import opsrun.model as m

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

TS = "2024-05-01T12:00:00Z"
EVENT_BASE: dict[str, Any] = {
    "seq": 3,
    "ts": TS,
    "runId": "run-1",
    "chatId": "chat-1",
    "userMessageId": "msg-u1",
    "trigger": "generate",
}
WINDOW: dict[str, Any] = {"mode": "window", "maxVersions": 5, "ttlMs": 86_400_000}
INCLUSION: dict[str, Any] = {
    "mode": "as_message",
    "operation": "insert",
    "target": "timeline",
    "anchor": {"type": "relative_to_end", "offset": -4, "roleFilter": "user"},
    "place": "before",
    "depthPolicy": "clamp_to_oldest_kept",
    "phase": "near_anchor",
    "priority": 5,
    "role": "developer",
    "format": "markdown",
    "versionSelector": {"type": "last_n", "n": 3},
}
WRITE_SPEC: dict[str, Any] = {
    "tag": "world_state",
    "persisted": True,
    "usage": "prompt+ui",
    "semantics": "state",
    "format": "json",
    "retention": WINDOW,
    "promptInclusion": {"mode": "prepend_system"},
    "uiPresentation": {"mode": "diff", "maxItems": 10, "surface": "panel:world"},
}
ERROR: dict[str, Any] = {
    "code": "timeout",
    "message": "aux call took longer than 15000 ms",
    "details": {"ms": 15000},
}
LLM_PARAMS: dict[str, Any] = {
    "providerRef": "offline",
    "model": "offline-notes",
    "credentialRef": "cred:notes",
    "system": "You write notes.",
    "prompt": "{{ chatHistory | last: 5 }}",
    "strictVariables": True,
    "maxInputTokens": 4000,
    "samplers": {
        "temperature": 0.2,
        "topP": 0.9,
        "topK": 40,
        "frequencyPenalty": 0.1,
        "presencePenalty": 0.0,
        "seed": 7,
    },
    "maxOutputTokens": 256,
    "stop": ["\n\n"],
    "budget": {"maxCostUsd": 0.01},
    "output": {"mode": "json", "schemaRef": "notes.v1"},
    "writeArtifact": {"tag": "augmentation_notes", "usage": "prompt_only"},
    "promptEffect": {"type": "prompt.insert_at_depth", "depthFromEnd": -2, "role": "system"},
    "timeoutMs": 15000,
    "retry": {"maxAttempts": 3, "backoffMs": 250, "retryOn": ["timeout", "rate_limit"]},
}
CONFIG: dict[str, Any] = {
    "enabled": True,
    "required": True,
    "hooks": ["before_main_llm"],
    "triggers": ["generate"],
    "order": 20,
    "dependsOn": ["builtin:is_combat_guard"],
    "params": {"topK": 4},
    "timeoutMs": 5000,
    "debug": {"enabled": True},
}
OP_RUN: dict[str, Any] = {
    "runId": "run-1",
    "operationId": "builtin:combat_rag",
    "operationName": "Combat retrieval",
    "hook": "before_main_llm",
    "trigger": "generate",
    "required": False,
    "order": 20,
    "dependsOn": ["builtin:is_combat_guard"],
    "status": "skipped",
    "skippedReason": "condition_false",
    "startedAt": TS,
    "finishedAt": "2024-05-01T12:00:01.250000Z",
    "durationMs": 1250.0,
    "inputsSummary": {"query": "sha256:ab12"},
    "outputsSummary": {"hits": 0},
    "committed": False,
}
RUN: dict[str, Any] = {
    "runId": "run-1",
    "trigger": "regenerate",
    "chatId": "chat-1",
    "branchId": "main",
    "userMessageId": "msg-u1",
    "profileId": "rp-basic",
    "profileRef": "rp-basic@1",
    "operationProfileSessionId": "sess-1",
    "dedupeKey": "chat-1:req:c-9",
    "status": "failed",
    "phase": "finished",
    "failedType": "after_main_llm",
    "failedDetails": {
        "operationId": "builtin:world_state_update",
        "errorCode": "artifact_conflict",
        "errorMessage": "stale version",
    },
    "startedAt": TS,
    "finishedAt": "2024-05-01T12:00:09Z",
    "durationMs": 9000.0,
    "mainLlm": {
        "started": True,
        "status": "done",
        "finishReason": "completed",
        "providerFinishReason": "stop",
        "text": "The gate creaks open.",
        "usage": {"inputTokens": 900, "outputTokens": 12, "totalTokens": 912, "costUsd": 0.002},
        "assistantMessageId": "msg-a1",
        "assistantVariantId": "var-a1-2",
        "promptHash": "0" * 64,
        "prompt": {
            "promptHash": "0" * 64,
            "messages": [
                {
                    "role": "system",
                    "domainRole": "developer",
                    "content": "Stay in character.",
                    "chars": 18,
                    "sha256": "1" * 64,
                    "source": {"kind": "effect", "operationId": "guard", "effect": "x"},
                },
                {
                    "role": "user",
                    "domainRole": "user",
                    "content": None,
                    "chars": 7,
                    "sha256": "2" * 64,
                    "truncated": True,
                    "storage": "hash_only",
                },
            ],
            "omittedMessages": 1,
            "rolesMapped": True,
            "historyWindow": {"maxMessages": 20},
            "trimmed": [
                {
                    "firstMessageId": "msg-u0",
                    "lastMessageId": "msg-a0",
                    "count": 2,
                    "reason": "max_messages",
                }
            ],
            "inclusions": [
                {
                    "tag": "world_state",
                    "profileIndex": 2,
                    "included": True,
                    "versions": [3],
                    "phase": "system",
                    "priority": 0,
                    "action": "insert",
                    "where": "system:end",
                },
                {"tag": "notes", "profileIndex": 0, "included": False, "reason": "mode_none"},
            ],
        },
        "params": {"model": "local-7b", "temperature": 0.7},
        "startedAt": TS,
        "finishedAt": "2024-05-01T12:00:08Z",
    },
    "appliedEffects": [
        {
            "index": 0,
            "operationId": "builtin:augmentation_notes",
            "hook": "before_main_llm",
            "type": "prompt.append_after_last_user",
        },
        {
            "index": 1,
            "operationId": "builtin:world_state_update",
            "hook": "after_main_llm",
            "type": "artifact.write",
            "tag": "world_state",
            "version": 4,
            "basedOnVersion": 3,
            "summary": "hp: 10 → 8",
            "prunedVersions": [1],
        },
    ],
    "artifactsAtStart": [{"tag": "world_state", "version": 3}],
}

# (model, a valid camelCase payload). Every exported model class appears at least once.
CASES: list[tuple[type[BaseModel], dict[str, Any]]] = [
    # retention: every variant of the discriminated union
    (m.OverwriteRetention, {"mode": "overwrite"}),
    (m.WindowRetention, WINDOW),
    (m.DurableRetention, {"mode": "durable"}),
    # anchors: every variant
    (m.AfterLastUser, {"type": "after_last_user"}),
    (m.BeforeLastAssistant, {"type": "before_last_assistant"}),
    (m.AfterMessageId, {"type": "after_message_id", "messageId": "msg-a0"}),
    (m.RelativeToEnd, {"type": "relative_to_end", "offset": -2, "roleFilter": "assistant"}),
    (
        m.RelativeToAnchor,
        {
            "type": "relative_to_anchor",
            "anchor": {"type": "after_message_id", "messageId": "m"},
            "offset": -1,
        },
    ),
    (m.VersionSelector, {"type": "last_n", "n": 2}),
    (m.PromptInclusion, INCLUSION),
    (
        m.PromptInclusion,
        {
            "mode": "append_after_last_user",
            "anchor": {"type": "before_last_assistant"},
            "section": "Notes",
        },
    ),
    (m.UiPresentation, {"mode": "timeline", "maxItems": 20, "surface": "feed:events"}),
    (m.ArtifactVersion, {"version": 2, "value": {"hp": 10}, "createdAt": TS}),
    (
        m.Artifact,
        {
            "tag": "world_state",
            "usage": "prompt+ui",
            "semantics": "state",
            "persisted": True,
            "value": {"location": "gate", "hp": 7},
            "format": "json",
            "version": 3,
            "basedOnVersion": 2,
            "history": [
                {"version": 2, "value": {"location": "road", "hp": 9}, "createdAt": TS},
                {"version": 1, "value": {"location": "inn", "hp": 10}, "createdAt": TS},
            ],
            "retention": {"mode": "durable"},
            "promptInclusion": INCLUSION,
            "uiPresentation": {"mode": "latest_only"},
            "writtenBy": "builtin:world_state_update",
            "runId": "run-1",
            "createdAt": TS,
            "updatedAt": "2024-05-01T12:05:00+02:00",
        },
    ),
    (
        m.ArtifactWrite,
        {
            "tag": "world_state",
            "value": "gate",
            "persisted": True,
            "usage": "ui_only",
            "semantics": "log/feed",
            "format": "markdown",
            "basedOnVersion": 3,
            "retention": {"mode": "overwrite"},
            "promptInclusion": {"mode": "none"},
            "uiPresentation": {"mode": "timeline"},
        },
    ),
    (m.WriteArtifactSpec, WRITE_SPEC),
    # operations and profiles
    (
        m.OperationCapabilities,
        {
            "writesArtifact": True,
            "writeTag": "is_combat",
            "promptEffects": False,
        },
    ),
    (
        m.OperationDefinition,
        {
            "operationId": "builtin:is_combat_guard",
            "name": "Combat guard",
            "kind": "compute",
            "description": "Is this a combat turn?",
            "capabilities": {"writesArtifact": True, "writeTag": "is_combat"},
        },
    ),
    (m.DebugConfig, {"enabled": True}),
    (m.OperationConfig, CONFIG),
    (m.ProfileOperation, {"operationId": "builtin:combat_rag", "config": CONFIG}),
    (
        m.OperationProfile,
        {
            "profileId": "rp-basic",
            "name": "RP basic",
            "description": "demo",
            "enabled": False,
            "operationProfileSessionId": "sess-1",
            "version": 2,
            "operations": [{"operationId": "builtin:combat_rag", "config": CONFIG}],
        },
    ),
    (
        m.OperationProfileSessionKey,
        {
            "chatId": "c",
            "branchId": "main",
            "profileRef": "rp-basic@2",
            "operationProfileSessionId": "s",
        },
    ),
    (
        m.OperationProfileSession,
        {
            "key": {
                "chatId": "c",
                "branchId": "main",
                "profileRef": "rp",
                "operationProfileSessionId": "s",
            },
            "createdAt": TS,
            "meta": {"owner": "alice"},
        },
    ),
    # params of the built-in kinds
    (m.AppendAfterLastUserTarget, {"type": "prompt.append_after_last_user", "role": "user"}),
    (m.SystemUpdateTarget, {"type": "prompt.system_update", "mode": "prepend"}),
    (m.InsertAtDepthTarget, {"type": "prompt.insert_at_depth", "depthFromEnd": -3}),
    (m.Samplers, LLM_PARAMS["samplers"]),
    (m.Budget, {"maxCostUsd": 0.5}),
    (m.OutputSpec, {"mode": "json", "schemaRef": "stats"}),
    (m.RetryPolicy, {"maxAttempts": 2, "backoffMs": 100, "retryOn": ["provider_error"]}),
    (m.LlmParams, LLM_PARAMS),
    (
        m.TemplateParams,
        {
            "template": "Stats: {{ art.stats.value }}",
            "strictVariables": True,
            "writeArtifact": {"tag": "stats_text"},
            "promptEffect": {"type": "prompt.system_update", "mode": "append"},
        },
    ),
    # effects: every prompt and turn effect
    (
        m.AppendAfterLastUser,
        {
            "type": "prompt.append_after_last_user",
            "role": "developer",
            "content": "n",
            "source": "art.notes",
        },
    ),
    (
        m.SystemUpdate,
        {"type": "prompt.system_update", "mode": "replace", "content": "You are a bard."},
    ),
    (m.InsertAtDepth, {"type": "prompt.insert_at_depth", "depthFromEnd": 0, "content": "tail"}),
    (m.UserVariant, {"type": "turn.user_variant", "content": "Attack the orc!", "select": False}),
    (m.AssistantVariant, {"type": "turn.assistant_variant", "content": "The orc falls."}),
    (
        m.AssistantBlocks,
        {"type": "turn.assistant_blocks", "blocks": [{"kind": "dice", "roll": 17}]},
    ),
    (m.AssistantMeta, {"type": "turn.assistant_meta", "meta": {"mood": "tense"}}),
    (
        m.OperationEffects,
        {
            "prompt": [
                {"type": "prompt.append_after_last_user", "content": "a"},
                {"type": "prompt.system_update", "mode": "append", "content": "b"},
                {"type": "prompt.insert_at_depth", "depthFromEnd": -1, "content": "c"},
            ],
            "turn": [
                {"type": "turn.user_variant", "content": "d"},
                {"type": "turn.assistant_meta", "meta": {"k": 1}},
            ],
            "artifact": {"tag": "notes", "value": "e", "basedOnVersion": 1},
        },
    ),
    (m.OperationError, ERROR),
    (
        m.OperationResult,
        {
            "status": "done",
            "effects": {"artifact": {"tag": "is_combat", "value": True, "persisted": False}},
            "outputsSummary": {"chars": 4},
            "inputsSummary": {"turn": "msg-u1"},
            "debug": {"score": 0.93},
        },
    ),
    (m.OperationResult, {"status": "error", "error": ERROR}),
    (m.OperationResult, {"status": "skipped", "skippedReason": "dependency_failed"}),
    # chat
    (
        m.MessageVariant,
        {
            "variantId": "v1",
            "content": "Hello",
            "blocks": [{"kind": "text"}],
            "meta": {"edited": True},
            "source": "operation:builtin:augmentation_notes",
            "runId": "run-1",
            "createdAt": TS,
        },
    ),
    (
        m.ChatMessage,
        {
            "messageId": "msg-a1",
            "chatId": "chat-1",
            "branchId": "main",
            "role": "assistant",
            "variants": [
                {"variantId": "v1", "content": "first", "source": "main_llm"},
                {"variantId": "v2", "content": "second", "source": "main_llm"},
            ],
            "selectedVariantId": "v2",
            "turnId": "msg-u1",
            "createdAt": TS,
        },
    ),
    (
        m.PromptSource,
        {
            "kind": "artifact",
            "operationId": "op",
            "effect": "x",
            "tag": "world_state",
            "version": 3,
        },
    ),
    (
        m.PromptMessage,
        {"role": "developer", "content": "notes", "source": {"kind": "history", "messageId": "m1"}},
    ),
    # runs
    (
        m.RunRequest,
        {
            "trigger": "generate",
            "chatId": "chat-1",
            "branchId": "alt",
            "profileId": "rp-basic",
            "userMessage": "I draw my sword.",
            "userMessageId": "msg-u1",
            "clientRequestId": "c-1",
            "systemPrompt": "You narrate.",
            "deadlineMs": 60000,
            "initiator": "system",
        },
    ),
    (
        m.RunRequest,
        {
            "trigger": "regenerate",
            "chatId": "chat-1",
            "userMessageId": "msg-u1",
            "mainLlmParams": {"model": "local-7b"},
        },
    ),
    (m.FailedDetails, RUN["failedDetails"]),
    (m.Usage, RUN["mainLlm"]["usage"]),
    (m.OperationRun, OP_RUN),
    (
        m.OperationRun,
        {**OP_RUN, "status": "error", "skippedReason": None, "error": ERROR, "commitIndex": None},
    ),
    (m.MainLlmCall, RUN["mainLlm"]),
    (m.AppliedEffect, RUN["appliedEffects"][1]),
    (m.ArtifactRef, RUN["artifactsAtStart"][0]),
    (m.PromptSnapshot, RUN["mainLlm"]["prompt"]),
    (m.SnapshotMessage, RUN["mainLlm"]["prompt"]["messages"][0]),
    (m.TrimmedRange, RUN["mainLlm"]["prompt"]["trimmed"][0]),
    (m.InclusionRecord, RUN["mainLlm"]["prompt"]["inclusions"][0]),
    (m.Run, RUN),
    (m.RunResult, {"run": RUN, "operationRuns": [OP_RUN], "deduplicated": True}),
    # events: every RunEvent type
    (m.RunStarted, {**EVENT_BASE, "type": "run.started"}),
    (m.RunPhaseChanged, {**EVENT_BASE, "type": "run.phase_changed", "phase": "barrier"}),
    (
        m.OperationStarted,
        {
            **EVENT_BASE,
            "type": "operation.started",
            "hook": "before_main_llm",
            "operationId": "builtin:combat_rag",
            "operationName": "Combat retrieval",
        },
    ),
    (
        m.OperationFinished,
        {
            **EVENT_BASE,
            "type": "operation.finished",
            "hook": "after_main_llm",
            "operationId": "builtin:world_state_update",
            "operationName": "World state update",
            "status": "error",
            "error": ERROR,
            "durationMs": 15000.5,
        },
    ),
    (m.MainLlmStarted, {**EVENT_BASE, "type": "main_llm.started"}),
    (m.MainLlmDelta, {**EVENT_BASE, "type": "main_llm.delta", "text": "The gate "}),
    (
        m.MainLlmFinished,
        {
            **EVENT_BASE,
            "type": "main_llm.finished",
            "status": "aborted",
            "finishReason": "user_abort",
        },
    ),
    (
        m.RunFinished,
        {
            **EVENT_BASE,
            "type": "run.finished",
            "status": "failed",
            "failedType": "before_barrier",
            "failedDetails": {"operationId": "builtin:is_combat_guard", "errorCode": "timeout"},
        },
    ),
    # validation results
    (
        m.ProfileIssue,
        {"code": "dependency_cycle", "operationId": "a", "message": "dependency cycle: a → b → a"},
    ),
    (m.ProfileIssue, {"code": "empty_profile_id", "operationId": None, "message": "empty"}),
    # store queries
    (
        m.ArchivedVersion,
        {"version": {"version": 2, "value": {"hp": 10}, "createdAt": TS}, "runId": "run-1"},
    ),
    (
        m.ChatSummary,
        {"chatId": "chat-1", "messageCount": 4, "lastMessageId": "msg-a2", "updatedAt": TS},
    ),
    (m.Page, {"items": [1, "two"], "nextCursor": "WyJydW5zIl0"}),
    (m.Page[m.ChatSummary], {"items": [], "nextCursor": None}),
]

EVENT_TYPES = [
    m.RunStarted,
    m.RunPhaseChanged,
    m.OperationStarted,
    m.OperationFinished,
    m.MainLlmStarted,
    m.MainLlmDelta,
    m.MainLlmFinished,
    m.RunFinished,
]


def _case_id(case: tuple[type[BaseModel], dict[str, Any]]) -> str:
    return case[0].__name__


def _assert_camel_keys(model: BaseModel, dumped: Any) -> None:
    """Every field of ``model`` (recursively) is keyed by its camelCase alias in ``dumped``."""
    assert isinstance(dumped, dict)
    for name, field in type(model).model_fields.items():
        key = field.alias or name
        assert key in dumped, f"{type(model).__name__}.{name} missing as {key!r}"
        if key != name:
            assert name not in dumped, f"{type(model).__name__} dumps snake_case {name!r}"
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            _assert_camel_keys(value, dumped[key])
        elif isinstance(value, tuple):
            for item, item_dump in zip(value, dumped[key], strict=True):
                if isinstance(item, BaseModel):
                    _assert_camel_keys(item, item_dump)


def test_cases_cover_every_exported_model() -> None:
    exported = {
        obj
        for name in m.__all__
        if isinstance(obj := getattr(m, name), type)
        and issubclass(obj, m.Model)
        and obj is not m.Model
    }
    covered = {cls for cls, _ in CASES}
    assert exported - covered == set()


@pytest.mark.parametrize(("cls", "payload"), CASES, ids=[_case_id(c) for c in CASES])
def test_json_roundtrip(cls: type[BaseModel], payload: dict[str, Any]) -> None:
    model = cls.model_validate(payload)
    text = model.model_dump_json()
    again = cls.model_validate_json(text)
    assert again == model
    assert again.model_dump_json() == text
    _assert_camel_keys(model, json.loads(text))


@pytest.mark.parametrize(("cls", "payload"), CASES, ids=[_case_id(c) for c in CASES])
def test_snake_case_names_accepted(cls: type[BaseModel], payload: dict[str, Any]) -> None:
    model = cls.model_validate(payload)
    # by_alias=False renames model fields only; free-form dicts (params, meta) keep their keys.
    snake = model.model_dump(by_alias=False)
    assert cls.model_validate(snake) == model


@pytest.mark.parametrize(("cls", "payload"), CASES, ids=[_case_id(c) for c in CASES])
def test_payload_values_survive(cls: type[BaseModel], payload: dict[str, Any]) -> None:
    """Every key given in the payload comes back under the same camelCase name."""
    dumped = json.loads(cls.model_validate(payload).model_dump_json())
    for key in payload:
        assert key in dumped


def test_known_camel_case_keys() -> None:
    config = m.OperationConfig(hooks=(m.Hook.BEFORE_MAIN_LLM,), order=10, depends_on=("a",))
    entry = m.ProfileOperation(operation_id="b", config=config)
    dumped = json.loads(entry.model_dump_json())
    assert dumped["operationId"] == "b"
    assert dumped["config"]["dependsOn"] == ["a"]
    write = m.ArtifactWrite(tag="world_state", value=1, based_on_version=3)
    assert json.loads(write.model_dump_json())["basedOnVersion"] == 3
    assert "based_on_version" not in write.model_dump_json()


def test_snake_case_input_with_explicit_payload() -> None:
    profile = m.OperationProfile.model_validate(
        {
            "profile_id": "p",
            "name": "P",
            "operation_profile_session_id": "s",
            "operations": [
                {
                    "operation_id": "b",
                    "config": {"hooks": ["after_main_llm"], "order": 1, "depends_on": ["a"]},
                }
            ],
        }
    )
    assert profile.operations[0].config.depends_on == ("a",)
    assert profile.operations[0].operation_id == "b"


def test_to_json_dict_drops_none() -> None:
    issue = m.ProfileIssue(code=m.ProfileIssueCode.EMPTY_PROFILE_ID, operation_id=None, message="x")
    assert issue.to_json_dict() == {"code": "empty_profile_id", "message": "x"}


# --- discriminated unions through their adapters ---------------------------------------------

RETENTION_CLASSES = (m.OverwriteRetention, m.WindowRetention, m.DurableRetention)
ANCHOR_CLASSES = (
    m.AfterLastUser,
    m.BeforeLastAssistant,
    m.AfterMessageId,
    m.RelativeToEnd,
    m.RelativeToAnchor,
)
PROMPT_EFFECTS = (m.AppendAfterLastUser, m.SystemUpdate, m.InsertAtDepth)
TURN_EFFECTS = (m.UserVariant, m.AssistantVariant, m.AssistantBlocks, m.AssistantMeta)
TARGETS = (m.AppendAfterLastUserTarget, m.SystemUpdateTarget, m.InsertAtDepthTarget)
ANCHOR_ADAPTER: TypeAdapter[Any] = TypeAdapter(m.Anchor)
TARGET_ADAPTER: TypeAdapter[Any] = TypeAdapter(m.PromptEffectTarget)

UNION_CASES: list[tuple[TypeAdapter[Any], type[BaseModel], dict[str, Any]]] = [
    *((m.RetentionAdapter, cls, p) for cls, p in CASES if cls in RETENTION_CLASSES),
    *((ANCHOR_ADAPTER, cls, p) for cls, p in CASES if cls in ANCHOR_CLASSES),
    *((m.PromptEffectAdapter, cls, p) for cls, p in CASES if cls in PROMPT_EFFECTS),
    *((m.TurnEffectAdapter, cls, p) for cls, p in CASES if cls in TURN_EFFECTS),
    *((TARGET_ADAPTER, cls, p) for cls, p in CASES if cls in TARGETS),
    *((m.RunEventAdapter, cls, p) for cls, p in CASES if cls in EVENT_TYPES),
]


def test_union_cases_cover_every_variant() -> None:
    covered = {cls for _, cls, _ in UNION_CASES}
    expected = {
        *RETENTION_CLASSES,
        *ANCHOR_CLASSES,
        *PROMPT_EFFECTS,
        *TURN_EFFECTS,
        *TARGETS,
        *EVENT_TYPES,
    }
    assert covered == expected


@pytest.mark.parametrize(
    ("adapter", "cls", "payload"), UNION_CASES, ids=[c[1].__name__ for c in UNION_CASES]
)
def test_discriminated_union_roundtrip(
    adapter: TypeAdapter[Any], cls: type[BaseModel], payload: dict[str, Any]
) -> None:
    value = adapter.validate_json(json.dumps(payload))
    assert type(value) is cls
    text = adapter.dump_json(value)
    assert adapter.validate_json(text) == value
    assert cls.model_validate(payload) == value


@pytest.mark.parametrize(
    "adapter",
    [
        m.RetentionAdapter,
        ANCHOR_ADAPTER,
        m.PromptEffectAdapter,
        m.TurnEffectAdapter,
        m.RunEventAdapter,
    ],
)
def test_unknown_discriminator_rejected(adapter: TypeAdapter[Any]) -> None:
    with pytest.raises(ValidationError) as info:
        adapter.validate_python({"type": "nope", "mode": "nope"})
    assert info.value.errors()[0]["type"] == "union_tag_invalid"


def test_nested_unions_pick_the_right_class() -> None:
    artifact = m.Artifact.model_validate(
        {
            "tag": "t",
            "usage": "internal",
            "persisted": True,
            "value": None,
            "retention": {"mode": "window", "maxVersions": 2},
            "promptInclusion": {
                "anchor": {
                    "type": "relative_to_anchor",
                    "anchor": {"type": "before_last_assistant"},
                    "offset": 1,
                }
            },
        }
    )
    assert isinstance(artifact.retention, m.WindowRetention)
    assert artifact.retention.max_versions == 2
    assert artifact.prompt_inclusion is not None
    anchor = artifact.prompt_inclusion.anchor
    assert isinstance(anchor, m.RelativeToAnchor)
    assert isinstance(anchor.anchor, m.BeforeLastAssistant)
    durable = m.Artifact.model_validate({**artifact.model_dump(), "retention": {"mode": "durable"}})
    assert isinstance(durable.retention, m.DurableRetention)


# --- invalid input ------------------------------------------------------------------------

BASE_CONFIG = {"hooks": ["before_main_llm"], "order": 1}

INVALID: list[tuple[str, type[BaseModel], dict[str, Any], str, str]] = [
    # (id, model, payload, field the error names, error type)
    ("missing-order", m.OperationConfig, {"hooks": ["before_main_llm"]}, "order", "missing"),
    (
        "order-not-number",
        m.OperationConfig,
        {**BASE_CONFIG, "order": "first"},
        "order",
        "float_parsing",
    ),
    ("empty-hooks", m.OperationConfig, {**BASE_CONFIG, "hooks": []}, "hooks", "too_short"),
    (
        "repeated-hooks",
        m.OperationConfig,
        {**BASE_CONFIG, "hooks": ["before_main_llm"] * 2},
        "hooks",
        "value_error",
    ),
    ("unknown-hook", m.OperationConfig, {**BASE_CONFIG, "hooks": ["pre"]}, "hooks", "enum"),
    (
        "typo-extra-field",
        m.OperationConfig,
        {**BASE_CONFIG, "dependOn": ["a"]},
        "dependOn",
        "extra_forbidden",
    ),
    (
        "zero-timeout",
        m.OperationConfig,
        {**BASE_CONFIG, "timeoutMs": 0},
        "timeoutMs",
        "greater_than_equal",
    ),
    (
        "empty-definition-id",
        m.OperationDefinition,
        {"operationId": "", "name": "n", "kind": "llm"},
        "operationId",
        "string_too_short",
    ),
    (
        "profile-no-session",
        m.OperationProfile,
        {"profileId": "p", "name": "P"},
        "operationProfileSessionId",
        "missing",
    ),
    ("bad-tag", m.WriteArtifactSpec, {"tag": "world-state"}, "tag", "value_error"),
    ("tag-too-long", m.ArtifactWrite, {"tag": "t" * 65, "value": 1}, "tag", "value_error"),
    ("bad-usage", m.WriteArtifactSpec, {"tag": "t", "usage": "everyone"}, "usage", "enum"),
    (
        "window-zero",
        m.WindowRetention,
        {"mode": "window", "maxVersions": 0},
        "maxVersions",
        "greater_than_equal",
    ),
    (
        "positive-offset",
        m.RelativeToEnd,
        {"type": "relative_to_end", "offset": 3},
        "offset",
        "less_than_equal",
    ),
    (
        "positive-depth",
        m.InsertAtDepth,
        {"type": "prompt.insert_at_depth", "depthFromEnd": 1, "content": "x"},
        "depthFromEnd",
        "less_than_equal",
    ),
    (
        "llm-no-prompt",
        m.LlmParams,
        {k: v for k, v in LLM_PARAMS.items() if k != "prompt"},
        "prompt",
        "missing",
    ),
    (
        "llm-no-write",
        m.LlmParams,
        {k: v for k, v in LLM_PARAMS.items() if k != "writeArtifact"},
        "writeArtifact",
        "missing",
    ),
    ("retry-too-many", m.RetryPolicy, {"maxAttempts": 11}, "maxAttempts", "less_than_equal"),
    ("top-p-zero", m.Samplers, {"topP": 0}, "topP", "greater_than"),
    (
        "no-variants",
        m.ChatMessage,
        {
            "messageId": "m",
            "chatId": "c",
            "branchId": "b",
            "role": "user",
            "variants": [],
            "selectedVariantId": "v",
        },
        "variants",
        "too_short",
    ),
    ("seq-zero", m.RunStarted, {**EVENT_BASE, "seq": 0}, "seq", "greater_than_equal"),
    (
        "wrong-literal",
        m.RunStarted,
        {**EVENT_BASE, "type": "run.finished"},
        "type",
        "literal_error",
    ),
    ("status-planned", m.OperationResult, {"status": "planned"}, "status", "literal_error"),
    (
        "empty-chat",
        m.RunRequest,
        {"trigger": "generate", "chatId": "", "userMessage": "hi"},
        "chatId",
        "string_too_short",
    ),
    (
        "bad-issue-code",
        m.ProfileIssue,
        {"code": "oops", "operationId": None, "message": "x"},
        "code",
        "enum",
    ),
]


@pytest.mark.parametrize(
    ("cls", "payload", "field", "error_type"),
    [c[1:] for c in INVALID],
    ids=[c[0] for c in INVALID],
)
def test_invalid_input_names_the_field(
    cls: type[BaseModel], payload: dict[str, Any], field: str, error_type: str
) -> None:
    with pytest.raises(ValidationError) as info:
        cls.model_validate(payload)
    errors = info.value.errors()
    assert any(field in err["loc"] and err["type"] == error_type for err in errors), errors
    # The JSON path reports the same problem.
    with pytest.raises(ValidationError):
        cls.model_validate_json(json.dumps(payload))


@pytest.mark.parametrize(
    ("cls", "payload", "message"),
    [
        (
            m.ChatMessage,
            {
                "messageId": "m",
                "chatId": "c",
                "branchId": "b",
                "role": "user",
                "variants": [{"variantId": "v1", "content": "x"}],
                "selectedVariantId": "v9",
            },
            "selected variant 'v9' is not a variant",
        ),
        (m.RunRequest, {"trigger": "generate", "chatId": "c"}, "generate needs user_message"),
        (
            m.RunRequest,
            {"trigger": "regenerate", "chatId": "c"},
            "regenerate needs user_message_id",
        ),
        (m.OperationResult, {"status": "error"}, "status 'error' needs an error"),
    ],
    ids=["unselected-variant", "generate-no-message", "regenerate-no-id", "error-no-error"],
)
def test_cross_field_rules(cls: type[BaseModel], payload: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        cls.model_validate(payload)


def test_models_are_frozen() -> None:
    config = m.OperationConfig.model_validate(BASE_CONFIG)
    with pytest.raises(ValidationError) as info:
        config.order = 2  # type: ignore[misc]  # frozen: the point of the test
    assert info.value.errors()[0]["type"] == "frozen_instance"
    assert config.order == 1
    assert hash(m.DebugConfig()) == hash(m.DebugConfig())


# --- JSON Schema of profiles -----------------------------------------------------------------


def _example_profile() -> dict[str, Any]:
    data = json.loads((EXAMPLES / "rp_basic.profile.json").read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def test_profile_json_schema_is_valid_draft_2020_12() -> None:
    schema = m.profile_json_schema()
    Draft202012Validator.check_schema(schema)
    assert "operationProfileSessionId" in schema["properties"]
    assert "operation_profile_session_id" not in schema["properties"]


def test_profile_json_schema_accepts_the_example() -> None:
    validator = Draft202012Validator(m.profile_json_schema())
    errors = list(validator.iter_errors(_example_profile()))
    assert errors == []


def test_profile_json_schema_rejects_missing_order() -> None:
    profile = _example_profile()
    del profile["operations"][1]["config"]["order"]
    validator = Draft202012Validator(m.profile_json_schema())
    errors = list(validator.iter_errors(profile))
    assert len(errors) == 1
    assert list(errors[0].absolute_path) == ["operations", 1, "config"]
    assert "'order' is a required property" in errors[0].message


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("operations", 0, "config", "hooks"), []),
        (("operations", 0, "config", "hooks"), ["during_main_llm"]),
        (("operations", 0, "config", "dependOn"), ["x"]),
        (("profileId",), 7),
    ],
    ids=["empty-hooks", "unknown-hook", "typo", "id-not-string"],
)
def test_profile_json_schema_rejects_bad_profiles(path: tuple[str | int, ...], value: Any) -> None:
    profile = _example_profile()
    target: Any = profile
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    assert not Draft202012Validator(m.profile_json_schema()).is_valid(profile)
    with pytest.raises(ValidationError):
        m.OperationProfile.model_validate(profile)


def test_example_profile_loads_and_roundtrips() -> None:
    profile = m.OperationProfile.model_validate(_example_profile())
    assert [op.operation_id for op in profile.operations] == [
        "builtin:is_combat_guard",
        "builtin:combat_rag",
        "builtin:augmentation_notes",
        "builtin:world_state_update",
    ]
    assert m.OperationProfile.model_validate_json(profile.model_dump_json()) == profile
    for entry in profile.operations:
        spec = m.WriteArtifactSpec.model_validate(entry.config.params["writeArtifact"])
        assert spec.tag
    notes = profile.operation("builtin:augmentation_notes")
    assert notes is not None
    params = m.LlmParams.model_validate(notes.config.params)
    assert "chatHistory" in params.prompt
    assert isinstance(params.prompt_effect, m.AppendAfterLastUserTarget)
