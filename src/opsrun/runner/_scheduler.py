"""Execution of one hook: a DAG of operations run in parallel with strict ``dependsOn``.

Every operation of the hook starts as its own task and waits only for its own
dependencies, so an operation whose dependencies finished early starts at once
(no lock-step supersteps). Executors bound the concurrency.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, TypeGuard

import anyio

from ..errors import OperationFailed, bound_details
from ..model import (
    Artifact,
    ArtifactWrite,
    ChatMessage,
    Hook,
    MainLlmCall,
    OperationConfig,
    OperationDefinition,
    OperationError,
    OperationResult,
    OperationRun,
    OperationStatus,
    PromptMessage,
    SkippedReason,
    Trigger,
)
from ..model._effects import ASSISTANT_SIDE_EFFECTS
from ._commit import next_artifact
from ._context import operation_context
from ._events import prevalidated
from ._executor import InProcessExecutor
from ._operation import Operation

if TYPE_CHECKING:
    from ._runner import _RunState

__all__: list[str] = []


_RECORD_FIELDS = (
    "run_id",
    "operation_id",
    "operation_name",
    "hook",
    "trigger",
    "required",
    "order",
    "depends_on",
    "status",
    "skipped_reason",
    "error",
    "started_at",
    "finished_at",
    "duration_ms",
    "inputs_summary",
    "outputs_summary",
    "committed",
    "commit_index",
)
"""The fields :meth:`OpExec.record` fills, in ``OperationRun`` field order."""

_RECORD_SET = set(_RECORD_FIELDS)

RECORDS_PREVALIDATED = tuple(OperationRun.model_fields) == _RECORD_FIELDS
"""Whether records can skip validation: only while they fill every field, in order."""


def _plain(summary: dict[str, Any]) -> bool:
    """True when ``summary`` is a dict with str keys, as ``OperationRun`` stores it."""
    return type(summary) is dict and (not summary or all(type(k) is str for k in summary))


@dataclass(eq=False, slots=True)
class OpExec:
    """Mutable bookkeeping of one operation in one hook of one run."""

    definition: OperationDefinition
    config: OperationConfig
    hook: Hook
    implementation: Operation | None
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
    finished: anyio.Event | None = None
    inputs_summary: dict[str, Any] = field(default_factory=dict)
    outputs_summary: dict[str, Any] = field(default_factory=dict)

    @property
    def operation_id(self) -> str:
        return self.definition.operation_id

    @property
    def terminal(self) -> bool:
        return self.status.is_terminal

    def end(
        self,
        status: OperationStatus,
        *,
        reason: SkippedReason | None = None,
        error: OperationError | None = None,
    ) -> None:
        self.status = status
        self.skipped_reason = reason
        self.error = error

    def record(self, run_id: str, trigger: Trigger) -> OperationRun:
        """The operation's :class:`OperationRun` as it stands now."""
        config = self.config
        started_at = self.started_at
        finished_at = self.finished_at
        inputs = self.inputs_summary
        outputs = self.outputs_summary
        values = {
            "run_id": run_id,
            "operation_id": self.definition.operation_id,
            "operation_name": self.definition.name,
            "hook": self.hook,
            "trigger": trigger,
            "required": config.required,
            "order": config.order,
            "depends_on": config.depends_on,
            "status": self.status,
            "skipped_reason": self.skipped_reason,
            "error": self.error,
            "started_at": started_at,
            "finished_at": finished_at,
            "duration_ms": self.duration_ms,
            "inputs_summary": inputs,
            "outputs_summary": outputs,
            "committed": self.committed,
            "commit_index": self.commit_index,
        }
        # Every value comes from a validated model or from the scheduler, except the
        # host's clock readings and summaries: those are checked, and anything unusual
        # goes through validation.
        if (
            RECORDS_PREVALIDATED
            and (started_at is None or isinstance(started_at, datetime))
            and (finished_at is None or isinstance(finished_at, datetime))
            and _plain(inputs)
            and _plain(outputs)
        ):
            # Each record gets its own summary dicts, as validation would give it.
            values["inputs_summary"] = inputs.copy()
            values["outputs_summary"] = outputs.copy()
            return prevalidated(OperationRun, values, _RECORD_SET)
        return OperationRun(**values)


def error_of(code: str, message: str, details: dict[str, Any] | None = None) -> OperationError:
    """A bounded OperationError."""
    return OperationError(
        code=code, message=message[:1024], details=bound_details(details) if details else None
    )


def loop_clock() -> Callable[[], float]:
    """The clock ``anyio.current_time()`` reads, looked up once instead of at every call.

    anyio's asyncio backend reads ``loop.time()``; anything else (trio, or trio running
    as a guest of an asyncio loop, where no asyncio task is current) keeps anyio's own
    per-call lookup.
    """
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return anyio.current_time
    if asyncio.current_task(loop) is None:
        return anyio.current_time
    return loop.time


