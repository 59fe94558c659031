"""Operation definitions, their configuration in a profile, and profile sessions."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field, field_validator

from ._base import JsonObject, Model, check_id, well_formed
from ._enums import Hook, Trigger


class OperationCapabilities(Model):
    """What an operation may do, declared up front so profiles can be checked statically."""

    writes_artifact: bool = False
    """True when the operation writes an ``art.<tag>``."""
    write_tag: str | None = None
    """The tag it writes, when fixed by the definition rather than by params."""
    prompt_effects: bool = False
    """True when it returns prompt-time effects: a profile that puts it in
    ``after_main_llm`` is refused when validated."""


class OperationDefinition(Model):
    """What an operation is: identity and dispatch. Lives in a catalog.

    Raises:
        pydantic.ValidationError: a field is invalid (an empty ``operation_id``…).
    """

    operation_id: str = Field(min_length=1)
    """Stable id, e.g. ``builtin:world_state_update``."""
    name: str = Field(min_length=1)
    """Human-readable name; every event's ``operationName`` equals it."""
    kind: str = Field(min_length=1)
    """``llm``, ``template`` or any custom kind; selects the params model."""
    description: str | None = None
    """What it is for."""
    capabilities: OperationCapabilities = Field(default_factory=OperationCapabilities)
    """What it may do."""


class DebugConfig(Model):
    """Per-operation debug switches."""

    enabled: bool = False
    """Keep the operation's ``OperationResult.debug`` data in its ``OperationRun``
    (bounded and redacted like every summary)."""


class OperationConfig(Model):
    """How an operation is configured in one profile.

    Raises:
        pydantic.ValidationError: a field is invalid: no ``hooks`` or a repeated one,
            an ``order`` that is not a finite number, ``params`` nested too deep
            (``json_too_deep``) or holding NaN (``json_not_finite``).
    """

    enabled: bool = True
    """Disabled operations are recorded as ``skipped(disabled)``."""
    required: bool = False
    """A required before-operation that is not ``done`` blocks the main LLM; a required
    after-operation that is not ``done`` fails the run."""
    hooks: tuple[Hook, ...] = Field(min_length=1, json_schema_extra={"uniqueItems": True})
    """Where it runs; an operation listed in two hooks runs once per hook."""
    triggers: tuple[Trigger, ...] | None = None
    """Which triggers it runs on; None means both."""
    order: float = Field(allow_inf_nan=False)
    """Lower runs and commits earlier among ready operations of the same hook (a finite
    number)."""
    depends_on: tuple[str, ...] = ()
    """Operation ids that must end ``done`` before this one starts."""
    params: JsonObject = Field(default_factory=dict)
    """Kind-specific parameters; never secrets (use ``credentialRef``)."""
    timeout_ms: int | None = Field(default=None, ge=1)
    """Wall-clock limit for one execution; exceeding it ends the operation ``error(timeout)``."""
    debug: DebugConfig = Field(default_factory=DebugConfig)
    """Debug switches."""

    _well_formed = field_validator("params", mode="after")(well_formed)

    @field_validator("hooks")
    @classmethod
    def _unique_hooks(cls, hooks: tuple[Hook, ...]) -> tuple[Hook, ...]:
        if len(set(hooks)) != len(hooks):
            raise ValueError("hooks must not repeat")
        return hooks

    def runs_on(self, trigger: Trigger) -> bool:
        """True when the operation applies to ``trigger``."""
        return self.triggers is None or trigger in self.triggers


class ProfileOperation(Model):
    """One entry of a profile: an operation id and its configuration.

    Raises:
        pydantic.ValidationError: a field is invalid.
    """

    operation_id: str
    """Refers to an OperationDefinition in the catalog."""
    config: OperationConfig
    """How it runs in this profile."""


class OperationProfile(Model):
    """A stored set of configured operations.

    The profile only stores configuration; the runner plans and executes it.

    Raises:
        pydantic.ValidationError: a field is invalid (an id holding NUL or a lone
            surrogate: ``nul_character``, ``surrogate_character``); what the catalog
            checks (unknown operations, cycles…) is :meth:`OperationCatalog.validate`'s.
    """

    profile_id: str
    """Stable identifier, e.g. ``rp-basic``."""
    name: str
    """Human-readable name."""
    description: str | None = None
    """What it is for."""
    enabled: bool = True
    """A disabled profile makes runs plain main-LLM generations without operations."""
    operation_profile_session_id: str
    """Resettable id: a new value starts a fresh OperationProfileSession."""
    version: int | None = None
    """Schema or content version for migrations."""
    operations: tuple[ProfileOperation, ...] = ()
    """The configured operations, in profile order."""

    _ids = field_validator("profile_id", "operation_profile_session_id", mode="before")(check_id)

    def operation(self, operation_id: str) -> ProfileOperation | None:
        """Return the entry for ``operation_id``, or None."""
        for entry in self.operations:
            if entry.operation_id == operation_id:
                return entry
        return None

    @property
    def ref(self) -> str:
        """The profile reference used in session keys: ``profileId`` or ``profileId@version``."""
        return self.profile_id if self.version is None else f"{self.profile_id}@{self.version}"


class OperationProfileSessionKey(Model):
    """Selects a profile session: chat, branch, profile and the resettable session id."""

    chat_id: str
    """The chat."""
    branch_id: str
    """The branch of the chat."""
    profile_ref: str
    """The profile (see :attr:`OperationProfile.ref`)."""
    operation_profile_session_id: str
    """The profile's resettable session id."""

    def as_tuple(self) -> tuple[str, str, str, str]:
        """Return the key as a hashable tuple."""
        return (self.chat_id, self.branch_id, self.profile_ref, self.operation_profile_session_id)


class OperationProfileSession(Model):
    """Persisted state between runs: the session's artifacts live under this key."""

    key: OperationProfileSessionKey
    """The key that selects this session."""
    created_at: datetime
    """When the first run of this session started."""
    meta: dict[str, Any] = Field(default_factory=dict)
    """Host-defined metadata."""
