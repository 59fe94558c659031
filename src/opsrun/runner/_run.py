"""One run from planning to finished: the phases, in order, over the run's collaborators.

The driver owns the run's record and coordinates four collaborators that each get only
what they use: the read-only :class:`RunContext`, the :class:`OperationLedger` (what each
operation did), the :class:`Staging` area (what is committed) and the :class:`Turn` (the
chat messages). The :class:`Scheduler` executes hooks; the main LLM call is one function.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timedelta
from types import MappingProxyType

import anyio
from pydantic import TypeAdapter

from .._logs import enter_run, leave, run_logger
from ..errors import OpsrunError, bound_text
from ..model import (
    FailedDetails,
    FailedType,
    Hook,
    MainLlmCall,
    MainLlmStatus,
    OperationConfig,
    OperationProfile,
    OperationRun,
    OperationStatus,
    Run,
    RunPhase,
    RunResult,
    RunStatus,
    SkippedReason,
    Trigger,
)
from ..model._build import Builder, replaced
from ..operations import OperationCatalog, RunMeta
from ..operations._validate import params_write_tag
from ..ports import RunStore
from ._context import Cancellation, RunContext
from ._eager import drive, start
from ._events import EventEmitter
from ._ledger import OperationLedger, OpExec
from ._main_llm import call_main_llm
from ._scheduler import HookView, Scheduler
from ._staging import Staging
from ._turn import Turn

__all__ = ["FINISH_SECONDS", "RunDriver", "unwrapped"]

_INSTANT: TypeAdapter[datetime] = TypeAdapter(datetime)
"""Reads a host clock's value as a ``datetime`` (as the run's own fields do)."""

FINISH_SECONDS = 5.0
"""How long a run cancelled from outside may take to record itself as aborted."""

_SAVE_RETRY_SECONDS = 0.05
"""The pause before a run's final record is stored again after the store failed."""

_log = run_logger("opsrun.runner")

_RESULT = Builder(RunResult).shape(("run", "operation_runs"))
"""Builds the run's result from its records (no second validation)."""


_FAILED_IN = {
    RunPhase.PLANNING: FailedType.BEFORE_BARRIER,
    RunPhase.BEFORE_MAIN_LLM: FailedType.BEFORE_BARRIER,
    RunPhase.BARRIER: FailedType.BEFORE_BARRIER,
    RunPhase.MAIN_LLM: FailedType.MAIN_LLM,
    RunPhase.AFTER_MAIN_LLM: FailedType.AFTER_MAIN_LLM,
    RunPhase.COMMIT: FailedType.AFTER_MAIN_LLM,
    RunPhase.FINISHED: FailedType.AFTER_MAIN_LLM,
}
"""The failed type of a run that an error outside its operations ends in a phase."""


