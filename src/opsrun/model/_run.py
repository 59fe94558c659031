"""Runs, operation runs and what a run returns."""

from __future__ import annotations

from datetime import datetime
from typing import Literal, TypeAlias

from pydantic import Field, field_validator, model_validator

from ._base import JsonObject, Model, check_id, well_formed
from ._effects import OperationError
from ._enums import (
    FailedType,
    FinishReason,
    Hook,
    MainLlmStatus,
    OperationStatus,
    RunPhase,
    RunStatus,
    SkippedReason,
    Trigger,
)
from ._operation import OperationProfileSessionKey
from ._prompt import PromptSnapshot

TriggerName: TypeAlias = Literal["generate", "regenerate"]
"""The values of :class:`Trigger` as plain strings (what a host usually has at hand)."""

_REQUEST_IDS = (
    "chat_id",
    "branch_id",
    "profile_id",
    "user_message_id",
    "assistant_variant_id",
    "client_request_id",
)
"""The fields of a :class:`RunRequest` that stores keep as ids (and as turn keys)."""


class RunRequest(Model):
    """What the host asks for: one generation or regeneration of a turn.

    ``generate`` needs ``user_message`` (the new user input) and starts a turn;
    ``regenerate`` needs ``user_message_id`` of an existing turn and adds an
    assistant variant to it. Idempotency keys: ``(chatId, userMessageId)`` or
    ``(chatId, clientRequestId)`` for generate; ``(chatId, clientRequestId)`` or
    ``(chatId, assistantVariantId)`` for regenerate.

    Ids (``chat_id``, ``branch_id``, ``profile_id``, ``user_message_id``,
    ``assistant_variant_id``, ``client_request_id``) must not contain NUL (``\\x00``),
    which some stores cannot keep in a key: such a request fails validation with error
    type ``nul_character`` (``surrogate_character`` for a lone UTF-16 surrogate). Free
    text (``user_message``, ``system_prompt``) may hold NUL; a lone surrogate in it, or
    in ``host`` and ``main_llm_params``, is replaced by U+FFFD (it cannot be encoded).
    """

    trigger: Trigger | TriggerName
    """``generate`` or ``regenerate`` (a :class:`Trigger` or its string; stored as a
    :class:`Trigger`)."""
    chat_id: str = Field(min_length=1)
    """The chat."""
    branch_id: str = Field(default="main", min_length=1)
    """The branch of the chat."""
    profile_id: str | None = None
    """The operation profile to load; None runs the main LLM without operations."""
    user_message: str | None = None
    """The new user input (generate only)."""
    user_message_id: str | None = None
    """generate: the id to give the new user message (optional); regenerate: the turn."""
    assistant_variant_id: str | None = None
    """regenerate: the id to give the new assistant variant (optional, an idempotency key)."""
    client_request_id: str | None = None
    """An idempotency key chosen by the client."""
    system_prompt: str = ""
    """The base system prompt before operations and inclusions."""
    deadline_ms: int | None = Field(default=None, ge=1)
    """Wall-clock limit for the whole run; exceeding it aborts the run with reason deadline."""
    initiator: str = "user"
    """Who started it (``user`` or ``system``)."""
    main_llm_params: JsonObject = Field(default_factory=dict)
    """Generation settings the host chose (provider, model, temperature…): passed to the
    main LLM as ``MainLlmRequest.params`` and recorded, redacted, in the run."""
    host: JsonObject = Field(default_factory=dict)
    """Host data for this turn (a character card, a persona, an entity id, any JSON):
    operations read it as ``ctx.host``, templates as ``host``, and the main LLM receives
    it as ``MainLlmRequest.meta``. It is not recorded in the run."""

    @field_validator("trigger", mode="after")
    @classmethod
    def _as_trigger(cls, value: Trigger | TriggerName) -> Trigger:
        return Trigger(value)

    _ids = field_validator(*_REQUEST_IDS, mode="before")(check_id)
    _well_formed = field_validator(
        "user_message", "system_prompt", "main_llm_params", "host", mode="after"
    )(well_formed)

    @model_validator(mode="after")
    def _turn_inputs(self) -> RunRequest:
        if self.trigger == Trigger.GENERATE and self.user_message is None:
            raise ValueError("generate needs user_message")
        if self.trigger == Trigger.REGENERATE and self.user_message_id is None:
            raise ValueError("regenerate needs user_message_id")
        return self

    @property
    def dedupe_key(self) -> str:
        """The idempotency key of this request (see the class docstring)."""
        if self.client_request_id is not None:
            return f"{self.chat_id}:req:{self.client_request_id}"
        if self.trigger == Trigger.GENERATE and self.user_message_id is not None:
            return generate_key(self.chat_id, self.user_message_id)
        if self.trigger == Trigger.REGENERATE and self.assistant_variant_id is not None:
            return f"{self.chat_id}:regen:{self.assistant_variant_id}"
        return ""


