"""The Runner: one Run of seed 003 ``30-run`` from planning to finished."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import anyio

from .._redact import DEFAULT_REDACTOR, Redactor
from ..errors import NotFound, ProfileInvalid, RunError, bound_details
from ..model import (
    AppliedEffect,
    Artifact,
    ArtifactRef,
    ChatMessage,
    ChatRole,
    FailedDetails,
    FailedType,
    Hook,
    MainLlmCall,
    MessageVariant,
    OperationError,
    OperationProfile,
    OperationProfileSessionKey,
    OperationStatus,
    ProfileIssue,
    PromptEffect,
    PromptMessage,
    Run,
    RunFinished,
    RunPhase,
    RunPhaseChanged,
    RunRequest,
    RunResult,
    RunStarted,
    RunStatus,
    SkippedReason,
    Trigger,
)
from ..ports import (
    ArtifactArchive,
    ChatStore,
    Clock,
    EventSink,
    IdFactory,
    MainLlm,
    ProfileStore,
    RunStore,
    SessionStore,
)
from ._commit import overlay
from ._context import AbortSignal, RunMeta
from ._events import EventEmitter
from ._executor import Executor, InProcessExecutor
from ._explain import RunReport, build_report
from ._main_llm import call_main_llm
from ._operation import OperationCatalog
from ._prompt import EffectivePrompt, effective_prompt
from ._scheduler import OpExec, announce, run_hook
from ._snapshot import SnapshotPolicy
from ._turn import commit_hook, store_assistant_reply
from ._window import HistoryWindow

__all__ = ["Runner", "SystemClock", "UuidIds"]

_NOT_PLANNED = (SkippedReason.DISABLED, SkippedReason.TRIGGER_MISMATCH)
"""Skip reasons of operations that are not part of the run at all."""


class SystemClock:
    """The real clock, in UTC."""

    def now(self) -> datetime:
        """Return the current UTC time."""
        return datetime.now(UTC)


class UuidIds:
    """Random ids ``<kind>_<32 hex>``."""

    def new_id(self, kind: str) -> str:
        """Return a new unique id."""
        return f"{kind}_{uuid.uuid4().hex}"


class Runner:
    """Runs operation profiles around one main LLM call per chat turn.

    Everything it uses is injected; nothing is global. ``await runner.run(request)``
    returns when the run is finished and no task it started is still running.

    Args:
        catalog: Operation definitions and implementations.
        profiles, sessions, chats, runs: The stores (:mod:`opsrun.ports`).
        main_llm: The main LLM of the chat.
        executor: Where operations execute (default: in-process tasks).
        events: Receives every event live, in ``seq`` order.
        clock, ids: Time and id sources (injectable for tests).
        summarize: Bounds and redacts operation summaries (default: bounded, then
            masked by ``redactor``).
        redactor: Masks secrets in everything a run records: errors, summaries,
            generation params, the prompt snapshot, the main LLM text and its stream
            events.
        window: The history window of the effective prompt (default: all history).
        snapshot: Limits and augmentation storage of the recorded prompt.
        archive: Receives artifact versions that retention prunes.
    """

    def __init__(
        self,
        *,
        catalog: OperationCatalog,
        profiles: ProfileStore,
        sessions: SessionStore,
        chats: ChatStore,
        runs: RunStore,
        main_llm: MainLlm,
        executor: Executor | None = None,
        events: EventSink | None = None,
        clock: Clock | None = None,
        ids: IdFactory | None = None,
        summarize: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        redactor: Redactor | None = None,
        window: HistoryWindow | None = None,
        snapshot: SnapshotPolicy | None = None,
        archive: ArtifactArchive | None = None,
    ) -> None:
        self.catalog = catalog
        self.profiles = profiles
        self.sessions = sessions
        self.chats = chats
        self.runs = runs
        self.main_llm = main_llm
        self.executor: Executor = executor or InProcessExecutor()
        self.events = events
        self.clock: Clock = clock or SystemClock()
        self.ids: IdFactory = ids or UuidIds()
        self.redactor: Redactor = redactor or DEFAULT_REDACTOR
        self.summarize = summarize or self._summarize
        self.window = window
        self.snapshot = snapshot or SnapshotPolicy()
        self.archive = archive
        self._active: dict[str, AbortSignal] = {}
        self._finished: dict[str, anyio.Event] = {}
        # Profiles are immutable: validation results are cached per profile object.
        self._validated: dict[int, tuple[OperationProfile, list[ProfileIssue]]] = {}

    def _summarize(self, summary: dict[str, Any]) -> dict[str, Any]:
        """The default summariser: bounded, then redacted."""
        if not summary:
            return {}
        redacted: dict[str, Any] = self.redactor.redact_value(bound_details(summary))
        return redacted

    def abort(self, run_id: str, reason: str = "user_abort") -> bool:
        """Abort an active run of this runner; return False when it is not active."""
        signal = self._active.get(run_id)
        if signal is None:
            return False
        signal.abort(reason)
        return True

    async def result(self, run_id: str) -> RunResult:
        """Return the stored result of a run.

        Raises:
            NotFound: if the run is unknown (or was pruned).
        """
        run, op_runs = await self.runs.get_run(run_id)
        return RunResult(run=run, operation_runs=tuple(op_runs))

    async def explain(self, run_id: str) -> RunReport:
        """Return the "why this answer" report of a finished (or running) run.

        ``report.to_markdown()`` renders it for people; docs/report.md describes it.

        Raises:
            NotFound: if the run is unknown (or was pruned).
        """
        run, op_runs = await self.runs.get_run(run_id)
        user_message: str | None = None
        history_size: int | None = None
        try:
            message = await self.chats.get_message(run.chat_id, run.user_message_id)
            user_message = message.prompt_text
            history = await self.chats.history(run.chat_id, run.branch_id)
            ids = [m.message_id for m in history]
            if run.user_message_id in ids:
                history_size = ids.index(run.user_message_id) + 1
        except NotFound:
            pass
        return build_report(
            run,
            op_runs,
            user_message=user_message,
            history_size=history_size,
            redactor=self.redactor,
        )

    async def run(self, request: RunRequest, *, abort: AbortSignal | None = None) -> RunResult:
        """Execute one run and return its result.

        A second call with the same turn key (see :class:`~opsrun.model.RunRequest`)
        returns the earlier run with ``deduplicated=True`` instead of starting another;
        while this runner is still executing that run, the call waits until it finishes.

        Raises:
            RunError: the profile or the turn to regenerate does not exist
                (codes ``profile_not_found``, ``turn_not_found``).
            ProfileInvalid: the stored profile fails validation against the catalog.
        """
        profile = await self._load_profile(request)
        now = self.clock.now()
        user_message_id = request.user_message_id or self.ids.new_id("msg")
        history = await self._turn_history(request, user_message_id)
        session_key = None
        if profile is not None:
            session_key = OperationProfileSessionKey(
                chat_id=request.chat_id,
                branch_id=request.branch_id,
                profile_ref=profile.ref,
                operation_profile_session_id=profile.operation_profile_session_id,
            )
        run = Run(
            run_id=self.ids.new_id("run"),
            trigger=request.trigger,
            chat_id=request.chat_id,
            branch_id=request.branch_id,
            user_message_id=user_message_id,
            profile_id=profile.profile_id if profile else None,
            profile_ref=profile.ref if profile else None,
            operation_profile_session_id=profile.operation_profile_session_id if profile else None,
            dedupe_key=request.dedupe_key,
            initiator=request.initiator,
            started_at=now,
        )
        stored = await self.runs.claim(run)
        if stored.run_id != run.run_id:
            finished = self._finished.get(stored.run_id)
            if finished is not None:  # still running in this runner: return it once finished
                await finished.wait()
            result = await self.result(stored.run_id)
            return result.model_copy(update={"deduplicated": True})

        # The run's own signal: the caller's aborts it, the deadline aborts only it, so a
        # caller's signal can be reused for a later run after a deadline.
        signal = AbortSignal()
        forget_caller = abort.subscribe(signal.abort) if abort is not None else None
        state = _RunState(self, request, run, profile, session_key, history, signal)
        self._active[run.run_id] = signal
        self._finished[run.run_id] = anyio.Event()
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(state.emitter.pump)
                try:
                    await state.drive()
                finally:
                    state.emitter.close()
        finally:
            state.unsubscribe()
            if forget_caller is not None:
                forget_caller()
            del self._active[run.run_id]
            self._finished.pop(run.run_id).set()
        return state.result

    async def _load_profile(self, request: RunRequest) -> OperationProfile | None:
        if request.profile_id is None:
            return None
        try:
            profile = await self.profiles.get_profile(request.profile_id)
        except NotFound as exc:
            raise RunError(str(exc.message), code="profile_not_found") from exc
        cached = self._validated.get(id(profile))
        if cached is None or cached[0] is not profile:
            cached = (profile, self.catalog.validate(profile))
            if len(self._validated) >= 64:
                self._validated.clear()
            self._validated[id(profile)] = cached
        issues = cached[1]
        if issues:
            raise ProfileInvalid(
                f"profile {profile.profile_id!r} is not valid for this catalog", issues=issues
            )
        return profile

    async def _turn_history(self, request: RunRequest, user_message_id: str) -> list[ChatMessage]:
        """History up to and including the turn's user message (creating it for generate)."""
        history = await self.chats.history(request.chat_id, request.branch_id)
        for index, message in enumerate(history):
            if message.message_id == user_message_id and message.role == ChatRole.USER:
                return history[: index + 1]
        if request.trigger == Trigger.REGENERATE:
            raise RunError(
                f"no user message {user_message_id!r} in chat {request.chat_id!r}",
                code="turn_not_found",
            )
        return history  # the new user message is appended once the run is claimed


