"""The "why this answer" report: a finished run's records, explained for a person.

:func:`build_report` reads only what a run leaves behind (the :class:`~opsrun.model.Run`
with its main LLM call, prompt snapshot and applied effects, plus its
:class:`~opsrun.model.OperationRun` records) and returns a :class:`RunReport`;
:func:`render_markdown` turns that into Markdown. Both are pure: nothing is fetched or
written, so a report can be rebuilt from stored records at any time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Final

from .._redact import DEFAULT_REDACTOR, Redactor, sha256_text
from ..model import (
    AppliedEffect,
    AugmentationStorage,
    Hook,
    OperationRun,
    PromptSource,
    Run,
    SnapshotMessage,
)
from ._types import REASONING_NOTE as REASONING_NOTE
from ._types import (
    ReportArtifacts,
    ReportExcerpt,
    ReportGeneration,
    ReportInput,
    ReportMessage,
    ReportOperation,
    ReportOutcome,
    ReportPrivacy,
    ReportPrompt,
    ReportStart,
    RunReport,
)

__all__ = [
    "HASH_PREFIX",
    "TEXT_LIMIT",
    "build_report",
]

TEXT_LIMIT: Final = 4000
"""Characters of the user message and of the reply kept in a report."""
HASH_PREFIX: Final = 12
"""Hex digits of a message's sha256 kept in a report."""

_AUGMENTATION_KINDS: Final = frozenset({"effect", "artifact"})
_HOOK_RANK: Final = {hook: rank for rank, hook in enumerate(Hook)}
_STORAGE_RANK: Final = {storage: rank for rank, storage in enumerate(AugmentationStorage)}


def build_report(
    run: Run,
    operation_runs: Sequence[OperationRun],
    *,
    user_message: str | None = None,
    history_size: int | None = None,
    history_texts: Mapping[str, str] | None = None,
    redactor: Redactor | None = None,
) -> RunReport:
    """Explain a run from its records.

    Args:
        run: The run record.
        operation_runs: Its operation runs, in any order.
        user_message: The selected variant's text of the turn's user message, if known;
            redacted and cut to ``TEXT_LIMIT`` characters.
        history_size: How many chat messages the history held up to and including the
            turn's user message, if known.
        history_texts: The chat's texts of history messages by message id, if known:
            a message the run kept by reference is shown with this text (redacted, cut
            to ``TEXT_LIMIT``) when its sha256 is still the one sent.
        redactor: Masks secrets in the user message and the reply (built-in rules by
            default); everything else was redacted when it was recorded.

    Raises:
        ValueError: if an operation run belongs to another run, or ``history_size`` is
            negative.
    """
    foreign = sorted({o.run_id for o in operation_runs if o.run_id != run.run_id})
    if foreign:
        raise ValueError(f"operation runs of other runs given for {run.run_id!r}: {foreign}")
    if history_size is not None and history_size < 0:
        raise ValueError(f"history_size must be >= 0, got {history_size}")
    redactor = redactor or DEFAULT_REDACTOR
    llm = run.main_llm
    snapshot = llm.prompt
    prompt = None
    storages: set[AugmentationStorage] = set()
    if snapshot is not None:
        texts = history_texts or {}
        messages = tuple(
            ReportMessage(
                position=i,
                role=m.role,
                domain_role=m.domain_role,
                source=_source_label(m.source),
                source_kind=m.source.kind if m.source else None,
                content=content,
                chars=m.chars,
                sha256=m.sha256[:HASH_PREFIX],
                truncated=truncated,
                storage=m.storage,
            )
            for i, m in enumerate(snapshot.messages, start=1)
            for content, truncated in (_kept_text(m, texts, redactor),)
        )
        storages = {m.storage for m in messages if m.source_kind in _AUGMENTATION_KINDS}
        prompt = ReportPrompt(
            prompt_hash=snapshot.prompt_hash,
            messages=messages,
            omitted_messages=snapshot.omitted_messages,
            roles_mapped=snapshot.roles_mapped
            or any(m.role != m.domain_role for m in snapshot.messages),
            history_window=snapshot.history_window,
            history_messages=sum(m.source_kind == "history" for m in messages),
            trimmed=snapshot.trimmed,
        )
    return RunReport(
        run_id=run.run_id,
        status=run.status,
        start=ReportStart(
            run_id=run.run_id,
            trigger=run.trigger,
            dedupe_key=run.dedupe_key,
            deduplicable=bool(run.dedupe_key),
            initiator=run.initiator,
            chat_id=run.chat_id,
            branch_id=run.branch_id,
            user_message_id=run.user_message_id,
            profile_id=run.profile_id,
            profile_ref=run.profile_ref,
            operation_profile_session_id=run.operation_profile_session_id,
            started_at=run.started_at,
            finished_at=run.finished_at,
        ),
        inputs=ReportInput(
            user_message_id=run.user_message_id,
            user_message=_excerpt(user_message, redactor),
            history_size=history_size,
        ),
        prompt=prompt,
        operations=_operations(run, operation_runs),
        artifacts=ReportArtifacts(
            at_start=run.artifacts_at_start,
            inclusions=snapshot.inclusions if snapshot is not None else (),
            written=tuple(
                e
                for e in sorted(run.applied_effects, key=lambda e: e.index)
                if e.type == "artifact.write"
            ),
        ),
        generation=ReportGeneration(
            called=llm.started,
            status=llm.status,
            finish_reason=llm.finish_reason,
            provider_finish_reason=llm.provider_finish_reason,
            params=llm.params,
            usage=llm.usage,
            duration_ms=_elapsed_ms(llm.started_at, llm.finished_at),
            prompt_hash=llm.prompt_hash or (snapshot.prompt_hash if snapshot else None),
            error_code=llm.error.code if llm.error else None,
            error_message=llm.error.message if llm.error else None,
            assistant_message_id=llm.assistant_message_id,
            assistant_variant_id=llm.assistant_variant_id,
            reply=_excerpt(llm.text, redactor),
        ),
        outcome=ReportOutcome(
            status=run.status,
            phase=run.phase,
            failed_type=run.failed_type,
            failed_details=run.failed_details,
            abort_reason=run.abort_reason,
            duration_ms=run.duration_ms
            if run.duration_ms is not None
            else _elapsed_ms(run.started_at, run.finished_at),
        ),
        privacy=ReportPrivacy(
            snapshot_recorded=snapshot is not None,
            augmentation_storage=tuple(sorted(storages, key=_STORAGE_RANK.__getitem__)),
        ),
    )


