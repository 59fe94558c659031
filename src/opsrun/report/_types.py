"""The "why this answer" report as data: a :class:`RunReport` and its parts (JSON-ready)."""

from __future__ import annotations

from datetime import datetime
from typing import Final

from pydantic import Field

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
    OperationStatus,
    RunPhase,
    RunStatus,
    SkippedReason,
    Trigger,
    TrimmedRange,
    Usage,
)

__all__ = [
    "REASONING_NOTE",
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
]

REASONING_NOTE: Final = (
    "Model reasoning and working notes are not recorded: this report shows only what was "
    "sent to the main LLM, what the operations changed and the final reply."
)
"""The fixed privacy statement of every report."""


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
    """The stored text, or for a history message kept by reference the chat's text when
    it still has the hash sent; None when only the hash is known."""
    chars: int
    """Length of the text actually sent."""
    sha256: str
    """The first ``HASH_PREFIX`` hex digits of the sha256 of the text sent."""
    truncated: bool = False
    """True when the stored text was cut."""
    storage: AugmentationStorage = AugmentationStorage.REDACTED
    """How the text was kept: ``redacted``, ``summary``, ``hash_only`` or ``reference``."""


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
    trimmed: tuple[TrimmedRange, ...] = ()
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
    """Why the run was aborted: ``user_abort``, ``deadline``, ``cancelled`` or
    ``lease_expired``."""
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
