"""What an operation returns: status, effects in three layers, and a stable error.

Effects apply only when the operation ends ``done``, at commit, in deterministic order.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeAlias

from pydantic import Field, TypeAdapter, field_validator, model_validator

from ._artifact import ArtifactWrite
from ._base import JsonObject, Model, well_formed
from ._build import Builder
from ._enums import DomainRole, OperationStatus, SkippedReason

# --- prompt-time effects (before_main_llm only) ----------------------------------------------


class AppendAfterLastUser(Model):
    """Insert a prompt-only message right after the current user message."""

    type: Literal["prompt.append_after_last_user"] = "prompt.append_after_last_user"
    role: DomainRole = DomainRole.DEVELOPER
    """Domain role of the message."""
    content: str
    """Message text."""
    source: str | None = None
    """Where its text came from, e.g. ``art.augmentation_notes``; the prompt snapshot
    keeps it as the message source's ``note``."""

    _well_formed = field_validator("content", mode="after")(well_formed)


class SystemUpdate(Model):
    """Prepend to, append to, or replace the system prompt.

    Raises:
        pydantic.ValidationError: ``mode`` is not ``prepend``, ``append`` or ``replace``.
    """

    type: Literal["prompt.system_update"] = "prompt.system_update"
    mode: Literal["prepend", "append", "replace"]
    """``prepend``: payload + system; ``append``: system + payload; ``replace``: payload."""
    content: str
    """The payload."""
    source: str | None = None
    """Where its text came from; the prompt snapshot keeps it as the message source's
    ``note``."""

    _well_formed = field_validator("content", mode="after")(well_formed)


class InsertAtDepth(Model):
    """Insert a prompt-only message at a depth counted in history messages from the end.

    Raises:
        pydantic.ValidationError: ``depth_from_end`` is above 0, or a field is invalid.
    """

    type: Literal["prompt.insert_at_depth"] = "prompt.insert_at_depth"
    depth_from_end: int = Field(le=0)
    """0 = tail; -N = before the N-th history message from the end (beyond the history: top)."""
    role: DomainRole = DomainRole.DEVELOPER
    """Domain role of the message."""
    content: str
    """Message text."""
    source: str | None = None
    """Where its text came from; the prompt snapshot keeps it as the message source's
    ``note``."""

    _well_formed = field_validator("content", mode="after")(well_formed)


PromptEffect: TypeAlias = Annotated[
    AppendAfterLastUser | SystemUpdate | InsertAtDepth, Field(discriminator="type")
]
PromptEffectAdapter: TypeAdapter[PromptEffect] = TypeAdapter(PromptEffect)

# --- turn canonicalization effects -------------------------------------------------------------


class UserVariant(Model):
    """Add a variant of the current user message (and select it)."""

    type: Literal["turn.user_variant"] = "turn.user_variant"
    content: str
    """The new prompt text of the user message."""
    select: bool = True
    """Make it the selected variant."""

    _well_formed = field_validator("content", mode="after")(well_formed)


class AssistantVariant(Model):
    """Add a variant of the current assistant message (after_main_llm only)."""

    type: Literal["turn.assistant_variant"] = "turn.assistant_variant"
    content: str
    """The new prompt text of the assistant message."""
    select: bool = True
    """Make it the selected variant."""

    _well_formed = field_validator("content", mode="after")(well_formed)


class AssistantBlocks(Model):
    """Set the UI blocks of the selected assistant variant (after_main_llm only)."""

    type: Literal["turn.assistant_blocks"] = "turn.assistant_blocks"
    blocks: tuple[JsonObject, ...]
    """Structured UI blocks."""

    _well_formed = field_validator("blocks", mode="after")(well_formed)


class AssistantMeta(Model):
    """Merge keys into the meta of the selected assistant variant (after_main_llm only)."""

    type: Literal["turn.assistant_meta"] = "turn.assistant_meta"
    meta: JsonObject
    """Keys to set."""

    _well_formed = field_validator("meta", mode="after")(well_formed)


TurnEffect: TypeAlias = Annotated[
    UserVariant | AssistantVariant | AssistantBlocks | AssistantMeta,
    Field(discriminator="type"),
]
TurnEffectAdapter: TypeAdapter[TurnEffect] = TypeAdapter(TurnEffect)

ASSISTANT_SIDE_EFFECTS = ("turn.assistant_variant", "turn.assistant_blocks", "turn.assistant_meta")


