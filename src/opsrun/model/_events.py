"""Run events: progress a UI can show, each numbered by a per-run ``seq``."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal, TypeAlias

from pydantic import Field, TypeAdapter

from ._base import Model
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
from ._run import FailedDetails


class _EventBase(Model):
    seq: int = Field(ge=1)
    """1, 2, … per run, without gaps."""
    ts: datetime
    """When the event was emitted."""
    run_id: str
    """The run."""
    chat_id: str
    """The chat."""
    user_message_id: str
    """The turn."""
    trigger: Trigger
    """The run's trigger."""


class RunStarted(_EventBase):
    """The run was accepted."""

    type: Literal["run.started"] = "run.started"


class RunPhaseChanged(_EventBase):
    """The run entered ``phase``."""

    type: Literal["run.phase_changed"] = "run.phase_changed"
    phase: RunPhase
    """The new phase."""


class OperationStarted(_EventBase):
    """An operation began executing."""

    type: Literal["operation.started"] = "operation.started"
    hook: Hook
    """Its hook."""
    operation_id: str
    """Its id."""
    operation_name: str
    """``OperationDefinition.name``."""


class OperationFinished(_EventBase):
    """An operation reached a terminal status."""

    type: Literal["operation.finished"] = "operation.finished"
    hook: Hook
    """Its hook."""
    operation_id: str
    """Its id."""
    operation_name: str
    """``OperationDefinition.name``."""
    status: OperationStatus
    """Terminal status."""
    skipped_reason: SkippedReason | None = None
    """Why it skipped."""
    error: OperationError | None = None
    """Bounded error."""
    duration_ms: float | None = None
    """Execution time, when it executed."""


class MainLlmStarted(_EventBase):
    """The main LLM call started."""

    type: Literal["main_llm.started"] = "main_llm.started"


class MainLlmDelta(_EventBase):
    """A chunk of streamed main LLM text."""

    type: Literal["main_llm.delta"] = "main_llm.delta"
    text: str
    """The chunk."""


class MainLlmFinished(_EventBase):
    """The main LLM call ended."""

    type: Literal["main_llm.finished"] = "main_llm.finished"
    status: MainLlmStatus
    """done, error or aborted."""
    finish_reason: FinishReason
    """Why."""
    error: OperationError | None = None
    """Bounded error, when ``error``."""


class RunFinished(_EventBase):
    """The run reached a terminal status."""

    type: Literal["run.finished"] = "run.finished"
    status: RunStatus
    """done, failed or aborted."""
    failed_type: FailedType | None = None
    """Which part failed."""
    failed_details: FailedDetails | None = None
    """Why."""


RunEvent: TypeAlias = Annotated[
    RunStarted
    | RunPhaseChanged
    | OperationStarted
    | OperationFinished
    | MainLlmStarted
    | MainLlmDelta
    | MainLlmFinished
    | RunFinished,
    Field(discriminator="type"),
]
"""Any run event; discriminated on ``type``."""

RunEventAdapter: TypeAdapter[RunEvent] = TypeAdapter(RunEvent)
"""Validates and serialises :data:`RunEvent` values (``RunEventAdapter.validate_json(...)``)."""