def generate_key(chat_id: str, user_message_id: str) -> str:
    """The idempotency key of a generate that stores user message ``user_message_id``."""
    return f"{chat_id}:gen:{user_message_id}"


class FailedDetails(Model):
    """Why a run failed, bounded for a UI."""

    operation_id: str | None = None
    """The required operation that was not ``done``, if that is the reason."""
    error_code: str | None = None
    """Its error code (or the main LLM's)."""
    error_message: str | None = None
    """Its message, bounded."""


class Usage(Model):
    """Token usage and cost of an LLM call, when the provider reports them."""

    input_tokens: int | None = None
    """Prompt tokens."""
    output_tokens: int | None = None
    """Completion tokens."""
    total_tokens: int | None = None
    """Sum, as reported."""
    cost_usd: float | None = None
    """Cost in US dollars."""


class OperationRun(Model):
    """The record of one execution (or planned execution) of one operation in one hook."""

    run_id: str
    """The run."""
    operation_id: str
    """The operation."""
    operation_name: str
    """``OperationDefinition.name``."""
    hook: Hook
    """The hook it ran in."""
    trigger: Trigger
    """The run's trigger."""
    required: bool
    """Echo of ``config.required``."""
    order: float
    """Echo of ``config.order``."""
    depends_on: tuple[str, ...] = ()
    """Echo of ``config.dependsOn``."""
    status: OperationStatus = OperationStatus.PLANNED
    """Current status; terminal once the hook ended."""
    skipped_reason: SkippedReason | None = None
    """Why it skipped."""
    error: OperationError | None = None
    """Why it failed."""
    started_at: datetime | None = None
    """When it started executing (None when it never started)."""
    finished_at: datetime | None = None
    """When it reached a terminal status."""
    duration_ms: float | None = None
    """Execution time."""
    inputs_summary: JsonObject = Field(default_factory=dict)
    """Bounded, redacted summary of its inputs."""
    outputs_summary: JsonObject = Field(default_factory=dict)
    """Bounded, redacted summary of its outputs."""
    committed: bool = False
    """True when its effects were applied at commit."""
    commit_index: int | None = None
    """Its position in the run's commit queue (0-based), when committed."""
    debug: JsonObject | None = None
    """The operation's own debug data (``OperationResult.debug``), bounded and redacted;
    kept only when its configuration enables debug (``config.debug.enabled``)."""

    @property
    def error_code(self) -> str | None:
        """The error code, if any."""
        return self.error.code if self.error else None


class MainLlmCall(Model):
    """What the main LLM call did in a run."""

    started: bool = False
    """Whether the call started (exactly zero or one call per run)."""
    status: MainLlmStatus | None = None
    """How it ended."""
    finish_reason: FinishReason | None = None
    """Why it ended."""
    provider_finish_reason: str | None = None
    """The provider's own finish reason, when given (``stop``, ``length``…)."""
    error: OperationError | None = None
    """Its error, if any."""
    text: str | None = None
    """The final text (possibly partial when aborted)."""
    usage: Usage | None = None
    """Token usage."""
    attempts: int = Field(default=0, ge=0)
    """Calls made to the main LLM: 1, plus one per retry (0 when the call did not start,
    and in records stored before attempts were counted)."""
    assistant_message_id: str | None = None
    """The assistant message of the turn."""
    assistant_variant_id: str | None = None
    """The variant this run created."""
    prompt_hash: str | None = None
    """sha256 of the canonical serialisation of the messages sent."""
    prompt: PromptSnapshot | None = None
    """The redacted, bounded snapshot of what was sent, with trimming and inclusions."""
    params: JsonObject = Field(default_factory=dict)
    """The generation settings of the request, redacted."""
    started_at: datetime | None = None
    """When it started."""
    finished_at: datetime | None = None
    """When it ended."""


