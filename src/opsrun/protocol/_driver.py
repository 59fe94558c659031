"""PlanDriver: one user message in, a plan or an applied change out.

A turn routes the message to PLAN or APPLY (:mod:`._mode`), proposes (system prompt of
the protocol version, the context, the format reminder), parses and validates the answer,
repairs it once when it is invalid, and in APPLY previews and applies it. Protocol v2 is
tried first; an APPLY that v2 cannot express falls back to v1 once (repair first for
``ERR_PATCH_APPLY_FAILED`` / ``ERR_V2_UPDATE_EXISTING_FORBIDDEN``, at once for
``ERR_NON_UTF8_FILE``). Model misbehaviour never raises: it ends the turn ``failed``
with a stable code. Everything is recorded in the turn's trace.
"""

from __future__ import annotations

import os
import shlex
import threading
import uuid
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, TypeVar

import anyio
from anyio.lowlevel import RunVar

from opsrun._redact import redact_text, redact_value
from opsrun._retry import Sleep
from opsrun.errors import ConfigError, OpsrunError, bound_text
from opsrun.ports import LlmProvider, ProviderMessage

from ._apply import ApplyResult, CheckCommand, apply_plan
from ._context import (
    FileSystemContext,
    ProjectContext,
    render_context,
)
from ._diet import Diet
from ._driver_call import FormatMemory, ModelCall
from ._driver_check import AnswerCheck
from ._driver_config import DriverConfig, DriverMode
from ._driver_parts import (
    FALLBACK_AT_ONCE,
    Accepted,
    Rejected,
    Round,
    block_summary,
    shown_files,
    summarize,
    violations_of,
)
from ._driver_state import InMemoryPlanState, PlanState, SavedPlan
from ._driver_thread import Stoppable, run_stoppable
from ._events import PlanEvent, PlanEventSink, emit, log_event
from ._gather import Gatherer
from ._limits import Violation
from ._memory import ProjectPrefs, UserPrefs, apply_memory_patch, check_memory_patch
from ._memory_store import FileMemory, MemoryStore, MemoryUpdater, memory_block
from ._mode import Route, route
from ._plan import ContextRequest, Plan
from ._preview import DiffItem
from ._prompts import repair_prompt, system_prompt, user_prompt
from ._trace import TraceBuilder, write_trace

__all__ = ["DriverResult", "PlanDriver", "TurnStatus"]

TurnStatus = Literal["planned", "applied", "no_changes", "failed"]
T = TypeVar("T")


@dataclass(frozen=True, slots=True, kw_only=True)
class DriverResult:
    """The outcome of one :meth:`PlanDriver.turn`.

    Attributes:
        mode: ``plan`` or ``apply``.
        status: ``planned`` (a plan was saved), ``applied``, ``no_changes`` (APPLY found
            nothing to change) or ``failed``.
        plan: The validated plan, or None.
        error_code: The ``ERR_*`` code when ``failed``, else None.
        error_message: What went wrong, for people.
        trace_id: A UUID per propose cycle (one per turn).
        trace: The trace document.
        violations: The problems of the last rejected answer.
        preview: One diff per path the applied plan touched.
        applied: The committed transaction (``undo(root)`` reverts it).
        next_mode: ``plan`` when the turn failed because a file changed since it was read:
            ask again (the saved plan is kept and its files are read afresh).
        memory_applied: The ``memory_patch`` keys saved to engineering memory.
        memory_dropped: The ``memory_patch`` problems: unknown keys (dropped), or the
            whole patch when the host did not allow it this turn.
    """

    mode: DriverMode
    status: TurnStatus
    plan: Plan | None = None
    error_code: str | None = None
    error_message: str | None = None
    trace_id: str
    trace: dict[str, Any]
    violations: tuple[Violation, ...] = ()
    preview: tuple[DiffItem, ...] = ()
    applied: ApplyResult | None = None
    next_mode: DriverMode | None = None
    memory_applied: dict[str, Any] = field(default_factory=dict)
    memory_dropped: tuple[Violation, ...] = ()


_TURN_LOCKS: RunVar[weakref.WeakKeyDictionary[PlanDriver, anyio.Lock]] = RunVar(
    "opsrun_plan_driver_turn_locks"
)