def _plain_in_process(executor: object) -> TypeGuard[InProcessExecutor]:
    """True for an ``InProcessExecutor`` whose ``execute`` is the class's own.

    A subclass, or an instance with ``execute`` replaced (a test spy), may change what
    executing means, so those always go through ``execute``.
    """
    return type(executor) is InProcessExecutor and "execute" not in vars(executor)


@dataclass(frozen=True, slots=True)
class _HookView:
    """What every operation of one hook execution reads."""

    history: tuple[ChatMessage, ...]
    base: dict[str, Artifact]
    shared: Mapping[str, Artifact]
    """Read-only ``base``, handed to every operation without dependencies."""
    prompt: tuple[PromptMessage, ...] | None
    """The draft prompt (before_main_llm only)."""
    main_llm: MainLlmCall | None
    """The main LLM result (after_main_llm only)."""
    time: Callable[[], float]
    """The event loop's clock (see :func:`loop_clock`)."""
    inline: InProcessExecutor | None
    """The run's executor when operations can be awaited in place (see ``_execute``)."""


_TIMED_OUT = object()
"""Marks an execution whose timeout scope cut it off before it returned."""


async def run_hook(state: _RunState, hook: Hook) -> None:
    """Execute every planned operation of ``hook``; returns when all are terminal."""
    execs = [e for e in state.execs if e.hook == hook]
    by_id = {e.operation_id: e for e in execs}
    pending = [e for e in execs if e.status == OperationStatus.PLANNED]
    awaited = {dep for e in pending for dep in e.config.depends_on}
    for e in pending:
        # Only operations something waits for need a completion event.
        if e.operation_id in awaited:
            e.finished = anyio.Event()
    pending.sort(key=lambda e: (e.config.order, e.operation_id))
    # Nothing commits while a hook executes, so its history and committed artifacts are
    # read once and shared (read-only) by every operation of the hook.
    base = state.committed_artifacts()
    executor = state.executor
    view = _HookView(
        history=state.context_history(hook),
        base=base,
        shared=MappingProxyType(base),
        prompt=state.draft_prompt if hook == Hook.BEFORE_MAIN_LLM else None,
        main_llm=state.main_llm if hook == Hook.AFTER_MAIN_LLM else None,
        time=loop_clock(),
        inline=executor if _plain_in_process(executor) else None,
    )
    async with anyio.create_task_group() as tg:
        # An abort cancels this scope: every task of the hook stops at its next await and
        # is marked aborted when the run finishes. Per-operation scopes exist only for
        # operations with a timeout, which keeps the common path cheap.
        state.scopes.add(tg.cancel_scope)
        for e in pending:
            tg.start_soon(_run_one, state, e, by_id, view)
    state.scopes.discard(tg.cancel_scope)


async def _run_one(state: _RunState, e: OpExec, by_id: dict[str, OpExec], view: _HookView) -> None:
    try:
        if not e.config.depends_on or await _dependencies_done(state, e, by_id):
            if state.abort_reason is not None:
                e.end(OperationStatus.ABORTED)
            else:
                await _execute(state, e, by_id, view)
        state.announce_finished(e)
    finally:
        if e.finished is not None:
            e.finished.set()


async def _dependencies_done(state: _RunState, e: OpExec, by_id: dict[str, OpExec]) -> bool:
    """Wait for ``e``'s dependencies; when one did not end done, end ``e`` and say False."""
    for dep_id in e.config.depends_on:
        dep = by_id.get(dep_id)
        if dep is not None and dep.finished is not None:
            await dep.finished.wait()
        if dep is None or dep.status != OperationStatus.DONE:
            if state.abort_reason is not None:
                e.end(OperationStatus.ABORTED)
            elif e.config.required:
                e.end(
                    OperationStatus.ERROR,
                    error=error_of("dependency_failed", f"dependency {dep_id!r} did not end done"),
                )
            else:
                e.end(OperationStatus.SKIPPED, reason=SkippedReason.DEPENDENCY_FAILED)
            return False
    return True