class AppliedEffect(Model):
    """One committed effect, in commit order."""

    index: int
    """Position in the run's commit sequence."""
    operation_id: str
    """The operation that produced it."""
    hook: Hook
    """The hook it committed in."""
    type: str
    """``prompt.*``, ``turn.*`` or ``artifact.write``."""
    tag: str | None = None
    """For artifact writes: the tag."""
    version: int | None = None
    """For persisted artifact writes: the new version."""
    based_on_version: int | None = None
    """For persisted artifact writes: the version it replaced."""
    summary: str | None = None
    """A short, redacted account of the change (for artifact writes: a bounded diff)."""
    pruned_versions: tuple[int, ...] = ()
    """For persisted artifact writes: history versions the retention policy dropped."""


class ArtifactRef(Model):
    """An artifact version, by reference."""

    tag: str
    """The artifact."""
    version: int
    """Its version."""


class Run(Model):
    """A run's record: identity, status and outcome."""

    run_id: str
    """Unique id."""
    trigger: Trigger
    """Why it started."""
    chat_id: str
    """The chat."""
    branch_id: str
    """The branch."""
    user_message_id: str
    """The turn (its user message)."""
    profile_id: str | None = None
    """The profile used, if any."""
    profile_ref: str | None = None
    """The profile reference of the session key."""
    operation_profile_session_id: str | None = None
    """The profile session used."""
    dedupe_key: str = ""
    """The idempotency key."""
    initiator: str = "user"
    """Who started it."""
    status: RunStatus = RunStatus.RUNNING
    """Current status."""
    phase: RunPhase = RunPhase.PLANNING
    """Current phase."""
    failed_type: FailedType | None = None
    """Which part failed, when ``failed``."""
    failed_details: FailedDetails | None = None
    """Why, bounded."""
    abort_reason: str | None = None
    """Why it was aborted: ``user_abort``, ``deadline``, ``cancelled`` (by its caller) or
    ``lease_expired`` (its owner stopped renewing it)."""
    lease_expires_at: datetime | None = None
    """While it runs: until when its owner holds it. The owner renews the lease as the run
    goes on; a retry of the same turn after the lease expired takes the turn over."""
    started_at: datetime
    """When it started."""
    finished_at: datetime | None = None
    """When it finished."""
    duration_ms: float | None = None
    """Total time."""
    main_llm: MainLlmCall = Field(default_factory=MainLlmCall)
    """The main LLM call."""
    applied_effects: tuple[AppliedEffect, ...] = ()
    """Committed effects in commit order."""
    artifacts_at_start: tuple[ArtifactRef, ...] = ()
    """The persisted artifacts of the session when the run started, sorted by tag."""

    @property
    def session_key(self) -> OperationProfileSessionKey | None:
        """The profile session the run used; None for a run without a profile."""
        if self.profile_ref is None or self.operation_profile_session_id is None:
            return None
        return OperationProfileSessionKey(
            chat_id=self.chat_id,
            branch_id=self.branch_id,
            profile_ref=self.profile_ref,
            operation_profile_session_id=self.operation_profile_session_id,
        )


class RunResult(Model):
    """What ``Runner.run`` returns: the finished run and every operation run."""

    run: Run
    """The run record."""
    operation_runs: tuple[OperationRun, ...] = ()
    """One record per operation per hook, also for those not executed."""
    deduplicated: bool = False
    """True when an earlier run with the same turn key was returned instead of a new one."""

    @property
    def status(self) -> RunStatus:
        """The run's status."""
        return self.run.status

    @property
    def failed_type(self) -> FailedType | None:
        """The run's failed type."""
        return self.run.failed_type

    def operation(self, operation_id: str, hook: Hook | None = None) -> OperationRun:
        """Return the operation run for ``operation_id`` (in ``hook``, if given).

        Raises:
            KeyError: if there is none.
        """
        for op_run in self.operation_runs:
            if op_run.operation_id == operation_id and (hook is None or op_run.hook == hook):
                return op_run
        raise KeyError(operation_id)
