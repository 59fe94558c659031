"""Commit of staged effects at the end of a hook, and the turn's assistant reply."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import ArtifactConflict, StoreError
from ..model import (
    AppliedEffect,
    Artifact,
    ArtifactVersion,
    AssistantBlocks,
    AssistantMeta,
    AssistantVariant,
    ChatMessage,
    ChatRole,
    Hook,
    MessageVariant,
    OperationStatus,
    Trigger,
    TurnEffect,
    UserVariant,
)
from ..ports import ArtifactArchive
from ._commit import commit_order, next_artifact
from ._lifecycle import artifact_diff
from ._scheduler import OpExec, error_of

if TYPE_CHECKING:
    from ._runner import _RunState

__all__: list[str] = []


async def commit_hook(state: _RunState, hook: Hook) -> None:
    """Apply the staged effects of the hook's ``done`` operations in commit order.

    Per operation the artifact write goes first; if the store rejects it
    (``artifact_conflict``) the operation turns ``error`` and none of its effects apply.
    """
    done = [e for e in state.execs if e.hook == hook and e.status == OperationStatus.DONE]
    ordered = commit_order(
        done,
        key=lambda e: e.operation_id,
        depends_on=lambda e: e.config.depends_on,
        order=lambda e: e.config.order,
    )
    for e in ordered:
        assert e.result is not None
        effects = e.result.effects
        applied: list[AppliedEffect] = []
        if effects.artifact is not None:
            record = await _commit_artifact(state, e)
            if record is None:
                continue
            applied.append(record)
        for turn_effect in effects.turn:
            await _apply_turn_effect(state, e, turn_effect)
            applied.append(_applied(state, e, turn_effect.type, len(applied)))
        for prompt_effect in effects.prompt:
            state.prompt_effects.append((e.operation_id, prompt_effect))
            applied.append(_applied(state, e, prompt_effect.type, len(applied)))
        e.committed = True
        e.commit_index = state.commit_count
        state.commit_count += 1
        state.applied.extend(applied)


def _applied(state: _RunState, e: OpExec, kind: str, offset: int, **extra: object) -> AppliedEffect:
    return AppliedEffect.model_validate(
        {
            "index": len(state.applied) + offset,
            "operation_id": e.operation_id,
            "hook": e.hook,
            "type": kind,
            **extra,
        }
    )


async def _commit_artifact(state: _RunState, e: OpExec) -> AppliedEffect | None:
    assert e.result is not None
    assert e.result.effects.artifact is not None
    write = e.result.effects.artifact
    now = state.clock.now()
    if not write.persisted:
        artifact, _ = next_artifact(
            state.run_only.get(write.tag),
            write,
            now=now,
            run_id=state.run.run_id,
            operation_id=e.operation_id,
        )
        previous = state.run_only.get(write.tag)
        state.run_only[write.tag] = artifact
        return _applied(
            state,
            e,
            "artifact.write",
            0,
            tag=write.tag,
            version=artifact.version,
            summary=_change(state, previous, artifact),
        )
    assert state.session_key is not None
    sessions = state.runner.sessions
    current = (await sessions.get_artifacts(state.session_key)).get(write.tag)
    based_on = write.based_on_version
    if based_on is None:
        seen = state.persisted.get(write.tag)
        based_on = seen.version if seen is not None else None
    try:
        current_version = current.version if current is not None else None
        if current_version != based_on:
            raise ArtifactConflict(
                f"art.{write.tag} is at version {current_version}, the write was based on "
                f"{based_on}",
                details={"tag": write.tag},
            )
        artifact, pruned = next_artifact(
            current, write, now=now, run_id=state.run.run_id, operation_id=e.operation_id
        )
        archive = state.runner.archive
        if pruned and archive is not None:  # before the write: a failure loses nothing
            await _archive(archive, state, write.tag, pruned)
        await sessions.put_artifact(state.session_key, artifact, expected_version=based_on)
    except StoreError as exc:
        e.end(OperationStatus.ERROR, error=error_of(exc.code, exc.message, exc.details))
        e.result = None
        state.announce_finished(e)
        return None
    state.persisted[write.tag] = artifact
    pruned_versions = tuple(p.version for p in pruned)
    if pruned:
        e.outputs_summary = {**e.outputs_summary, "prunedVersions": list(pruned_versions)}
    return _applied(
        state,
        e,
        "artifact.write",
        0,
        tag=write.tag,
        version=artifact.version,
        based_on_version=based_on,
        summary=_change(state, current, artifact),
        pruned_versions=pruned_versions,
    )


async def _archive(
    archive: ArtifactArchive, state: _RunState, tag: str, pruned: tuple[ArtifactVersion, ...]
) -> None:
    assert state.session_key is not None
    try:
        await archive.archive(state.session_key, tag, pruned, run_id=state.run.run_id)
    except StoreError:
        raise
    except Exception as exc:  # a broken archive must not crash the run
        raise StoreError(
            f"the archive rejected pruned versions of art.{tag}: {type(exc).__name__}: {exc}",
            code="archive_failed",
            details={"tag": tag, "versions": [p.version for p in pruned]},
        ) from exc


def _change(state: _RunState, old: Artifact | None, new: Artifact) -> str:
    """The redacted short diff recorded with an artifact write."""
    diff = artifact_diff(None if old is None else old.value, new.value)
    return state.runner.redactor.redact(diff)


async def _apply_turn_effect(state: _RunState, e: OpExec, effect: TurnEffect) -> None:
    chats = state.runner.chats
    now = state.clock.now()
    if isinstance(effect, UserVariant):
        message = await chats.get_message(state.run.chat_id, state.run.user_message_id)
        variant = MessageVariant(
            variant_id=state.runner.ids.new_id("var"),
            content=effect.content,
            source=f"operation:{e.operation_id}",
            run_id=state.run.run_id,
            created_at=now,
        )
        await chats.save_message(_with_variant(message, variant, effect.select))
        return
    assert state.assistant_message is not None, "assistant effects commit after the main LLM"
    message = state.assistant_message
    if isinstance(effect, AssistantVariant):
        variant = MessageVariant(
            variant_id=state.runner.ids.new_id("var"),
            content=effect.content,
            source=f"operation:{e.operation_id}",
            run_id=state.run.run_id,
            created_at=now,
        )
        message = _with_variant(message, variant, effect.select)
    else:
        selected = message.selected
        if isinstance(effect, AssistantBlocks):
            selected = selected.model_copy(update={"blocks": effect.blocks})
        else:
            assert isinstance(effect, AssistantMeta)
            selected = selected.model_copy(update={"meta": {**selected.meta, **effect.meta}})
        message = message.model_copy(
            update={
                "variants": tuple(
                    selected if v.variant_id == selected.variant_id else v for v in message.variants
                )
            }
        )
    await chats.save_message(message)
    state.assistant_message = message


def _with_variant(message: ChatMessage, variant: MessageVariant, select: bool) -> ChatMessage:
    update: dict[str, object] = {"variants": (*message.variants, variant)}
    if select:
        update["selected_variant_id"] = variant.variant_id
    return message.model_copy(update=update)


async def store_assistant_reply(state: _RunState) -> None:
    """Record the main LLM's text as the turn's new (selected) assistant variant."""
    chats = state.runner.chats
    run = state.run
    variant_id = state.request.assistant_variant_id or state.runner.ids.new_id("var")
    variant = MessageVariant(
        variant_id=variant_id,
        content=state.main_llm.text or "",
        source="main_llm",
        run_id=run.run_id,
        created_at=state.clock.now(),
    )
    existing = None
    if run.trigger != Trigger.GENERATE:
        for message in await chats.history(run.chat_id, run.branch_id):
            if message.role == ChatRole.ASSISTANT and message.turn_id == run.user_message_id:
                existing = message
    if existing is not None:
        message = _with_variant(existing, variant, True)
    else:
        message = ChatMessage(
            message_id=state.runner.ids.new_id("msg"),
            chat_id=run.chat_id,
            branch_id=run.branch_id,
            role=ChatRole.ASSISTANT,
            variants=(variant,),
            selected_variant_id=variant_id,
            turn_id=run.user_message_id,
            created_at=state.clock.now(),
        )
    await chats.save_message(message)
    state.assistant_message = message
    state.main_llm = state.main_llm.model_copy(
        update={"assistant_message_id": message.message_id, "assistant_variant_id": variant_id}
    )
