"""The "why this answer" report: a finished run's records, explained for a person.

:func:`build_report` reads only what a run leaves behind (the :class:`~opsrun.model.Run`
with its main LLM call, prompt snapshot and applied effects, plus its
:class:`~opsrun.model.OperationRun` records) and returns a :class:`RunReport`;
:func:`render_markdown` turns that into Markdown. Both are pure: nothing is fetched or
written, so a report can be rebuilt from stored records at any time (seed 004
``55-logging``, "User-facing debug report").
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Final

from pydantic import Field

from .._redact import DEFAULT_REDACTOR, Redactor
from ..model import (
    AppliedEffect,
    ArtifactRef,
    AugmentationStorage,
    DomainRole,
    FailedDetails,
    FailedType,
    FinishReason,
    Hook,
    InclusionRecord,
    JsonObject,
    MainLlmStatus,
    Model,
    OperationRun,
    OperationStatus,
    PromptSource,
    Run,
    RunPhase,
    RunStatus,
    SkippedReason,
    Trigger,
    TrimmedEntry,
    Usage,
)

__all__ = [
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
    "build_report",
]

TEXT_LIMIT: Final = 4000
"""Characters of the user message and of the reply kept in a report."""
HASH_PREFIX: Final = 12
"""Hex digits of a message's sha256 kept in a report."""
REASONING_NOTE: Final = (
    "Model reasoning and working notes are not recorded: this report shows only what was "
    "sent to the main LLM, what the operations changed and the final reply."
)
"""The fixed privacy statement of every report."""

_AUGMENTATION_KINDS: Final = frozenset({"effect", "artifact"})
_HOOK_RANK: Final = {hook: rank for rank, hook in enumerate(Hook)}
_STORAGE_RANK: Final = {storage: rank for rank, storage in enumerate(AugmentationStorage)}


class ReportExcerpt(Model):
    """A redacted piece of text, cut to a bounded length."""

    text: str
    """The kept text (at most ``TEXT_LIMIT`` characters)."""
    chars: int
    """Length of the whole text."""
    truncated: bool = False
    """True when ``text`` is shorter than the whole text."""


class ReportStart(Model):
    """Why the run started, and under which identities."""

    run_id: str
    """The run."""
    trigger: Trigger
    """``generate`` (a new turn) or ``regenerate`` (a new assistant variant)."""
    dedupe_key: str
    """The idempotency key; empty when the request carried none."""
    deduplicable: bool
    """True when ``dedupe_key`` is set, so a repeat of the request returns this run."""
    initiator: str
    """Who started it (``user`` or ``system``)."""
    chat_id: str
    """The chat."""
    branch_id: str
    """The branch."""
    user_message_id: str
    """The turn's user message."""
    profile_id: str | None = None
    """The operation profile, if any."""
    profile_ref: str | None = None
    """The profile reference of the session key."""
    operation_profile_session_id: str | None = None
    """The profile session whose artifacts the run used."""
    started_at: datetime
    """When the run started."""
    finished_at: datetime | None = None
    """When it finished."""


class ReportInput(Model):
    """What the run answered."""

    user_message_id: str
    """The user message of the turn."""
    user_message: ReportExcerpt | None = None
    """The selected variant's text, when the caller supplied it."""
    history_size: int | None = None
    """Chat messages up to and including the turn's user message, when the caller
    supplied it (the prompt may keep fewer, see ``ReportPrompt.trimmed``)."""


class ReportMessage(Model):
    """One message of the effective prompt, as recorded."""

    position: int
    """Its place in send order, from 1."""
    role: str
    """The provider role it was sent with."""
    domain_role: DomainRole
    """Its domain role (``developer`` when it was sent as ``system``)."""
    source: str
    """Where it came from, for a person: ``history m4``, ``artifact world_state v3``…"""
    source_kind: str | None = None
    """``system``, ``history``, ``effect`` or ``artifact``; None in records without it."""
    content: str | None = None
    """The stored text; None when only its hash was kept."""
    chars: int
    """Length of the text actually sent."""
    sha256: str
    """The first ``HASH_PREFIX`` hex digits of the sha256 of the text sent."""
    truncated: bool = False
    """True when the stored text was cut."""
    storage: AugmentationStorage = AugmentationStorage.REDACTED
    """How the text was kept: ``redacted``, ``summary`` or ``hash_only``."""


class ReportPrompt(Model):
    """The effective prompt in send order, with trimming and artifact inclusions."""

    prompt_hash: str
    """sha256 of the provider messages sent."""
    messages: tuple[ReportMessage, ...] = ()
    """The recorded messages in send order."""
    omitted_messages: int = 0
    """Messages whose text was not kept (the snapshot reached its size limit)."""
    roles_mapped: bool = False
    """True when some ``developer`` message was sent as ``system``."""
    history_window: JsonObject = Field(default_factory=dict)
    """The window limits in force (``maxMessages``, ``maxChars``, ``maxTokens``)."""
    history_messages: int = 0
    """Recorded messages that came from the chat history."""
    trimmed: tuple[TrimmedEntry, ...] = ()
    """History messages the window left out, oldest first, with the limit that did it."""


