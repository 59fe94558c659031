"""Execution of one hook: a DAG of operations run in parallel with strict ``dependsOn``.

Every operation of the hook starts as its own task and waits only for its own
dependencies, so an operation whose dependencies finished early starts at once
(no lock-step supersteps). Executors bound the concurrency.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from time import perf_counter
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel
from anyio.abc import TaskGroup

from .._logs import enter_operation
from ..errors import OperationFailed
from ..model import (
    Artifact,
    ChatMessage,
    Hook,
    MainLlmCall,
    OperationError,
    OperationResult,
    OperationStatus,
    PromptMessage,
    SkippedReason,
)
from ..model._effects import ASSISTANT_SIDE_EFFECTS
from ..operations import Operation, OperationContext, RunMeta
from ._artifacts import next_artifact
from ._context import Cancellation, RunContext
from ._eager import drive, start
from ._events import EventEmitter
from ._ledger import OperationLedger, OpExec, error_of

if TYPE_CHECKING:
    from opentelemetry.trace import Span

__all__ = ["HookView", "Scheduler", "policy_problem"]


@dataclass(frozen=True, slots=True)
class HookView:
    """What every operation of one hook execution reads."""

    history: tuple[ChatMessage, ...]
    """The chat history the hook's operations see."""
    base: Mapping[str, Artifact]
    """Artifacts committed before the hook (nothing commits while it executes),
    read-only: operations without dependencies read it as it is."""
    prompt: tuple[PromptMessage, ...] | None = None
    """The draft prompt (before_main_llm only)."""
    main_llm: MainLlmCall | None = None
    """The main LLM result (after_main_llm only)."""
    run: RunMeta | None = None
    """The run's identity as operations see it (default: the context's)."""
    host: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    """The turn's host data, read-only."""


class _Spawned:
    """The operations of a hook that run as tasks: how many are still running."""

    __slots__ = ("ended", "failure", "hook", "left", "scopes")

    def __init__(self, count: int, hook: anyio.CancelScope) -> None:
        self.left = count
        self.ended = anyio.Event()
        """Set once every one of them ended."""
        self.failure: BaseException | None = None
        """What one of them raised that no operation may (not an ``Exception``, not a
        cancellation): the hook raises it once they ended."""
        self.hook = hook
        """The scope of the operation the hook's own task runs."""
        self.scopes: set[anyio.CancelScope] = set()
        """The scopes of the tasks still running."""

    def fail(self, exc: BaseException) -> None:
        """Keep the first failure and stop every operation of the hook still running,
        as a failure in the hook's own task does."""
        self.failure = self.failure or exc
        self.hook.cancel()
        for scope in self.scopes:
            scope.cancel()