class PlanDriver:
    """Runs the plan protocol's loop against a project directory with any LLM provider.

    Args:
        provider: The model (the ``LlmProvider`` port: ``OpenAIProvider``,
            ``AnthropicProvider``, ``ScriptedProvider`` in tests…).
        model: The model name sent with each request.
        root: The project directory.
        config: Settings (defaults: :class:`DriverConfig`).
        events: Where log events go (default: stdlib ``logging``).
        state: Where the plan waits for the APPLY turn (default: in memory).
        context: Where context comes from (default: :class:`FileSystemContext` over
            ``root`` with the config's path policy).
        memory: Engineering memory (default: :meth:`FileMemory.for_project`).
        sleep: How retry backoffs wait (``anyio.sleep``; tests pass a fake).

    Raises:
        ConfigError: ``root`` is not a directory (``root_invalid``), or ``config`` is not
            a :class:`DriverConfig`.
    """

    def __init__(
        self,
        *,
        provider: LlmProvider,
        model: str,
        root: str | os.PathLike[str],
        config: DriverConfig | None = None,
        events: PlanEventSink | None = None,
        state: PlanState | None = None,
        context: ProjectContext | None = None,
        memory: MemoryStore | None = None,
        sleep: Sleep = anyio.sleep,
    ) -> None:
        if config is not None and not isinstance(config, DriverConfig):
            raise ConfigError("config must be a DriverConfig", code="config_error")
        path = Path(os.fspath(root))
        if not path.is_dir():
            raise ConfigError(
                f"the project root {str(path)!r} is not a directory",
                code="root_invalid",
                details={"root": str(path)},
            )
        if not model:
            raise ConfigError("model must be a non-empty string", code="config_error")
        self.provider = provider
        self.model = model
        self.root = path
        self.config = config or DriverConfig()
        self.state: PlanState = state if state is not None else InMemoryPlanState()
        cfg = self.config
        self.context: ProjectContext = context or FileSystemContext(
            root=path, policy=cfg.policy, limits=cfg.limits, max_file_bytes=cfg.max_file_bytes
        )
        self.memory: MemoryStore = memory if memory is not None else FileMemory.for_project(path)
        self._events = events or log_event
        self._sleep = sleep
        self._formats = FormatMemory()

    async def turn(self, message: str, *, report: str | None = None) -> DriverResult:
        """Handle one user message: PLAN or APPLY, as the message asks.

        ``report`` is text attached to the message (a test log, a traceback); like the
        message, it is searched for files and errors to show the model up front.

        Turns on one driver run one at a time. Model misbehaviour (bad JSON, invalid
        plans, patches that do not apply, timeouts, provider errors) ends the turn with
        ``status="failed"`` and a stable ``error_code``; it is never raised. Events reach
        the sink on the event loop's thread. A cancellation while applying stops the
        apply (rolled back unless it had committed), lets the turn's bookkeeping finish
        (saved plan, memory, trace), and is then raised.

        Raises:
            ConfigError: the saved-plan state is unreadable (``plan_state_invalid``), or
                a preferences file is not valid preferences (``memory_invalid``).
            OSError: the saved plan cannot be written (``FilePlanState``).
        """
        async with self._turn_lock():
            return await self._turn(message, report)

    def _turn_lock(self) -> anyio.Lock:
        """This driver's turn lock in the running event loop (one per loop, so a driver
        may serve ``anyio.run`` after ``anyio.run``, on either backend)."""
        try:
            locks = _TURN_LOCKS.get()
        except LookupError:
            locks = weakref.WeakKeyDictionary()
            _TURN_LOCKS.set(locks)
        lock = locks.get(self)
        if lock is None:
            lock = locks[self] = anyio.Lock()
        return lock

    async def _turn(self, message: str, report: str | None) -> DriverResult:
        saved = await self.state.load()
        chosen = route(message, has_saved_plan=saved is not None, config=self.config)
        trace_id = str(uuid.uuid4())
        goal = chosen.goal or (saved.goal if saved is not None else "")
        trace = TraceBuilder(
            trace_id,
            config=self.config,
            model=self.model,
            provider=type(self.provider).__name__,
            goal=goal,
        )
        trace["mode"] = chosen.mode
        trace["route_reason"] = chosen.reason
        user, project = await self.memory.load()
        turn = _Turn(self, trace, trace_id, user, project)
        hints = "\n".join(t for t in (message, report) if t)
        if chosen.mode == "plan":
            result = await turn.plan(chosen, hints)
        else:
            result = await turn.apply(chosen, saved if chosen.use_saved_plan else None, hints)
        # Cancelled while applying: what was done is final (committed, or rolled back), so
        # the turn's bookkeeping finishes before the cancellation goes on.
        with anyio.CancelScope(shield=turn.cancelled is not None):
            if result.plan is not None and result.status != "failed":
                result = await turn.remember(result, message)
            trace["context_stats"] = turn.context_stats
            trace["cache_stats"] = turn.gather.cache.stats()
            trace["context_rounds"] = turn.gather.rounds
            trace["status"] = result.status
            trace["error_code"] = result.error_code
            trace["error_message"] = result.error_message
            doc: dict[str, Any] = redact_value(trace.doc)
            if self.config.write_traces:
                await anyio.to_thread.run_sync(write_trace, self.root, doc)
        if turn.cancelled is not None:
            await turn.cancelled.resume_cancel()
        return replace(result, trace=doc)


