"""Behaviour of the model helpers: artifact views, tags, enums and small accessors."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

import opsrun.model as m

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
T1 = datetime(2024, 5, 1, 12, 5, tzinfo=UTC)


def _world_state() -> m.Artifact:
    return m.Artifact(
        tag="world_state",
        usage=m.ArtifactUsage.PROMPT_AND_UI,
        semantics="state",
        persisted=True,
        value={"location": "gate"},
        format=m.ContentFormat.JSON,
        version=3,
        based_on_version=2,
        history=(
            m.ArtifactVersion(version=2, value={"location": "road"}, created_at=T0),
            m.ArtifactVersion(version=1, value={"location": "inn"}, created_at=T0),
        ),
        retention=m.WindowRetention(max_versions=5),
        written_by="builtin:world_state_update",
        updated_at=T1,
    )


def test_view_is_what_templates_see() -> None:
    view = _world_state().view()
    assert view == {
        "value": {"location": "gate"},
        "history": [{"location": "road"}, {"location": "inn"}],
        "meta": {
            "tag": "world_state",
            "version": 3,
            "basedOnVersion": 2,
            "usage": "prompt+ui",
            "semantics": "state",
            "persisted": True,
            "format": "json",
            "writtenBy": "builtin:world_state_update",
            "updatedAt": "2024-05-01T12:05:00+00:00",
        },
    }


def test_view_of_a_first_write() -> None:
    artifact = m.Artifact(tag="is_combat", usage="internal", persisted=False, value=True)
    view = artifact.view()
    assert view["value"] is True
    assert view["history"] == []
    assert view["meta"]["version"] == 1
    assert view["meta"]["basedOnVersion"] is None
    assert view["meta"]["updatedAt"] is None


def test_artifact_defaults() -> None:
    artifact = m.Artifact(tag="notes", usage="prompt_only", persisted=False, value="x")
    assert isinstance(artifact.retention, m.OverwriteRetention)
    assert artifact.format == m.ContentFormat.TEXT
    assert artifact.semantics == "intermediate"
    assert artifact.history == ()


@pytest.mark.parametrize("tag", ["world_state", "_x", "A1", "t" * 64, "is_combat"])
def test_valid_tags(tag: str) -> None:
    assert m.check_tag(tag) == tag


@pytest.mark.parametrize(
    "tag", ["", "1abc", "world-state", "art.world_state", "t" * 65, "with space", "ümlaut"]
)
def test_invalid_tags(tag: str) -> None:
    with pytest.raises(ValueError, match="artifact tag"):
        m.check_tag(tag)


def test_usage_in_prompt() -> None:
    assert {u for u in m.ArtifactUsage if u.in_prompt} == {
        m.ArtifactUsage.PROMPT_ONLY,
        m.ArtifactUsage.PROMPT_AND_UI,
    }


def test_terminal_statuses() -> None:
    assert {s for s in m.OperationStatus if s.is_terminal} == {
        m.OperationStatus.DONE,
        m.OperationStatus.SKIPPED,
        m.OperationStatus.ERROR,
        m.OperationStatus.ABORTED,
    }


def test_profile_ref_and_lookup() -> None:
    config = m.OperationConfig(hooks=(m.Hook.BEFORE_MAIN_LLM,), order=1)
    profile = m.OperationProfile(
        profile_id="rp",
        name="RP",
        operation_profile_session_id="s",
        operations=(m.ProfileOperation(operation_id="a", config=config),),
    )
    assert profile.ref == "rp"
    assert profile.model_copy(update={"version": 3}).ref == "rp@3"
    found = profile.operation("a")
    assert found is not None
    assert found.config is config
    assert profile.operation("b") is None


def test_session_key_tuple() -> None:
    key = m.OperationProfileSessionKey(
        chat_id="c", branch_id="main", profile_ref="rp@1", operation_profile_session_id="s"
    )
    assert key.as_tuple() == ("c", "main", "rp@1", "s")


@pytest.mark.parametrize(
    ("triggers", "generate", "regenerate"),
    [(None, True, True), (("generate",), True, False), (("regenerate",), False, True)],
)
def test_runs_on(triggers: tuple[str, ...] | None, generate: bool, regenerate: bool) -> None:
    config = m.OperationConfig.model_validate(
        {"hooks": ["before_main_llm"], "order": 1, "triggers": triggers}
    )
    assert config.runs_on(m.Trigger.GENERATE) is generate
    assert config.runs_on(m.Trigger.REGENERATE) is regenerate


def test_chat_message_selected_variant() -> None:
    message = m.ChatMessage(
        message_id="a1",
        chat_id="c",
        branch_id="main",
        role=m.ChatRole.ASSISTANT,
        variants=(
            m.MessageVariant(variant_id="v1", content="first"),
            m.MessageVariant(variant_id="v2", content="second"),
        ),
        selected_variant_id="v1",
    )
    assert message.selected.variant_id == "v1"
    assert message.prompt_text == "first"


@pytest.mark.parametrize(
    ("payload", "key"),
    [
        ({"trigger": "generate", "userMessage": "hi", "clientRequestId": "r1"}, "c:req:r1"),
        ({"trigger": "generate", "userMessage": "hi", "userMessageId": "u1"}, "c:gen:u1"),
        (
            {"trigger": "regenerate", "userMessageId": "u1", "assistantVariantId": "v2"},
            "c:regen:v2",
        ),
        (
            {"trigger": "regenerate", "userMessageId": "u1", "clientRequestId": "r2"},
            "c:req:r2",
        ),
        ({"trigger": "regenerate", "userMessageId": "u1"}, ""),
        ({"trigger": "generate", "userMessage": "hi"}, ""),
    ],
)
def test_dedupe_key(payload: dict[str, str], key: str) -> None:
    assert m.RunRequest.model_validate({"chatId": "c", **payload}).dedupe_key == key


def test_result_constructors() -> None:
    write = m.ArtifactWrite(tag="notes", value="n")
    done = m.OperationResult.done(
        prompt=[m.AppendAfterLastUser(content="n")], artifact=write, outputs_summary={"chars": 1}
    )
    assert done.status == m.OperationStatus.DONE
    assert done.effects.prompt == (m.AppendAfterLastUser(content="n"),)
    assert done.effects.artifact == write
    assert done.outputs_summary == {"chars": 1}
    assert not done.effects.is_empty

    skipped = m.OperationResult.skipped()
    assert skipped.skipped_reason == m.SkippedReason.CONDITION_FALSE
    assert skipped.effects.is_empty

    failed = m.OperationResult.failed("timeout", "too slow", {"ms": 10})
    assert failed.status == m.OperationStatus.ERROR
    assert failed.error == m.OperationError(code="timeout", message="too slow", details={"ms": 10})
    assert failed.effects.is_empty


def test_result_constructors_take_summaries_and_debug_data() -> None:
    done = m.OperationResult.done(inputs_summary={"docs": 2}, debug={"scores": [0.5]})
    assert (done.inputs_summary, done.debug) == ({"docs": 2}, {"scores": [0.5]})
    assert m.OperationResult.skipped(debug={"why": "empty"}).debug == {"why": "empty"}
    assert m.OperationResult.failed("x", "y", debug={"try": 2}).debug == {"try": 2}
    with pytest.raises(ValidationError):
        m.OperationResult.done(debug=["not", "an", "object"])  # type: ignore[arg-type]


def test_run_result_accessors() -> None:
    base = {
        "runId": "r",
        "operationName": "n",
        "trigger": "generate",
        "required": False,
        "order": 1,
    }
    before = m.OperationRun.model_validate(
        {**base, "operationId": "a", "hook": "before_main_llm", "status": "done"}
    )
    after = m.OperationRun.model_validate(
        {
            **base,
            "operationId": "a",
            "hook": "after_main_llm",
            "status": "error",
            "error": {"code": "timeout", "message": "slow"},
        }
    )
    run = m.Run.model_validate(
        {
            "runId": "r",
            "trigger": "generate",
            "chatId": "c",
            "branchId": "main",
            "userMessageId": "u",
            "status": "failed",
            "failedType": "after_main_llm",
            "startedAt": "2024-05-01T12:00:00Z",
        }
    )
    result = m.RunResult(run=run, operation_runs=(before, after))
    assert result.status == m.RunStatus.FAILED
    assert result.failed_type == m.FailedType.AFTER_MAIN_LLM
    assert result.operation("a") is before
    assert result.operation("a", m.Hook.AFTER_MAIN_LLM) is after
    assert result.operation("a", m.Hook.AFTER_MAIN_LLM).error_code == "timeout"
    assert before.error_code is None
    with pytest.raises(KeyError):
        result.operation("missing")