class Scheduler:
    """Executes the operations of one hook of a run."""

    def __init__(
        self,
        ctx: RunContext,
        ledger: OperationLedger,
        cancellation: Cancellation,
        emitter: EventEmitter,
    ) -> None:
        self._ctx = ctx
        self._ledger = ledger
        self._cancellation = cancellation
        self._emitter = emitter
        self.tasks: TaskGroup | None = None
        """The run's task group (set while the run's phases go on): operations that run
        concurrently become its tasks."""

    async def run_hook(self, hook: Hook, view: HookView) -> None:
        """Execute every planned operation of ``hook``; returns when all are terminal."""
        execs = self._ledger.of_hook(hook)
        by_id = {e.operation_id: e for e in execs}
        pending = [e for e in execs if e.status == OperationStatus.PLANNED]
        if not pending:
            return
        for e in pending:
            e.settling = True
        pending.sort(key=lambda e: (e.config.order, e.operation_id))
        tracing = self._ctx.tracing
        if tracing is None:
            await self._run_all(pending, by_id, view)
            return
        span = tracing.start_hook(hook, len(pending))
        token = tracing.activate(span)  # the operations' tasks start under the hook's span
        try:
            await self._run_all(pending, by_id, view)
        finally:
            tracing.deactivate(token)
            span.end()

    async def _run_all(
        self, pending: list[OpExec], by_id: dict[str, OpExec], view: HookView
    ) -> None:
        """Start every operation in order, each as in a task of its own (see ``_eager``).

        Operations that end without suspending need no task; the first one that
        suspends is driven by this task while the rest become tasks of the run's task
        group (``tasks``), and this one waits until they ended.
        """
        # An abort cancels this scope and those of the hook's tasks: every operation
        # stops at its next await and is marked aborted when the run finishes.
        # Per-operation scopes exist only for operations with a timeout.
        scope = anyio.CancelScope()
        self._cancellation.watch(scope)
        spawned: _Spawned | None = None
        try:
            with scope:
                for index, e in enumerate(pending):
                    started = start(self._run_one(e, by_id, view, view.base))
                    if started is not None:
                        later = pending[index + 1 :]
                        if later:
                            spawned = self._spawn(later, by_id, view, view.base, scope)
                        await drive(started)
                        break
                if spawned is not None:
                    await spawned.ended.wait()
            if spawned is not None and not spawned.ended.is_set():
                # Aborted: the hook's tasks were cancelled too; they end at their next
                # await (a thread cannot be cancelled, and is waited for).
                with anyio.CancelScope(shield=True):
                    await spawned.ended.wait()
        finally:
            self._cancellation.unwatch(scope)
        if spawned is not None and spawned.failure is not None:
            raise spawned.failure

    def _spawn(
        self,
        operations: list[OpExec],
        by_id: dict[str, OpExec],
        view: HookView,
        artifacts: Mapping[str, Artifact],
        hook: anyio.CancelScope,
    ) -> _Spawned:
        """Start ``operations`` as tasks of the run's task group."""
        assert self.tasks is not None, "the run's task group is open while hooks run"
        spawned = _Spawned(len(operations), hook)
        for e in operations:
            self.tasks.start_soon(self._run_task, e, by_id, view, artifacts, spawned)
        return spawned

    async def _run_task(
        self,
        e: OpExec,
        by_id: dict[str, OpExec],
        view: HookView,
        artifacts: Mapping[str, Artifact],
        spawned: _Spawned,
    ) -> None:
        """Run one operation in a task of its own, under a scope the run's abort cancels."""
        scope = anyio.CancelScope()
        self._cancellation.watch(scope)
        spawned.scopes.add(scope)
        try:
            with scope:
                await self._run_one(e, by_id, view, artifacts)
        except anyio.get_cancelled_exc_class():
            raise
        except BaseException as exc:  # raised by the hook, which goes no further
            spawned.fail(exc)
        finally:
            spawned.scopes.discard(scope)
            self._cancellation.unwatch(scope)
            spawned.left -= 1
            if not spawned.left:
                spawned.ended.set()

    async def _run_one(
        self,
        e: OpExec,
        by_id: dict[str, OpExec],
        view: HookView,
        artifacts: Mapping[str, Artifact],
    ) -> None:
        try:
            if not e.config.depends_on or await self._dependencies_done(e, by_id):
                if self._cancellation.aborted:
                    e.end(OperationStatus.ABORTED)
                else:
                    if e.config.depends_on:  # with its dependencies' staged writes
                        artifacts = self._visible(e, by_id, view)
                    await self._execute(e, view, artifacts)
            self._ledger.announce(e)
        finally:
            e.settling = False
            if e.finished is not None:
                e.finished.set()

    async def _dependencies_done(self, e: OpExec, by_id: dict[str, OpExec]) -> bool:
        """Wait for ``e``'s dependencies; when one did not end done, end ``e``, say False."""
        for dep_id in e.config.depends_on:
            dep = by_id.get(dep_id)
            # A dependency that already settled is not waited for (waiting would yield).
            if dep is not None and dep.settling:
                if dep.finished is None:  # the first operation to wait for it
                    dep.finished = anyio.Event()
                await dep.finished.wait()
            if dep is None or dep.status != OperationStatus.DONE:
                if self._cancellation.aborted:
                    e.end(OperationStatus.ABORTED)
                elif e.config.required:
                    e.end(
                        OperationStatus.ERROR,
                        error=error_of(
                            "dependency_failed", f"dependency {dep_id!r} did not end done"
                        ),
                    )
                else:
                    e.end(OperationStatus.SKIPPED, reason=SkippedReason.DEPENDENCY_FAILED)
                return False
        return True

    async def _execute(self, e: OpExec, view: HookView, artifacts: Mapping[str, Artifact]) -> None:
        """Execute ``e`` once the executor grants it a slot, then settle its status.

        The operation starts (``running``, ``operation.started``, its ``timeoutMs``)
        only inside the slot: waiting for one does not count against it.
        """
        implementation = e.implementation
        assert implementation is not None
        tracing = self._ctx.tracing
        span: Span | None = None
        try:
            try:
                async with self._ctx.executor.slot(implementation):
                    if tracing is not None:
                        span = tracing.start_operation(e.definition, e.hook, e.config.required)
                    result, failure = await self._run_in_slot(
                        e, implementation, view, artifacts, span
                    )
            except Exception as exc:  # the executor failed to admit or release it
                message = f"the executor failed: {type(exc).__name__}: {exc}"
                result, failure = None, error_of("executor_error", message)
            timeout_ms = e.config.timeout_ms
            late = timeout_ms is not None and (e.duration_ms or 0.0) >= timeout_ms
            if self._cancellation.aborted and e.status == OperationStatus.RUNNING:
                # Aborted while it ran (a thread cannot be cancelled, and came back with
                # its answer): left running, the run records it aborted.
                return
            if late or (failure is None and result is None):
                # Past its timeout: a thread that came back later (with an answer or an
                # error) is cut off like an async operation.
                e.end(
                    OperationStatus.ERROR,
                    error=error_of("timeout", f"operation exceeded timeoutMs={timeout_ms}"),
                )
            elif failure is not None:
                e.end(OperationStatus.ERROR, error=failure)
            else:
                assert result is not None
                self._accept(e, result)
        finally:
            # Ended once the status is settled (an abort leaves it running: aborted).
            if tracing is not None and span is not None:
                tracing.end_operation(span, e.status, e.skipped_reason, e.error, self._ctx.redactor)

    async def _run_in_slot(
        self,
        e: OpExec,
        implementation: Operation[Any],
        view: HookView,
        artifacts: Mapping[str, Artifact],
        span: Span | None,
    ) -> tuple[OperationResult | None, OperationError | None]:
        """The result of one execution, or the error it ended with.

        The operation executes with its id in the log context and, with telemetry, its
        span as the current span.
        """
        ctx = self._ctx
        config = e.config
        e.status = OperationStatus.RUNNING
        e.started_at = ctx.clock.now()
        started = perf_counter()
        self._emitter.operation_started(
            e.started_at, e.hook, e.definition.operation_id, e.definition.name
        )
        deadline = None
        if config.timeout_ms:
            deadline = anyio.current_time() + config.timeout_ms / 1000
        op_ctx: OperationContext[object] = OperationContext(
            run=view.run or ctx.meta,
            hook=e.hook,
            definition=e.definition,
            config=config,
            params=e.params,
            history=view.history,
            artifacts=artifacts,
            prompt=view.prompt,
            main_llm=view.main_llm,
            deadline=deadline,
            abort=ctx.abort,
            write_tag=e.write_tag,
            redactor=ctx.redactor,
            host=view.host,
        )
        # Each operation runs in a task of its own: what it logs names it from here on.
        enter_operation(ctx.meta.run_id, e.definition.operation_id)
        tracing = ctx.tracing
        token = tracing.activate(span) if tracing is not None and span is not None else None
        try:
            if deadline is None:
                return _checked(await ctx.executor.execute(implementation, op_ctx)), None
            with anyio.CancelScope(deadline=deadline):
                return _checked(await ctx.executor.execute(implementation, op_ctx)), None
            return None, None  # the timeout cut it off
        except OperationFailed as exc:
            return None, error_of(exc.code, exc.message, exc.details)
        except anyio.get_cancelled_exc_class():
            # Only a cancel scope around the operation may cancel it (the run's abort or
            # deadline, the caller): then this checkpoint raises again. A cancellation the
            # operation's own code raised (a cancelled future it awaited) is its error.
            await anyio.lowlevel.checkpoint_if_cancelled()
            return None, error_of(
                "operation_cancelled", "the operation's own code raised a cancellation"
            )
        except Exception as exc:  # an operation must never crash the run
            return None, error_of("operation_exception", f"{type(exc).__name__}: {exc}")
        finally:
            # Also reached when an abort cancels the hook: the run marks it aborted.
            e.finished_at = ctx.clock.now()
            e.duration_ms = (perf_counter() - started) * 1000
            if tracing is not None and token is not None:
                tracing.deactivate(token)

    def _accept(self, e: OpExec, result: OperationResult) -> None:
        summarize = self._ctx.summarize
        e.inputs_summary = summarize(result.inputs_summary)
        e.outputs_summary = summarize(result.outputs_summary)
        if result.debug is not None and e.config.debug.enabled:
            e.debug = summarize(result.debug)
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

    def _visible(self, e: OpExec, by_id: dict[str, OpExec], view: HookView) -> dict[str, Artifact]:
        """Committed artifacts plus the staged writes of ``e``'s transitive dependencies.

        Writes apply in ``(order, id)`` order of their writers, as they will commit.
        """
        staged: dict[str, OpExec] = {}
        for dep_id in e.config.depends_on:
            dep = by_id.get(dep_id)
            if dep is not None:
                staged.update((w.operation_id, w) for w in _writers(dep, by_id))
        visible = dict(view.base)
        for writer in sorted(staged.values(), key=lambda d: (d.config.order, d.operation_id)):
            write = writer.result.effects.artifact if writer.result is not None else None
            assert write is not None
            artifact, _ = next_artifact(
                visible.get(write.tag),
                write,
                now=self._ctx.started_at,
                run_id=self._ctx.run_id,
                operation_id=writer.operation_id,
            )
            visible[write.tag] = artifact
        return visible


def _writers(e: OpExec, by_id: dict[str, OpExec]) -> tuple[OpExec, ...]:
    """``e`` and its transitive dependencies that staged an artifact write.

    Computed once per finished operation from its direct dependencies' own answers, so
    a long chain costs one step per operation, not one walk of the whole chain.
    """
    if e.writers is None:
        found: dict[str, OpExec] = {}
        for dep_id in e.config.depends_on:
            dep = by_id.get(dep_id)
            if dep is not None:
                found.update((w.operation_id, w) for w in _writers(dep, by_id))
        if e.result is not None and e.result.effects.artifact is not None:
            found[e.operation_id] = e
        e.writers = tuple(found.values())
    return e.writers


def _checked(returned: object) -> OperationResult | None:
    """The operation's result; None when its timeout scope cut it off before it returned.

    Raises:
        TypeError: it returned something else (e.g. a forgotten ``return``).
    """
    if isinstance(returned, OperationResult):
        return returned
    raise TypeError(f"returned {type(returned).__name__}, not an OperationResult")


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