class ReportOperation(Model):
    """One operation in one hook: how it ended and what it changed."""

    operation_id: str
    """The operation."""
    operation_name: str
    """Its definition's name."""
    hook: Hook
    """The hook it ran in."""
    order: float
    """Its configured order."""
    required: bool
    """Whether the run needed it to end ``done``."""
    depends_on: tuple[str, ...] = ()
    """Its configured dependencies."""
    status: OperationStatus
    """How it ended."""
    skipped_reason: SkippedReason | None = None
    """Why it skipped."""
    error_code: str | None = None
    """Its error code."""
    error_message: str | None = None
    """Its error message (redacted when recorded)."""
    duration_ms: float | None = None
    """Execution time."""
    committed: bool = False
    """True when its effects were applied."""
    commit_index: int | None = None
    """Its place in the run's commit queue."""
    changes: tuple[AppliedEffect, ...] = ()
    """The effects it committed in this hook, in commit order."""


class ReportArtifacts(Model):
    """The artifacts the run could read, considered for the prompt, and wrote."""

    at_start: tuple[ArtifactRef, ...] = ()
    """The session's persisted artifacts when the run started."""
    inclusions: tuple[InclusionRecord, ...] = ()
    """One record per artifact considered for the prompt, in profile order: where it went,
    or why it was dropped."""
    written: tuple[AppliedEffect, ...] = ()
    """The ``artifact.write`` effects, in commit order: ``basedOnVersion`` is the old
    version, ``version`` the new one, ``summary`` a short redacted diff."""

    @property
    def in_prompt(self) -> tuple[InclusionRecord, ...]:
        """The artifacts included in the prompt."""
        return tuple(r for r in self.inclusions if r.included)

    @property
    def left_out(self) -> tuple[InclusionRecord, ...]:
        """The artifacts considered for the prompt and dropped, each with its reason."""
        return tuple(r for r in self.inclusions if not r.included)


class ReportGeneration(Model):
    """The main LLM call."""

    called: bool
    """Whether the call started."""
    status: MainLlmStatus | None = None
    """How it ended."""
    finish_reason: FinishReason | None = None
    """Why it ended."""
    provider_finish_reason: str | None = None
    """The provider's own finish reason."""
    params: JsonObject = Field(default_factory=dict)
    """The generation settings, redacted."""
    usage: Usage | None = None
    """Token usage and cost, when reported."""
    duration_ms: float | None = None
    """Time from start to end of the call."""
    prompt_hash: str | None = None
    """sha256 of the provider messages sent."""
    error_code: str | None = None
    """Its error code."""
    error_message: str | None = None
    """Its error message."""
    assistant_message_id: str | None = None
    """The assistant message of the turn."""
    assistant_variant_id: str | None = None
    """The variant the run created."""
    reply: ReportExcerpt | None = None
    """The final text, redacted and bounded (partial when aborted)."""


class ReportOutcome(Model):
    """How the run ended."""

    status: RunStatus
    """``done``, ``failed``, ``aborted`` (or ``running`` for an unfinished record)."""
    phase: RunPhase
    """The last phase reached."""
    failed_type: FailedType | None = None
    """Which part failed."""
    failed_details: FailedDetails | None = None
    """Why, bounded."""
    abort_reason: str | None = None
    """``user_abort`` or ``deadline``."""
    duration_ms: float | None = None
    """Total time."""


class ReportPrivacy(Model):
    """What the records keep of prompt augmentation, and what they never keep."""

    snapshot_recorded: bool
    """False when the run kept no prompt snapshot."""
    augmentation_storage: tuple[AugmentationStorage, ...] = ()
    """Storage modes of the recorded effect and artifact messages."""
    note: str = REASONING_NOTE
    """The fixed statement that model reasoning is not recorded."""


class RunReport(Model):
    """Why a run produced its answer: inputs, effective prompt, operations, outcome."""

    run_id: str
    """The run."""
    status: RunStatus
    """Its status."""
    start: ReportStart
    """Why it started."""
    inputs: ReportInput
    """What it answered."""
    prompt: ReportPrompt | None = None
    """The effective prompt; None when no snapshot was recorded."""
    operations: tuple[ReportOperation, ...] = ()
    """Operation runs sorted by hook, order and operation id."""
    artifacts: ReportArtifacts
    """Artifacts read, included and written."""
    generation: ReportGeneration
    """The main LLM call."""
    outcome: ReportOutcome
    """How it ended."""
    privacy: ReportPrivacy
    """What the records keep and leave out."""

    def to_markdown(self) -> str:
        """Render the report as Markdown (see :func:`render_markdown`); raises nothing."""
        from ._report_md import render_markdown  # the renderer imports these models

        return render_markdown(self)


def build_report(
    run: Run,
    operation_runs: Sequence[OperationRun],
    *,
    user_message: str | None = None,
    history_size: int | None = None,
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
        messages = tuple(
            ReportMessage(
                position=i,
                role=m.role,
                domain_role=m.domain_role,
                source=_source_label(m.source),
                source_kind=m.source.kind if m.source else None,
                content=None if m.storage == AugmentationStorage.HASH_ONLY else m.content,
                chars=m.chars,
                sha256=m.sha256[:HASH_PREFIX],
                truncated=m.truncated,
                storage=m.storage,
            )
            for i, m in enumerate(snapshot.messages, start=1)
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
            return label + (f" ({source.effect})" if source.effect else "")
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


def _excerpt(text: str | None, redactor: Redactor) -> ReportExcerpt | None:
    if text is None:
        return None
    text = redactor.redact(text)
    return ReportExcerpt(text=text[:TEXT_LIMIT], chars=len(text), truncated=len(text) > TEXT_LIMIT)


def _elapsed_ms(start: datetime | None, end: datetime | None) -> float | None:
    if start is None or end is None:
        return None
    return (end - start).total_seconds() * 1000