class OperationEffects(Model):
    """Everything an operation asks to change, by layer."""

    prompt: tuple[PromptEffect, ...] = ()
    """Prompt-time effects (before_main_llm only)."""
    turn: tuple[TurnEffect, ...] = ()
    """Current-turn canonicalization effects."""
    artifact: ArtifactWrite | None = None
    """At most one artifact write."""

    @property
    def is_empty(self) -> bool:
        """True when there is nothing to commit."""
        return not self.prompt and not self.turn and self.artifact is None


class OperationError(Model):
    """A stable, bounded error of an operation run."""

    code: str
    """Stable code: ``timeout``, ``policy_error``, ``artifact_conflict``…"""
    message: str
    """Safe, human-readable message."""
    details: JsonObject | None = None
    """Bounded, redacted context."""


class OperationResult(Model):
    """What an operation returns to the runner."""

    status: Literal[
        OperationStatus.DONE,
        OperationStatus.SKIPPED,
        OperationStatus.ERROR,
        OperationStatus.ABORTED,
    ] = OperationStatus.DONE
    """Terminal status; only ``done`` commits effects."""
    effects: OperationEffects = Field(default_factory=OperationEffects)
    """What to commit if ``done``."""
    skipped_reason: SkippedReason | None = None
    """Why it skipped, when ``skipped``; the runner records ``condition_false`` when None."""
    error: OperationError | None = None
    """The error, when ``error``."""
    outputs_summary: JsonObject = Field(default_factory=dict)
    """Bounded summary of what it produced (merged into the OperationRun)."""
    inputs_summary: JsonObject = Field(default_factory=dict)
    """Bounded summary of what it used."""
    debug: JsonObject | None = None
    """Debug data; the run keeps it (bounded, redacted) only when the operation's
    configuration enables debug."""

    @model_validator(mode="after")
    def _consistent(self) -> OperationResult:
        if self.status == OperationStatus.ERROR and self.error is None:
            raise ValueError("status 'error' needs an error")
        return self

    @classmethod
    def done(
        cls,
        *,
        prompt: tuple[PromptEffect, ...] | list[PromptEffect] = (),
        turn: tuple[TurnEffect, ...] | list[TurnEffect] = (),
        artifact: ArtifactWrite | None = None,
        outputs_summary: JsonObject | None = None,
        inputs_summary: JsonObject | None = None,
        debug: JsonObject | None = None,
    ) -> OperationResult:
        """Build a ``done`` result with the given effects, summaries and debug data.

        Raises:
            pydantic.ValidationError: an effect, a summary or the debug data does not
                fit (a summary must be a JSON object).
        """
        if (
            cls is OperationResult
            and not prompt
            and not turn
            and artifact is None
            and inputs_summary is None
            and debug is None
        ):
            # Nothing to validate: the common result of an operation, built directly.
            summary = outputs_summary if type(outputs_summary) is dict else None
            if outputs_summary is None or (summary is not None and _str_keys(summary)):
                return _DONE(effects=_NO_EFFECTS, outputs_summary=dict(summary or ()))
        return cls(
            status=OperationStatus.DONE,
            effects=OperationEffects(prompt=tuple(prompt), turn=tuple(turn), artifact=artifact),
            outputs_summary=outputs_summary or {},
            inputs_summary=inputs_summary or {},
            debug=debug,
        )

    @classmethod
    def skipped(
        cls,
        reason: SkippedReason = SkippedReason.CONDITION_FALSE,
        *,
        debug: JsonObject | None = None,
    ) -> OperationResult:
        """Build a ``skipped`` result (no effects), with debug data if given."""
        return cls(status=OperationStatus.SKIPPED, skipped_reason=reason, debug=debug)

    @classmethod
    def failed(
        cls,
        code: str,
        message: str,
        details: dict[str, Any] | None = None,
        *,
        debug: JsonObject | None = None,
    ) -> OperationResult:
        """Build an ``error`` result with a stable code (no effects), with debug data if
        given.

        Raises:
            pydantic.ValidationError: ``details`` or ``debug`` is not a JSON object.
        """
        return cls(
            status=OperationStatus.ERROR,
            error=OperationError(code=code, message=message, details=details),
            debug=debug,
        )


_NO_EFFECTS = OperationEffects()
"""The effects of a result that changes nothing (frozen: one instance serves all)."""

_DONE = Builder(OperationResult).bind({"status": OperationStatus.DONE})
"""Builds ``done`` results whose values need no validation."""


def _str_keys(summary: dict[Any, Any]) -> bool:
    """True when every key of ``summary`` is a ``str`` (what a JSON object holds)."""
    return all(type(key) is str for key in summary)
