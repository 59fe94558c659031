"""The operation ledger: what each operation of a run did, announced once and recorded.

One :class:`OpExec` per operation and hook tracks the execution; the
:class:`OperationLedger` owns them all, announces each ``operation.finished`` exactly
once (with its error redacted, so the event and the record agree) and builds the
:class:`~opsrun.model.OperationRun` records the run store keeps.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import anyio

from .._redact import Redactor
from ..errors import bound_details, bound_text
from ..model import (
    FailedDetails,
    Hook,
    OperationConfig,
    OperationDefinition,
    OperationError,
    OperationResult,
    OperationRun,
    OperationStatus,
    SkippedReason,
    Trigger,
)
from ..model._build import Builder
from ..operations import Operation
from ._events import EventEmitter

__all__ = ["NOT_PLANNED", "OpExec", "OperationLedger", "error_of", "redact_error"]

NOT_PLANNED = (SkippedReason.DISABLED, SkippedReason.TRIGGER_MISMATCH)
"""Skip reasons of operations that are not part of the run at all."""


def error_of(code: str, message: str, details: dict[str, Any] | None = None) -> OperationError:
    """A bounded :class:`OperationError`."""
    return OperationError(
        code=code, message=bound_text(message), details=bound_details(details) if details else None
    )


def redact_error(redactor: Redactor, error: OperationError) -> OperationError:
    """``error`` with secrets masked in its message and details."""
    message = redactor.redact(error.message)
    details = redactor.redact_value(error.details) if error.details else error.details
    if message == error.message and details == error.details:
        return error
    return error.model_copy(update={"message": message, "details": details})


@dataclass(eq=False, slots=True)
class OpExec:
    """Mutable bookkeeping of one operation in one hook of one run."""

    definition: OperationDefinition
    config: OperationConfig
    hook: Hook
    implementation: Operation[Any] | None
    params: Any
    write_tag: str | None
    status: OperationStatus = OperationStatus.PLANNED
    skipped_reason: SkippedReason | None = None
    error: OperationError | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    duration_ms: float | None = None
    result: OperationResult | None = None
    committed: bool = False
    commit_index: int | None = None
    settling: bool = False
    """True while its hook executes it: from the hook's start until it ended and was
    announced (settled)."""
    finished: anyio.Event | None = None
    """Set once it settled; made by the first operation that waits for it."""
    inputs_summary: dict[str, Any] = field(default_factory=dict)
    outputs_summary: dict[str, Any] = field(default_factory=dict)
    debug: dict[str, Any] | None = None
    """Debug data kept for the record (``config.debug.enabled``)."""
    writers: tuple[OpExec, ...] | None = None
    """This operation and its transitive dependencies that staged an artifact write,
    once known (see the scheduler)."""
    operation_id: str = field(init=False)
    """The operation's id (its definition's)."""

    def __post_init__(self) -> None:
        self.operation_id = self.definition.operation_id

    @property
    def terminal(self) -> bool:
        """True once the operation reached a final status."""
        return self.status.is_terminal

    def end(
        self,
        status: OperationStatus,
        *,
        reason: SkippedReason | None = None,
        error: OperationError | None = None,
    ) -> None:
        """Set the final status (announcing it is the ledger's job)."""
        self.status = status
        self.skipped_reason = reason
        self.error = error


_RECORD = Builder(OperationRun).shape(OperationRun.model_fields)
"""Builds operation records from the runner's own values (no second validation)."""


_TIME_OR_NONE = (datetime, type(None))


def _trusted(e: OpExec) -> bool:
    """True when ``e``'s changing fields have the types a record holds."""
    return (
        isinstance(e.started_at, _TIME_OR_NONE)
        and isinstance(e.finished_at, _TIME_OR_NONE)
        and _plain(e.inputs_summary)
        and _plain(e.outputs_summary)
        and (e.debug is None or _plain(e.debug))
    )


def _plain(summary: object) -> bool:
    """True for a dict with str keys, as a record stores a summary."""
    return type(summary) is dict and (not summary or all(type(k) is str for k in summary))


class OperationLedger:
    """Every :class:`OpExec` of a run, in profile order, and their announcements."""

    def __init__(
        self, *, emitter: EventEmitter, redactor: Redactor, now: Callable[[], datetime]
    ) -> None:
        self._emitter = emitter
        self._redactor = redactor
        self._now = now
        self._execs: list[OpExec] = []

    def __iter__(self) -> Iterator[OpExec]:
        return iter(self._execs)

    def release(self) -> None:
        """Let go of every operation (the run is recorded: its records are built)."""
        self._execs = []

    def add(self, e: OpExec) -> None:
        """Track ``e``; one that already ended (disabled, other trigger) is announced."""
        self._execs.append(e)

    def committed(self, hook: Hook) -> None:
        """Let go of what the operations of ``hook`` staged and waited on: their hook is
        committed, and their records need none of it. The run goes on (the main LLM
        call, the next hook) without holding their results."""
        for e in self._execs:
            if e.hook == hook:
                e.result = None
                e.finished = None
                e.writers = None

    def of_hook(self, hook: Hook) -> list[OpExec]:
        """The operations of ``hook``, in profile order."""
        return [e for e in self._execs if e.hook == hook]

    def has_pending(self, hook: Hook) -> bool:
        """True when some operation of ``hook`` is still to execute."""
        return any(e.hook == hook and not e.terminal for e in self._execs)

    def announce(self, e: OpExec) -> None:
        """Emit ``operation.finished`` for ``e``, its error redacted once."""
        if e.finished_at is None:
            e.finished_at = self._now()
        if e.error is not None:
            e.error = redact_error(self._redactor, e.error)
        self._emitter.operation_finished(
            e.finished_at,
            e.hook,
            e.operation_id,
            e.definition.name,
            e.status,
            e.skipped_reason,
            e.error,
            e.duration_ms,
        )

    def end_all(self, status: OperationStatus, reason: SkippedReason | None = None) -> None:
        """End and announce every operation that is not terminal yet."""
        for e in self._execs:
            if not e.terminal:
                e.end(status, reason=reason)
                self.announce(e)

    def records(self, run_id: str, trigger: Trigger) -> list[OperationRun]:
        """The operation runs as they stand now, in profile order."""
        return [self._record(e, run_id, trigger) for e in self._execs]

    def _record(self, e: OpExec, run_id: str, trigger: Trigger) -> OperationRun:
        """``e``'s :class:`OperationRun`, built without validation when it can be.

        Every value comes from a validated model or from the runner, except the host
        clock's readings and the summaries of a host ``summarize``: a record with any of
        those of another type is validated.
        """
        config = e.config
        values: dict[str, Any] = {
            "run_id": run_id,
            "operation_id": e.definition.operation_id,
            "operation_name": e.definition.name,
            "hook": e.hook,
            "trigger": trigger,
            "required": config.required,
            "order": config.order,
            "depends_on": config.depends_on,
            "status": e.status,
            "skipped_reason": e.skipped_reason,
            "error": e.error,
            "started_at": e.started_at,
            "finished_at": e.finished_at,
            "duration_ms": e.duration_ms,
            "inputs_summary": e.inputs_summary.copy(),
            "outputs_summary": e.outputs_summary.copy(),
            "committed": e.committed,
            "commit_index": e.commit_index,
            "debug": e.debug,
        }
        if _trusted(e):
            record: OperationRun = _RECORD.build_all(values)  # every field, in order
            return record
        return OperationRun(**values)

    def required_not_done(self, hook: Hook) -> FailedDetails | None:
        """The first required operation of ``hook`` that should have run but is not done.

        Disabled and trigger-mismatched operations were never meant to run in this run
        (the barrier waits only for the operations that should start), so they do not
        count even when required.
        """
        for e in sorted(self._execs, key=lambda x: (x.config.order, x.operation_id)):
            if e.skipped_reason in NOT_PLANNED:
                continue
            if e.hook == hook and e.config.required and e.status != OperationStatus.DONE:
                error = e.error
                return FailedDetails(
                    operation_id=e.operation_id,
                    error_code=error.code if error else (e.skipped_reason or e.status).value,
                    error_message=error.message if error else f"operation ended {e.status.value}",
                )
        return None