def unwrap(exc: BaseException) -> BaseException:
    """The one error inside (nested) exception groups of one, or ``exc`` itself."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


@contextmanager
def unwrapped() -> Iterator[None]:
    """Raise the one error of an exception group (of task groups inside) as itself, so
    callers of the runner get the error, not its wrapping."""
    try:
        yield
    except BaseExceptionGroup as group:
        error = unwrap(group)
        if error is group:
            raise
        raise error from None


class RunDriver:
    """Drives one claimed run through its phases and records it."""

    def __init__(
        self,
        ctx: RunContext,
        run: Run,
        *,
        profile: OperationProfile | None,
        catalog: OperationCatalog,
        runs: RunStore,
        emitter: EventEmitter,
        turn: Turn,
        lease_seconds: float,
    ) -> None:
        self._ctx = ctx
        self._profile = profile
        self._catalog = catalog
        self._runs = runs
        self._emitter = emitter
        self._turn = turn
        self._lease_seconds = lease_seconds
        self._cancellation = Cancellation(ctx.abort)
        self._ledger = OperationLedger(emitter=emitter, redactor=ctx.redactor, now=ctx.clock.now)
        self._staging = Staging(ctx)
        self._scheduler = Scheduler(ctx, self._ledger, self._cancellation, emitter)
        self._t0 = anyio.current_time()
        self._main_llm = run.main_llm  # none yet: the run's own default, an empty call
        self._redacted_text: str | None = None
        """The main LLM's text redacted, when the stream already redacted it whole."""
        self.run = run
        self._result: RunResult | None = None
        self._finished = False
        self._at = RunPhase.PLANNING
        """The phase the run is in."""
        self._lease = timedelta(seconds=lease_seconds)

    @property
    def result(self) -> RunResult:
        """The finished run and its operation runs (once :meth:`drive` returned)."""
        assert self._result is not None, "the run is finished when drive() returns"
        return self._result

    async def drive(self) -> None:
        """Run every phase; the run is finished and stored when this returns.

        Cancelled from outside (the caller's cancel scope, a client that went away), the
        run is an abort with reason ``cancelled``: it is finished and stored in a
        shielded scope of at most :data:`FINISH_SECONDS`, then the cancellation goes on.

        While it runs, the run's id is in the log context and, with telemetry, its span
        is the current span (every task the run starts inherits both).
        """
        self._emitter.run_started()
        tracing = self._ctx.tracing
        log_scope = enter_run(self.run.run_id)
        span = token = None
        if tracing is not None:
            span = tracing.start_run(self.run)
            token = tracing.activate(span)
        _log.debug("run started (%s, chat %s)", self.run.trigger, self.run.chat_id)
        try:
            # One helper task delivers queued events, renews the lease and watches the
            # deadline; it ends on its own once the phases are over and the queue is
            # delivered (no cancellation, no leftover cycle). It is needed only once the
            # run waits: the phases start eagerly (see ``_eager``), and a run that never
            # suspends (nothing in its stores, operations or main LLM waited) has no
            # helper; what it queued is delivered when the phases are over.
            async with anyio.create_task_group() as tg:
                self._scheduler.tasks = tg
                try:
                    started = start(self._phases())
                    if started is not None:
                        tg.start_soon(self._helper)
                        await drive(started)
                finally:
                    self._scheduler.tasks = None
                    self._emitter.close()
            if self._emitter.pending:
                await self._emitter.flush()
            if not self._finished:  # a stray cancellation ended the phases unseen
                raise RuntimeError("the run's phases ended before the run was finished")
        except anyio.get_cancelled_exc_class():
            if not self._finished:
                self._ctx.abort.abort("cancelled")
                with anyio.CancelScope(shield=True) as scope:
                    scope.deadline = anyio.current_time() + FINISH_SECONDS
                    await self._finish_aborted()
            raise
        except BaseException as exc:
            # Something outside the operations failed (a store, an operation's
            # BaseException): the run is recorded failed if it can be.
            if not self._finished:
                with anyio.CancelScope(shield=True) as scope:
                    scope.deadline = anyio.current_time() + FINISH_SECONDS
                    await self._finish_broken(unwrap(exc))
            raise
        finally:
            self._cancellation.close()
            if tracing is not None and span is not None and token is not None:
                tracing.deactivate(token)
                tracing.end_run(span, self.run)
            leave(log_scope)

    async def _helper(self) -> None:
        """While the run goes on: hand events to the sink at once and to the run store
        in batches, renew the lease every third of its length, abort the run at its
        deadline.

        The deadline, the lease and a due batch come before each event for the sink: a
        slow sink delays them by one delivery at most.
        """
        emitter = self._emitter
        period = self._lease_seconds / 3
        renew_at = anyio.current_time() + period
        deadline = self._ctx.deadline
        while True:
            now = anyio.current_time()
            if deadline is not None and now >= deadline:
                deadline = None
                self._ctx.abort.abort("deadline")
            if now >= renew_at:
                renew_at = now + period
                until = _INSTANT.validate_python(self._ctx.clock.now())
                await self._runs.renew_lease(self.run.run_id, until + self._lease)
                continue
            due = emitter.store_due
            if emitter.unstored and (emitter.closed or now >= (due or 0.0)):
                await emitter.store()
                continue
            if emitter.unsent:
                await emitter.send(one=True)
                continue
            if emitter.closed:
                return
            wake_at = renew_at if deadline is None else min(renew_at, deadline)
            if due is not None:
                wake_at = min(wake_at, due)
            with anyio.CancelScope(deadline=wake_at):
                await emitter.wait()

    async def _phases(self) -> None:
        self._phase(RunPhase.PLANNING)
        await self._plan()
        if not await self._hook(Hook.BEFORE_MAIN_LLM, RunPhase.BEFORE_MAIN_LLM):
            return
        self._phase(RunPhase.BARRIER)
        await self._commit(Hook.BEFORE_MAIN_LLM)
        blocker = self._ledger.required_not_done(Hook.BEFORE_MAIN_LLM)
        if blocker is not None:
            self._ledger.end_all(OperationStatus.SKIPPED, SkippedReason.MAIN_LLM_NOT_RUN)
            await self._finish(RunStatus.FAILED, FailedType.BEFORE_BARRIER, blocker)
            return
        if not await self._main_llm_phase():
            return
        if not await self._hook(Hook.AFTER_MAIN_LLM, RunPhase.AFTER_MAIN_LLM):
            return
        self._phase(RunPhase.COMMIT)
        await self._commit(Hook.AFTER_MAIN_LLM)
        blocker = self._ledger.required_not_done(Hook.AFTER_MAIN_LLM)
        if blocker is not None:
            await self._finish(RunStatus.FAILED, FailedType.AFTER_MAIN_LLM, blocker)
            return
        await self._finish(RunStatus.DONE)

    def _phase(self, phase: RunPhase) -> None:
        # The stored record keeps the phase it was saved in (planning, then finished).
        self._emitter.phase_changed(phase)
        self._at = phase

    async def _plan(self) -> None:
        """Plan every operation, create the turn's user message, load the session.

        The operations are planned first: a run that ends while the stores are awaited
        still records every one of them.
        """
        profile = self._profile
        if profile is not None and profile.enabled:
            for entry in profile.operations:
                for e in self._plan_operation(entry.operation_id, entry.config):
                    self._ledger.add(e)
        for e in self._ledger:
            if e.terminal:
                self._ledger.announce(e)
        if self._ctx.request.trigger == Trigger.GENERATE:
            await self._turn.ensure_user_message()
        at_start = await self._staging.load()
        # Operation records are stored when the run finishes; events carry the progress.
        # The claim stored the run's record: it changes here only with artifacts.
        if at_start:
            self.run = self.run.model_copy(update={"artifacts_at_start": at_start})
            await self._runs.save_run(self.run, [])

    def _plan_operation(self, operation_id: str, config: OperationConfig) -> list[OpExec]:
        """One :class:`OpExec` per hook of the operation, ended when it is not to run."""
        catalog = self._catalog
        implementation = catalog.implementation(operation_id)
        definition = implementation.definition  # what ``catalog[operation_id]`` is
        params = catalog.parse_params(operation_id, config.params)
        write_tag = definition.capabilities.write_tag or params_write_tag(params)
        planned = []
        for hook in config.hooks:
            e = OpExec(definition, config, hook, implementation, params, write_tag)
            if not config.enabled:
                e.end(OperationStatus.SKIPPED, reason=SkippedReason.DISABLED)
            elif not config.runs_on(self.run.trigger):
                e.end(OperationStatus.SKIPPED, reason=SkippedReason.TRIGGER_MISMATCH)
            planned.append(e)
        return planned

    async def _hook(self, hook: Hook, phase: RunPhase) -> bool:
        """Run one hook; False when the run was aborted (and is now finished)."""
        self._phase(phase)
        # A hook with nothing left to execute needs no view (nor a draft prompt).
        if self._ledger.has_pending(hook) and not self._cancellation.aborted:
            await self._scheduler.run_hook(hook, self._view(hook))
        if self._cancellation.aborted:
            await self._finish_aborted()
            return False
        return True

    def _view(self, hook: Hook) -> HookView:
        """What the operations of ``hook`` read."""
        host = self._ctx.host
        history = self._turn.visible_history(hook)
        base = MappingProxyType(self._staging.committed())
        if hook == Hook.BEFORE_MAIN_LLM:
            draft = self._staging.effective_prompt(self._turn.history).messages
            return HookView(history=history, base=base, prompt=draft, host=host)
        run = self._meta_after_reply()
        return HookView(history=history, base=base, main_llm=self._main_llm, run=run, host=host)

    def _meta_after_reply(self) -> RunMeta:
        """The run's identity with the assistant message and variant the reply made."""
        return replace(
            self._ctx.meta,
            assistant_message_id=self._main_llm.assistant_message_id,
            assistant_variant_id=self._main_llm.assistant_variant_id,
        )

    async def _commit(self, hook: Hook) -> None:
        done = [e for e in self._ledger.of_hook(hook) if e.status == OperationStatus.DONE]
        if done:
            await self._staging.commit(done, self._ledger, self._turn)
        self._ledger.committed(hook)

    async def _main_llm_phase(self) -> bool:
        """Call the main LLM and store its reply; False when the run ended instead."""
        self._phase(RunPhase.MAIN_LLM)
        await self._turn.refresh()
        prompt = self._staging.effective_prompt(self._turn.history)
        reply = await call_main_llm(
            self._ctx, self._emitter, self._cancellation, prompt, self._interrupted
        )
        self._main_llm, self._redacted_text = reply.call, reply.redacted_text
        if self._cancellation.aborted:
            await self._finish_aborted()
            return False
        error = self._main_llm.error
        if error is not None or self._main_llm.status != MainLlmStatus.DONE:
            self._ledger.end_all(OperationStatus.SKIPPED, SkippedReason.MAIN_LLM_NOT_RUN)
            details = FailedDetails(
                error_code=error.code if error else None,
                error_message=error.message if error else None,
            )
            await self._finish(RunStatus.FAILED, FailedType.MAIN_LLM, details)
            return False
        self._main_llm = await self._turn.store_reply(self._main_llm)
        return True

    def _interrupted(self, call: MainLlmCall) -> None:
        """Keep the main LLM call that a cancellation from outside ended."""
        self._main_llm = call

    async def _finish_aborted(self) -> None:
        self._ledger.end_all(OperationStatus.ABORTED)
        await self._finish(RunStatus.ABORTED)

    async def _finish_broken(self, error: BaseException) -> None:
        """Record the run failed by ``error``, raised outside any operation, in the part
        it was in; operations still running end ``aborted``. A store that fails again
        here leaves the record to its lease (logged).

        Before a generate stored its user message the turn has not begun: the run ends
        ``aborted`` (reason ``turn_not_started``, the error in its details) and so gives
        up its turn key, and a retry of the same request starts the turn afresh.
        """
        if self.run.phase == RunPhase.FINISHED:
            # The run had ended (``_finish``) and only storing its record failed, twice:
            # recording it failed now would contradict what the chat holds.
            _log.exception(
                "run %s ended %s but its record could not be stored; left to its lease",
                self.run.run_id,
                self.run.status,
            )
            return
        code = error.code if isinstance(error, OpsrunError) else "internal_error"
        message = self._ctx.redactor.redact(f"{type(error).__name__}: {error}")
        details = FailedDetails(error_code=code, error_message=bound_text(message))
        self._ledger.end_all(OperationStatus.ABORTED)
        try:
            if self._turn.started:
                await self._finish(RunStatus.FAILED, _FAILED_IN[self._at], details)
            else:
                await self._finish(RunStatus.ABORTED, None, details, reason="turn_not_started")
        except Exception:
            _log.exception("run %s failed and could not be recorded", self.run.run_id)

    async def _finish(
        self,
        status: RunStatus,
        failed_type: FailedType | None = None,
        details: FailedDetails | None = None,
        *,
        reason: str | None = None,
    ) -> None:
        self._ledger.end_all(OperationStatus.SKIPPED, SkippedReason.MAIN_LLM_NOT_RUN)
        now = self._ctx.clock.now()
        aborted = status == RunStatus.ABORTED
        self.run = replaced(
            self.run,
            {
                "status": status,
                "phase": RunPhase.FINISHED,
                "failed_type": failed_type,
                "failed_details": details,
                "abort_reason": (reason or self._cancellation.reason) if aborted else None,
                "finished_at": now,
                "duration_ms": (anyio.current_time() - self._t0) * 1000,
                "main_llm": self._recorded_main_llm(),
                "applied_effects": tuple(self._staging.applied),
            },
        )
        records = self._records()
        with anyio.CancelScope(shield=True):
            try:
                await self._runs.save_run(self.run, records)
            except Exception as exc:
                # Everything the run did is stored but this record: a store that
                # failed for a moment (busy, a dropped connection) gets a second try.
                _log.warning(
                    "run %s: storing its final record failed (%r); trying once more",
                    self.run.run_id,
                    exc,
                )
                await anyio.sleep(_SAVE_RETRY_SECONDS)
                await self._runs.save_run(self.run, records)
        self._emitter.phase_changed(RunPhase.FINISHED)
        self._emitter.run_finished(status, failed_type, details)
        self._result = _RESULT.build({"run": self.run, "operation_runs": tuple(records)})
        self._finished = True
        # The run is recorded; what it worked with is not needed any more. Let go of it
        # now rather than when the run's task ends: with many runs at once, a finished
        # run waiting for its turn on the event loop would otherwise keep all of it alive
        # for the garbage collector to walk.
        self._ledger.release()
        self._staging.release()
        self._turn.release()
        if failed_type is None:
            _log.debug("run finished: %s", status)
        else:
            _log.debug("run finished: %s (%s)", status, failed_type)

    def _recorded_main_llm(self) -> MainLlmCall:
        """The main LLM call as the run records it: its text redacted.

        The chat keeps the reply as generated; the run's own record is a log.
        """
        call = self._main_llm
        if not call.text:
            return call
        text = self._redacted_text
        if text is None:
            text = self._ctx.redactor.redact(call.text)
        if text == call.text:
            return call
        return call.model_copy(update={"text": text})

    def _records(self) -> list[OperationRun]:
        return self._ledger.records(self.run.run_id, self.run.trigger)