class _Turn:
    """The state of one turn: trace, calls made, the protocol attempt in progress."""

    def __init__(
        self,
        driver: PlanDriver,
        trace: TraceBuilder,
        trace_id: str,
        user: UserPrefs,
        project: ProjectPrefs,
    ) -> None:
        self.d = driver
        self.cfg = driver.config
        self.trace = trace
        self.trace_id = trace_id
        self.user = user
        self.project = project
        self.memory_text = memory_block(user, project)
        self.gather = Gatherer(driver.context, self.cfg.context, driver.root, self.emit)
        self.checker = AnswerCheck(
            root=driver.root,
            cfg=self.cfg,
            trace=trace,
            gather=self.gather,
            emit=self.emit,
            sink=self.sink,
        )
        self.model = ModelCall(
            provider=driver.provider,
            model=driver.model,
            cfg=self.cfg,
            trace=trace,
            trace_id=trace_id,
            emit=self.emit,
            sleep=driver._sleep,
            formats=driver._formats,
        )
        self.context_stats: dict[str, Any] = Diet((), (), 0).stats()
        self.cancelled: Stoppable[ApplyResult] | None = None
        self._loop_thread = threading.get_ident()
        self._pending: list[tuple[str, dict[str, Any]]] = []

    def emit(self, name: str, **fields: Any) -> None:
        """Send an event to the host's sink, always on the event loop's thread: an event
        emitted in a worker thread waits there until :meth:`flush`."""
        if threading.get_ident() != self._loop_thread:
            self._pending.append((name, fields))
            return
        emit(self.d._events, name, self.trace_id, **fields)

    def sink(self, event: PlanEvent) -> None:
        """The driver's sink, with this turn's trace id added (for apply_plan/preview_plan)."""
        self.emit(event.name, **event.fields)

    def flush(self) -> None:
        """Deliver, in order, the events worker threads emitted (on the loop's thread)."""
        pending, self._pending = self._pending, []
        for name, fields in pending:
            emit(self.d._events, name, self.trace_id, **fields)

    async def in_thread(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in a worker thread; the events it emitted are delivered after it."""
        try:
            return await anyio.to_thread.run_sync(fn, *args)
        finally:
            self.flush()

    def result(self, mode: DriverMode, status: TurnStatus, **kw: Any) -> DriverResult:
        return DriverResult(
            mode=mode, status=status, trace_id=self.trace_id, trace=self.trace.doc, **kw
        )

    def failed(self, mode: DriverMode, rejected: Rejected) -> DriverResult:
        """A failed result; secrets in its message and violations are masked."""
        return self.result(
            mode,
            "failed",
            error_code=rejected.code,
            error_message=redact_text(rejected.message),
            violations=tuple(
                v.model_copy(update={"message": redact_text(v.message)})
                for v in rejected.violations
            ),
            next_mode="plan" if rejected.back_to_plan else None,
        )

    # -- PLAN ---------------------------------------------------------------------------

    async def plan(self, chosen: Route, hints: str) -> DriverResult:
        version = self.cfg.protocol_version
        if not chosen.goal:
            rejected = Rejected("ERR_EMPTY_REQUEST", "the message asks for nothing", "route")
            return self.failed("plan", rejected)
        if self.cfg.auto_collect:
            await self.gather.auto(hints)
        while True:
            round_ = self.round("plan", chosen.goal, None)
            outcome = await self.attempt(round_, version, fallback_possible=False)
            if isinstance(outcome, Rejected):
                return self.failed("plan", outcome)
            wanted = self.gather.new(outcome.plan.context_requests)
            if not wanted or round_.rounds_left <= 0:
                break
            await self.next_round(wanted)
        saved = SavedPlan(
            goal=chosen.goal,
            plan=outcome.plan,
            protocol_version=outcome.plan.version,
            trace_id=self.trace_id,
            read_paths=tuple(round_.shown),
            context_requests=(*self.gather.requests, *wanted),
            saved_at=datetime.now(UTC),
        )
        await self.d.state.save(saved)
        self.emit("PLAN_SAVED", context_requests=len(saved.context_requests))
        return self.result("plan", "planned", plan=outcome.plan)

    def round(self, mode: DriverMode, goal: str, saved_summary: str | None) -> Round:
        """The next round's view of the context, after the diet."""
        diet = self.gather.view()
        self.context_stats = diet.stats()
        blocks = diet.blocks
        shown, partial = shown_files(blocks)
        self.trace["read_paths"] = list(shown)
        self.trace["context"] = [block_summary(b) for b in blocks]
        left = self.cfg.max_context_rounds - self.gather.rounds
        return Round(mode, goal, blocks, saved_summary, shown, left, partial)

    async def next_round(self, wanted: Sequence[ContextRequest]) -> None:
        self.gather.rounds += 1
        await self.gather.fulfil(wanted)

    # -- APPLY --------------------------------------------------------------------------

    async def apply(self, chosen: Route, saved: SavedPlan | None, hints: str) -> DriverResult:
        goal = chosen.goal or (saved.goal if saved is not None else "")
        if not goal:
            rejected = Rejected("ERR_EMPTY_REQUEST", "the message asks for nothing", "route")
            return self.failed("apply", rejected)
        if saved is not None:
            await self.gather.fulfil(saved.context_requests)
        if self.cfg.auto_collect:
            await self.gather.auto(hints)
        summary = saved.plan.summary if saved is not None else None
        version = self.cfg.protocol_version
        fallback_possible = version == 2 and self.cfg.fallback_to_v1
        outcome, round_ = await self.propose(goal, summary, version, fallback_possible)
        if (
            isinstance(outcome, Rejected)
            and outcome.fallback
            and fallback_possible
            and not self.trace["protocol_fallback_attempted"]  # at most once per turn
        ):
            self.trace["protocol_fallback_attempted"] = True
            self.trace["protocol_fallback_reason"] = outcome.code
            self.trace["protocol_fallback_stage"] = outcome.stage
            self.emit(
                "PROTOCOL_FALLBACK",
                **{"from": "v2", "to": "v1"},
                reason=outcome.code,
                stage=outcome.stage,
            )
            await self.widen(round_)
            outcome, round_ = await self.propose(goal, summary, 1, False)
        if isinstance(outcome, Rejected):
            return self.failed("apply", outcome)
        plan = outcome.plan
        if not plan.actions:  # validation accepted it: the summary says NO_CHANGES
            await self.d.state.clear()
            return self.result("apply", "no_changes", plan=plan)
        if not (plan.summary or "").strip():
            plan = plan.model_copy(update={"summary": summarize(plan)})
        check = self.check_command()
        if isinstance(check, Rejected):
            self.trace.add("errors", {"stage": "apply", "code": check.code})
            return self.failed("apply", check)
        run = await run_stoppable(
            lambda stop: self.apply_now(plan, round_, check, stop), name="opsrun-apply"
        )
        self.flush()
        if run.cancelled:
            self.cancelled = run
        if run.error is not None:
            exc = run.error
            if not isinstance(exc, OpsrunError):
                raise exc
            self.trace.add("errors", {"stage": "apply", "code": exc.code})
            rejected = Rejected(
                exc.code,
                exc.message,
                "apply",
                violations_of(exc),
                back_to_plan=exc.code == "ERR_BASE_MISMATCH",
            )
            return self.failed("apply", rejected)
        applied = run.value
        assert applied is not None
        self.trace["apply"] = {
            "tx_id": applied.tx_id,
            "changed": list(applied.changed),
            "check_returncode": applied.check_returncode,
        }
        with anyio.CancelScope(shield=run.cancelled):  # committed: the plan is done
            await self.d.state.clear()
        return self.result("apply", "applied", plan=plan, preview=outcome.preview, applied=applied)

    async def propose(
        self, goal: str, summary: str | None, version: int, fallback_possible: bool
    ) -> tuple[Accepted | Rejected, Round]:
        """APPLY attempts of one protocol version: a new round each time an answer asks for
        context instead of acting (while rounds are left). Returns the outcome and its round."""
        while True:
            round_ = self.round("apply", goal, summary)
            outcome = await self.attempt(round_, version, fallback_possible=fallback_possible)
            if not (isinstance(outcome, Accepted) and outcome.more_context):
                return outcome, round_
            if outcome.plan.version < version:  # the model answered in v1: its rounds stay v1
                version, fallback_possible = outcome.plan.version, False
            await self.next_round(self.gather.new(outcome.plan.context_requests))

    async def widen(self, round_: Round) -> None:
        """Before the v1 attempt (whole-file UPDATE_FILE), read whole the files the model saw
        only in part, when each fits one file's budget (``ContextLimits.max_file_chars``)."""
        budget = self.cfg.context.max_file_chars
        await self.gather.read_whole(p for p, size in round_.partial.items() if size <= budget)

    async def remember(self, result: DriverResult, message: str) -> DriverResult:
        """Apply the accepted plan's memory_patch when the host allows it this turn."""
        plan = result.plan
        if plan is None or not plan.memory_patch:
            return result
        clean, problems = check_memory_patch(plan.memory_patch)
        policy = self.cfg.memory_updates
        folded = message.casefold()
        asked = any(word.casefold() in folded for word in self.cfg.remember_words)
        allowed = policy == "always" or (policy == "when_asked" and asked)
        record: dict[str, Any] = {
            "proposed": sorted(plan.memory_patch),
            "applied": [],
            "dropped": [v.message for v in problems],
        }
        self.trace["memory"] = record
        if not clean:
            return replace(result, memory_dropped=tuple(problems))
        if not allowed:
            note = Violation(
                code="ERR_MEMORY_PATCH_NOT_ALLOWED",
                message=f"memory_patch not applied: memory_updates={policy!r}"
                + (" and the message does not ask to remember" if policy == "when_asked" else ""),
                severity="warning",
            )
            record["dropped"].append(note.message)
            return replace(result, memory_dropped=(*problems, note))
        try:
            user, project = await self.save_memory(clean)
        except Exception as exc:  # the turn's outcome (maybe a commit) must not be lost
            note = Violation(
                code="ERR_MEMORY_SAVE_FAILED",
                message=f"memory_patch not saved: {bound_text(str(exc) or repr(exc), 300)}",
                severity="warning",
            )
            record["dropped"].append(note.message)
            return replace(result, memory_dropped=(*problems, note))
        self.user, self.project = user, project
        record["applied"] = sorted(clean)
        self.emit("MEMORY_UPDATED", keys=",".join(sorted(clean)))
        return replace(result, memory_applied=clean, memory_dropped=tuple(problems))

    async def save_memory(self, clean: dict[str, Any]) -> tuple[UserPrefs, ProjectPrefs]:
        """Store checked memory_patch values; return the preferences now stored.

        A store with ``update`` (:class:`MemoryUpdater`: ``FileMemory``, ``InMemoryMemory``)
        sets just the patched keys on what it holds now; another store is given this
        turn's preferences with the patch applied.

        Raises:
            Exception: whatever the store raises (``OSError``, ``ConfigError``…).
        """
        store = self.d.memory
        if isinstance(store, MemoryUpdater):
            return await store.update(clean)
        user, project = apply_memory_patch(clean, self.user, self.project)
        await store.save(user, project)
        return user, project

    def check_command(self) -> CheckCommand | Rejected | None:
        """The configured check, else the project's test command (engineering memory).

        Returns ``Rejected`` (``ERR_CHECK_COMMAND_INVALID``) when the project's command
        cannot be split into words (an unclosed quote): no check is skipped silently.
        """
        if self.cfg.check is not None:
            self.trace["check"] = "config"
            return self.cfg.check
        command = self.project.default_test_command
        if self.cfg.use_project_test_command and command:
            self.trace["check"] = "project.default_test_command"
            try:
                argv = shlex.split(command)
            except ValueError as exc:
                return Rejected(
                    "ERR_CHECK_COMMAND_INVALID",
                    f"project.default_test_command {bound_text(command, 200)!r} is not a "
                    f"command line ({exc}); fix it in engineering memory",
                    "apply",
                )
            return argv or None
        return None

    def apply_now(
        self, plan: Plan, round_: Round, check: CheckCommand | None, stop: threading.Event
    ) -> ApplyResult:
        return apply_plan(
            plan,
            self.d.root,
            check=check,
            allow_delete=self.cfg.allow_delete,
            check_timeout=self.cfg.check_timeout,
            read_paths=tuple(round_.shown),
            limits=self.cfg.limits,
            policy=self.cfg.policy,
            events=self.sink,
            tolerance=self.cfg.patch_tolerance,
            stop=stop,
        )

    # -- one protocol attempt: propose, check, repair -----------------------------------

    async def attempt(
        self, round_: Round, version: int, *, fallback_possible: bool
    ) -> Accepted | Rejected:
        self.trace.add("protocol_attempts", version)
        context = render_context(round_.blocks)
        system = system_prompt(version)
        if self.memory_text:
            system = f"{system}\n{self.memory_text}"
        messages = [
            ProviderMessage("system", system),
            ProviderMessage(
                "user",
                user_prompt(
                    mode=round_.mode,
                    goal=round_.goal,
                    version=version,
                    saved_summary=round_.saved_summary,
                    context=context,
                ),
            ),
        ]
        repairs_left = self.cfg.repair_attempts
        while True:
            purpose = "propose" if repairs_left == self.cfg.repair_attempts else "repair"
            answer = await self.model.call(messages, version, purpose)
            if isinstance(answer, Rejected):
                return answer
            outcome = await self.in_thread(
                self.checker.check, answer, round_, version, fallback_possible
            )
            if isinstance(outcome, Accepted):
                self.trace["protocol_version_used"] = outcome.plan.version
                self.trace["validated_json"] = outcome.plan.model_dump(mode="json")
                self.trace["event"] = "LLM_PLAN_OK"
                self.emit("LLM_RESPONSE_OK", protocol=outcome.plan.version, purpose=purpose)
                return outcome
            self.trace.add("errors", {"stage": outcome.stage, "code": outcome.code})
            self.emit(
                "VALIDATION_FAILED",
                code=outcome.code,
                stage=outcome.stage,
                reason=bound_text(outcome.message, 200),
                count=len(outcome.violations),
            )
            if outcome.fallback and outcome.code in FALLBACK_AT_ONCE:
                return outcome
            if outcome.back_to_plan or repairs_left <= 0:
                return outcome
            repairs_left -= 1
            self.trace["repair_count"] = self.trace["repair_count"] + 1
            if version == self.cfg.protocol_version:
                self.trace["protocol_repair_attempt"] = 1
            self.emit("LLM_RESPONSE_REPAIR", code=outcome.code, protocol=version)
            problems = outcome.violations or (
                Violation(code=outcome.code, message=outcome.message),
            )
            messages += [
                ProviderMessage("assistant", answer),
                ProviderMessage("user", repair_prompt(problems, mode=round_.mode, version=version)),
            ]