async def _execute(state: _RunState, e: OpExec, by_id: dict[str, OpExec], view: _HookView) -> None:
    implementation = e.implementation
    assert implementation is not None
    config = e.config
    hook = e.hook
    e.status = OperationStatus.RUNNING
    e.started_at = state.clock.now()
    t0 = view.time()
    state.emitter.operation_started(hook, e.definition.operation_id, e.definition.name)
    timeout = config.timeout_ms / 1000 if config.timeout_ms else None
    ctx = operation_context(
        state.meta,
        hook,
        e.definition,
        config,
        e.params,
        view.history,
        _visible_artifacts(state, e, by_id, view) if config.depends_on else view.shared,
        view.prompt,
        view.main_llm,
        None if timeout is None else t0 + timeout,
        state.abort,
        e.write_tag,
    )
    result: OperationResult | None = None
    failure: OperationError | None = None
    inline = view.inline
    try:
        returned: object = _TIMED_OUT
        if timeout is None and inline is not None and inline._acquire_nowait():
            # What InProcessExecutor.execute does when a slot is free, one await shorter.
            try:
                returned = await implementation.execute(ctx)
            finally:
                inline._release()
        elif timeout is None:
            returned = await state.executor.execute(implementation, ctx)
        else:
            with anyio.CancelScope(deadline=t0 + timeout):
                returned = await state.executor.execute(implementation, ctx)
        if returned is not _TIMED_OUT:
            if not isinstance(returned, OperationResult):
                # e.g. a forgotten ``return``: not a timeout, a broken operation
                raise TypeError(f"returned {type(returned).__name__}, not an OperationResult")
            result = returned
    except OperationFailed as exc:
        failure = error_of(exc.code, exc.message, exc.details)
    except Exception as exc:  # an operation must never crash the run
        failure = error_of("operation_exception", f"{type(exc).__name__}: {exc}")
    finally:
        # Also reached when an abort cancels the hook: the run marks the operation aborted.
        e.finished_at = state.clock.now()
        e.duration_ms = (view.time() - t0) * 1000
    if failure is not None:
        e.end(OperationStatus.ERROR, error=failure)
    elif result is None or (timeout is not None and e.duration_ms >= timeout * 1000):
        e.end(
            OperationStatus.ERROR,
            error=error_of("timeout", f"operation exceeded timeoutMs={config.timeout_ms}"),
        )
    else:
        _accept(state, e, result)


def _accept(state: _RunState, e: OpExec, result: OperationResult) -> None:
    e.inputs_summary = state.summarize(result.inputs_summary)
    e.outputs_summary = state.summarize(result.outputs_summary)
    if result.status == OperationStatus.DONE:
        problem = policy_problem(e, result)
        if problem is not None:
            e.end(OperationStatus.ERROR, error=error_of("policy_error", problem))
            return
        e.result = result
        e.end(OperationStatus.DONE)
    elif result.status == OperationStatus.SKIPPED:
        e.end(
            OperationStatus.SKIPPED,
            reason=result.skipped_reason or SkippedReason.CONDITION_FALSE,
        )
    elif result.status == OperationStatus.ERROR:
        assert result.error is not None
        err = result.error
        e.end(OperationStatus.ERROR, error=error_of(err.code, err.message, err.details))
    else:
        e.end(OperationStatus.ABORTED)


def policy_problem(e: OpExec, result: OperationResult) -> str | None:
    """Return why ``result`` breaks the hook's effect policy, or None."""
    effects = result.effects
    if e.hook == Hook.AFTER_MAIN_LLM and effects.prompt:
        return "prompt-time effects are only allowed in before_main_llm"
    if e.hook == Hook.BEFORE_MAIN_LLM:
        for effect in effects.turn:
            if effect.type in ASSISTANT_SIDE_EFFECTS:
                return f"{effect.type} is only allowed in after_main_llm"
    write = effects.artifact
    if write is not None:
        if e.write_tag is None:
            return f"the operation declared no artifact tag but wrote art.{write.tag}"
        if write.tag != e.write_tag:
            return f"the operation may write only art.{e.write_tag}, not art.{write.tag}"
    return None


def _visible_artifacts(
    state: _RunState, e: OpExec, by_id: dict[str, OpExec], view: _HookView
) -> dict[str, Artifact]:
    """Committed artifacts plus the staged writes of ``e``'s transitive dependencies."""
    visible = dict(view.base)
    stack = list(e.config.depends_on)
    seen: set[str] = set()
    staged: list[OpExec] = []
    while stack:
        dep_id = stack.pop()
        if dep_id in seen:
            continue
        seen.add(dep_id)
        dep = by_id.get(dep_id)
        if dep is None:
            continue
        stack.extend(dep.config.depends_on)
        if dep.result is not None and dep.result.effects.artifact is not None:
            staged.append(dep)
    for dep in sorted(staged, key=lambda d: (d.config.order, d.operation_id)):
        assert dep.result is not None
        write: ArtifactWrite | None = dep.result.effects.artifact
        assert write is not None
        artifact, _ = next_artifact(
            visible.get(write.tag),
            write,
            now=state.started_at,
            run_id=state.meta.run_id,
            operation_id=dep.operation_id,
        )
        visible[write.tag] = artifact
    return visible


def announce(state: _RunState, e: OpExec) -> None:
    """Emit ``operation.finished`` for ``e`` (used by the run state).

    The error is redacted here, once, so the event and the stored record carry the
    same masked text.
    """
    if e.error is not None:
        e.error = state.redact_error(e.error)
    state.emitter.operation_finished(
        e.hook,
        e.operation_id,
        e.definition.name,
        e.status,
        e.skipped_reason,
        e.error,
        e.duration_ms,
    )
