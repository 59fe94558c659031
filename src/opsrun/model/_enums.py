"""The closed vocabularies of the run engine."""

from __future__ import annotations

from enum import StrEnum


class Hook(StrEnum):
    """Where in a run an operation executes, relative to the main LLM call."""

    BEFORE_MAIN_LLM = "before_main_llm"
    AFTER_MAIN_LLM = "after_main_llm"


class Trigger(StrEnum):
    """Why a run started: a new turn, or a new assistant variant of the current turn."""

    GENERATE = "generate"
    REGENERATE = "regenerate"


class OperationStatus(StrEnum):
    """State of one OperationRun. The last four are terminal."""

    PLANNED = "planned"
    RUNNING = "running"
    DONE = "done"
    SKIPPED = "skipped"
    ERROR = "error"
    ABORTED = "aborted"

    @property
    def is_terminal(self) -> bool:
        """True for ``done``, ``skipped``, ``error`` and ``aborted``."""
        return self not in (OperationStatus.PLANNED, OperationStatus.RUNNING)


class SkippedReason(StrEnum):
    """Why an operation ended ``skipped`` without running (or without effect).

    The runner sets ``disabled``, ``trigger_mismatch``, ``dependency_failed`` and
    ``main_llm_not_run``; an operation sets ``condition_false`` (the default of
    ``OperationResult.skipped()``) or ``policy`` itself.
    """

    DISABLED = "disabled"
    """Its configuration has ``enabled: false``."""
    TRIGGER_MISMATCH = "trigger_mismatch"
    """It does not run on this run's trigger."""
    CONDITION_FALSE = "condition_false"
    """It decided there was nothing to do."""
    DEPENDENCY_FAILED = "dependency_failed"
    """An optional operation whose dependency did not end ``done``."""
    MAIN_LLM_NOT_RUN = "main_llm_not_run"
    """An after-hook operation of a run whose main LLM did not answer."""
    POLICY = "policy"
    """It declined to run under a policy of the host or of its content (an operation
    returns ``OperationResult.skipped(SkippedReason.POLICY)``)."""


class RunStatus(StrEnum):
    """State of a run. ``running`` is the only non-terminal value."""

    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    ABORTED = "aborted"


class FailedType(StrEnum):
    """Which part of a ``failed`` run failed."""

    BEFORE_BARRIER = "before_barrier"
    MAIN_LLM = "main_llm"
    AFTER_MAIN_LLM = "after_main_llm"


class RunPhase(StrEnum):
    """The phases a run passes through, in this order."""

    PLANNING = "planning"
    BEFORE_MAIN_LLM = "before_main_llm"
    BARRIER = "barrier"
    MAIN_LLM = "main_llm"
    AFTER_MAIN_LLM = "after_main_llm"
    COMMIT = "commit"
    FINISHED = "finished"


class MainLlmStatus(StrEnum):
    """How the main LLM call ended."""

    DONE = "done"
    ERROR = "error"
    ABORTED = "aborted"


class FinishReason(StrEnum):
    """Why the main LLM call ended."""

    COMPLETED = "completed"
    USER_ABORT = "user_abort"
    DEADLINE = "deadline"
    PROVIDER_ERROR = "provider_error"
    RATE_LIMITED = "rate_limited"
    TIMEOUT = "timeout"
    POLICY_ERROR = "policy_error"
    UNKNOWN = "unknown"


class DomainRole(StrEnum):
    """A message role in the effective prompt. ``developer`` maps to a provider role."""

    SYSTEM = "system"
    DEVELOPER = "developer"
    USER = "user"
    ASSISTANT = "assistant"


class ChatRole(StrEnum):
    """A role of a stored chat message."""

    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"


class ArtifactUsage(StrEnum):
    """Who sees an artifact: the main LLM, the UI, both, or neither."""

    PROMPT_ONLY = "prompt_only"
    UI_ONLY = "ui_only"
    PROMPT_AND_UI = "prompt+ui"
    INTERNAL = "internal"

    @property
    def in_prompt(self) -> bool:
        """True when the artifact may enter the effective prompt."""
        return self in (ArtifactUsage.PROMPT_ONLY, ArtifactUsage.PROMPT_AND_UI)


class ContentFormat(StrEnum):
    """How an artifact value is serialised when it is shown or included."""

    TEXT = "text"
    JSON = "json"
    MARKDOWN = "markdown"