class _RunState:
    """Everything one run tracks while it executes."""

    def __init__(
        self,
        runner: Runner,
        request: RunRequest,
        run: Run,
        profile: OperationProfile | None,
        session_key: OperationProfileSessionKey | None,
        history: list[ChatMessage],
        abort: AbortSignal,
    ) -> None:
        self.runner = runner
        self.request = request
        self.run = run
        self.profile = profile
        self.session_key = session_key
        self.history = history
        self.abort = abort
        self.clock = runner.clock
        self.executor = runner.executor
        self.summarize = runner.summarize
        self.started_at = run.started_at
        self.t0 = anyio.current_time()
        self.meta = RunMeta(
            run_id=run.run_id,
            trigger=run.trigger,
            chat_id=run.chat_id,
            branch_id=run.branch_id,
            user_message_id=run.user_message_id,
            profile_id=run.profile_id,
            session_key=session_key,
            assistant_variant_id=request.assistant_variant_id,
        )
        self.emitter = EventEmitter(
            base={
                "run_id": run.run_id,
                "chat_id": run.chat_id,
                "user_message_id": run.user_message_id,
                "trigger": run.trigger,
            },
            clock=runner.clock,
            sink=runner.events,
            store=runner.runs,
        )
        self.execs: list[OpExec] = []
        self.persisted: dict[str, Artifact] = {}
        self.run_only: dict[str, Artifact] = {}
        self.prompt_effects: list[tuple[str, PromptEffect]] = []
        self.applied: list[AppliedEffect] = []
        self.commit_count = 0
        self.profile_rank: dict[str, int] = {}
        if profile is not None:
            ranked = sorted(enumerate(profile.operations), key=lambda p: (p[1].config.order, p[0]))
            self.profile_rank = {entry.operation_id: rank for rank, (_, entry) in enumerate(ranked)}
        self.draft_prompt: tuple[PromptMessage, ...] = ()
        self.prompt_messages: tuple[PromptMessage, ...] = ()
        self.main_llm = MainLlmCall()
        self.assistant_message: ChatMessage | None = None
        self.scopes: set[anyio.CancelScope] = set()
        self.abort_reason: str | None = None
        self.unsubscribe = abort.subscribe(self._on_abort)
        self.result = RunResult(run=run)

    # -- helpers used by the scheduler and the commit ------------------------------------------
    def _on_abort(self, reason: str) -> None:
        if self.abort_reason is None:
            self.abort_reason = reason
        for scope in list(self.scopes):
            scope.cancel()

    def redact_error(self, error: OperationError) -> OperationError:
        """``error`` with secrets masked in its message and details."""
        redactor = self.runner.redactor
        message = redactor.redact(error.message)
        details = redactor.redact_value(error.details) if error.details else error.details
        if message == error.message and details == error.details:
            return error
        return error.model_copy(update={"message": message, "details": details})

    def committed_artifacts(self) -> dict[str, Artifact]:
        return overlay(self.persisted, self.run_only)

    def prompt_artifacts(self) -> list[tuple[int, Artifact]]:
        """Committed artifacts with their profile order index (writers not in it go last)."""
        last = len(self.profile_rank)
        return [
            (self.profile_rank.get(a.written_by or "", last), a)
            for a in self.committed_artifacts().values()
        ]

    def effective_prompt(self) -> EffectivePrompt:
        """The effective prompt from the committed state so far."""
        return effective_prompt(
            self.request.system_prompt,
            self.history,
            self.prompt_effects,
            artifacts=self.prompt_artifacts(),
            window=self.runner.window,
        )

    def context_history(self, hook: Hook) -> tuple[ChatMessage, ...]:
        if hook == Hook.AFTER_MAIN_LLM and self.assistant_message is not None:
            return (*self.history, self.assistant_message)
        return tuple(self.history)

    def announce_finished(self, e: OpExec) -> None:
        if e.finished_at is None:
            e.finished_at = self.clock.now()
        announce(self, e)

    def phase(self, phase: RunPhase) -> None:
        self.run = self.run.model_copy(update={"phase": phase})
        self.emitter.emit(RunPhaseChanged, phase=phase)

    def _end_all(self, status: OperationStatus, reason: SkippedReason | None = None) -> None:
        for e in self.execs:
            if not e.terminal:
                e.end(status, reason=reason)
                self.announce_finished(e)

    # -- the run ----------------------------------------------------------------------------
    async def drive(self) -> None:
        self.emitter.emit(RunStarted)
        async with anyio.create_task_group() as tg:
            if self.request.deadline_ms is not None:
                tg.start_soon(self._deadline_watch, self.request.deadline_ms / 1000)
            try:
                await self._phases()
            finally:
                tg.cancel_scope.cancel()

    async def _deadline_watch(self, seconds: float) -> None:
        await anyio.sleep(seconds)
        self.abort.abort("deadline")

    async def _phases(self) -> None:
        self.phase(RunPhase.PLANNING)
        await self._plan()
        if not await self._hook(Hook.BEFORE_MAIN_LLM, RunPhase.BEFORE_MAIN_LLM):
            return
        self.phase(RunPhase.BARRIER)
        await commit_hook(self, Hook.BEFORE_MAIN_LLM)
        blocker = self._required_not_done(Hook.BEFORE_MAIN_LLM)
        if blocker is not None:
            self._end_all(OperationStatus.SKIPPED, SkippedReason.MAIN_LLM_NOT_RUN)
            await self._finish(RunStatus.FAILED, FailedType.BEFORE_BARRIER, blocker)
            return
        self.phase(RunPhase.MAIN_LLM)
        self.history = await self._current_history()
        ok = await call_main_llm(self)
        if self.abort_reason is not None:
            await self._finish_aborted()
            return
        if not ok:
            self._end_all(OperationStatus.SKIPPED, SkippedReason.MAIN_LLM_NOT_RUN)
            error = self.main_llm.error
            details = FailedDetails(
                error_code=error.code if error else None,
                error_message=error.message if error else None,
            )
            await self._finish(RunStatus.FAILED, FailedType.MAIN_LLM, details)
            return
        await store_assistant_reply(self)
        if not await self._hook(Hook.AFTER_MAIN_LLM, RunPhase.AFTER_MAIN_LLM):
            return
        self.phase(RunPhase.COMMIT)
        await commit_hook(self, Hook.AFTER_MAIN_LLM)
        blocker = self._required_not_done(Hook.AFTER_MAIN_LLM)
        if blocker is not None:
            await self._finish(RunStatus.FAILED, FailedType.AFTER_MAIN_LLM, blocker)
            return
        await self._finish(RunStatus.DONE)

    async def _hook(self, hook: Hook, phase: RunPhase) -> bool:
        """Run one hook; False when the run was aborted (and is now finished)."""
        self.phase(phase)
        if hook == Hook.BEFORE_MAIN_LLM:
            self.draft_prompt = self.effective_prompt().messages
        if self.abort_reason is None:
            await run_hook(self, hook)
        if self.abort_reason is not None:
            await self._finish_aborted()
            return False
        return True

    async def _plan(self) -> None:
        runner = self.runner
        if self.request.trigger == Trigger.GENERATE:
            await self._create_user_message()
        if self.session_key is not None:
            await runner.sessions.get_or_create_session(self.session_key, self.started_at)
            self.persisted = await runner.sessions.get_artifacts(self.session_key)
            self.run = self.run.model_copy(
                update={
                    "artifacts_at_start": tuple(
                        ArtifactRef(tag=tag, version=self.persisted[tag].version)
                        for tag in sorted(self.persisted)
                    )
                }
            )
        profile = self.profile
        if profile is not None and profile.enabled:
            for entry in profile.operations:
                definition = runner.catalog[entry.operation_id]
                implementation = runner.catalog.implementation(entry.operation_id)
                params = runner.catalog.parse_params(entry.operation_id, entry.config.params)
                spec = getattr(params, "write_artifact", None)
                write_tag = definition.capabilities.write_tag or (spec.tag if spec else None)
                for hook in entry.config.hooks:
                    e = OpExec(definition, entry.config, hook, implementation, params, write_tag)
                    if not entry.config.enabled:
                        e.end(OperationStatus.SKIPPED, reason=SkippedReason.DISABLED)
                    elif not entry.config.runs_on(self.run.trigger):
                        e.end(OperationStatus.SKIPPED, reason=SkippedReason.TRIGGER_MISMATCH)
                    self.execs.append(e)
        for e in self.execs:
            if e.terminal:
                self.announce_finished(e)
        await runner.runs.save_run(self.run, self._records())

    async def _create_user_message(self) -> None:
        chats = self.runner.chats
        try:
            await chats.get_message(self.run.chat_id, self.run.user_message_id)
            return  # the host stored it already
        except NotFound:
            pass
        variant = MessageVariant(
            variant_id=self.runner.ids.new_id("var"),
            content=self.request.user_message or "",
            source="user",
            run_id=self.run.run_id,
            created_at=self.started_at,
        )
        message = ChatMessage(
            message_id=self.run.user_message_id,
            chat_id=self.run.chat_id,
            branch_id=self.run.branch_id,
            role=ChatRole.USER,
            variants=(variant,),
            selected_variant_id=variant.variant_id,
            created_at=self.started_at,
        )
        await chats.save_message(message)
        self.history = [*self.history, message]

    async def _current_history(self) -> list[ChatMessage]:
        """Re-read the turn's messages so committed user variants reach the prompt."""
        chats = self.runner.chats
        refreshed = []
        for message in self.history:
            if message.message_id == self.run.user_message_id:
                message = await chats.get_message(self.run.chat_id, message.message_id)
            refreshed.append(message)
        return refreshed

    def _required_not_done(self, hook: Hook) -> FailedDetails | None:
        """The first required operation of ``hook`` that should have run but is not done.

        Disabled and trigger-mismatched operations were never meant to run in this run
        (seed 003 §3: the barrier waits for the operations "that should start"), so they
        do not count even when required.
        """
        for e in sorted(self.execs, key=lambda x: (x.config.order, x.operation_id)):
            if e.skipped_reason in _NOT_PLANNED:
                continue
            if e.hook == hook and e.config.required and e.status != OperationStatus.DONE:
                error = e.error
                return FailedDetails(
                    operation_id=e.operation_id,
                    error_code=error.code if error else (e.skipped_reason or e.status).value,
                    error_message=error.message if error else f"operation ended {e.status.value}",
                )
        return None

    async def _finish_aborted(self) -> None:
        self._end_all(OperationStatus.ABORTED)
        await self._finish(RunStatus.ABORTED)

    async def _finish(
        self,
        status: RunStatus,
        failed_type: FailedType | None = None,
        details: FailedDetails | None = None,
    ) -> None:
        self._end_all(OperationStatus.SKIPPED, SkippedReason.MAIN_LLM_NOT_RUN)
        now = self.clock.now()
        self.run = self.run.model_copy(
            update={
                "status": status,
                "phase": RunPhase.FINISHED,
                "failed_type": failed_type,
                "failed_details": details,
                "abort_reason": self.abort_reason if status == RunStatus.ABORTED else None,
                "finished_at": now,
                "duration_ms": (anyio.current_time() - self.t0) * 1000,
                "main_llm": self._recorded_main_llm(),
                "applied_effects": tuple(self.applied),
            }
        )
        records = self._records()
        with anyio.CancelScope(shield=True):
            await self.runner.runs.save_run(self.run, records)
        self.emitter.emit(RunPhaseChanged, phase=RunPhase.FINISHED)
        self.emitter.emit(
            RunFinished, status=status, failed_type=failed_type, failed_details=details
        )
        self.result = RunResult(run=self.run, operation_runs=tuple(records))

    def _recorded_main_llm(self) -> MainLlmCall:
        """The main LLM call as the run records it: its text redacted.

        The chat keeps the reply as generated; the run's own record is a log.
        """
        text = self.main_llm.text
        if not text:
            return self.main_llm
        return self.main_llm.model_copy(update={"text": self.runner.redactor.redact(text)})

    def _records(self) -> list[Any]:
        return [e.record(self.run.run_id, self.run.trigger) for e in self.execs]