def _source_label(source: PromptSource | None) -> str:
    """Name where a prompt message came from: ``history m4``, ``effect guard (…)``…"""
    if source is None:
        return "not recorded"
    match source.kind:
        case "system":
            return "system prompt"
        case "history":
            return f"history {source.message_id or '?'}"
        case "artifact":
            label = f"artifact {source.tag or '?'}"
            if source.version is not None:
                label += f" v{source.version}"
            return label + (f" on {source.message_id}" if source.message_id else "")
        case "effect":
            label = f"effect {source.operation_id or '?'}"
            label += f" ({source.effect})" if source.effect else ""
            return label + (f" from {source.note}" if source.note else "")
        case other:
            return other


def _operations(run: Run, operation_runs: Sequence[OperationRun]) -> tuple[ReportOperation, ...]:
    effects: dict[tuple[str, Hook], list[AppliedEffect]] = {}
    for effect in sorted(run.applied_effects, key=lambda e: e.index):
        effects.setdefault((effect.operation_id, effect.hook), []).append(effect)
    ordered = sorted(operation_runs, key=lambda o: (_HOOK_RANK[o.hook], o.order, o.operation_id))
    return tuple(
        ReportOperation(
            operation_id=o.operation_id,
            operation_name=o.operation_name,
            hook=o.hook,
            order=o.order,
            required=o.required,
            depends_on=o.depends_on,
            status=o.status,
            skipped_reason=o.skipped_reason,
            error_code=o.error.code if o.error else None,
            error_message=o.error.message if o.error else None,
            duration_ms=o.duration_ms
            if o.duration_ms is not None
            else _elapsed_ms(o.started_at, o.finished_at),
            committed=o.committed,
            commit_index=o.commit_index,
            changes=tuple(effects.get((o.operation_id, o.hook), ())),
        )
        for o in ordered
    )


def _kept_text(
    message: SnapshotMessage, texts: Mapping[str, str], redactor: Redactor
) -> tuple[str | None, bool]:
    """The text a report shows of ``message``, and whether it was cut."""
    if message.storage == AugmentationStorage.HASH_ONLY:
        return None, message.truncated
    if message.storage != AugmentationStorage.REFERENCE:
        return message.content, message.truncated
    message_id = message.source.message_id if message.source else None
    text = texts.get(message_id) if message_id else None
    if text is None or sha256_text(text) != message.sha256:
        return None, False  # deleted, or edited since the run
    text = redactor.redact(text)
    return text[:TEXT_LIMIT], len(text) > TEXT_LIMIT


def _excerpt(text: str | None, redactor: Redactor) -> ReportExcerpt | None:
    if text is None:
        return None
    text = redactor.redact(text)
    return ReportExcerpt(text=text[:TEXT_LIMIT], chars=len(text), truncated=len(text) > TEXT_LIMIT)


def _elapsed_ms(start: datetime | None, end: datetime | None) -> float | None:
    if start is None or end is None:
        return None
    return (end - start).total_seconds() * 1000
