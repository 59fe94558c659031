"""The Runner: the public entry point of the run engine."""

from __future__ import annotations

import os
import re
from collections import OrderedDict, defaultdict
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from operator import attrgetter
from types import MappingProxyType
from typing import Any, Literal, TypeVar

import anyio
from pydantic import TypeAdapter

from .._config import require, require_at_least
from .._redact import DEFAULT_REDACTOR, Redactor, sha256_text
from .._telemetry import Telemetry, Tracing
from ..errors import ConfigError, NotFound, ProfileInvalid, RunError, bound_details
from ..model import (
    ChatMessage,
    ChatRole,
    OperationProfile,
    OperationProfileSessionKey,
    ProfileIssue,
    Run,
    RunEvent,
    RunRequest,
    RunResult,
    Trigger,
)
from ..model._build import Builder
from ..model._run import generate_key
from ..operations import AbortSignal, OperationCatalog, RunMeta
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
    Stores,
)
from ..prompt import HistoryWindow, SnapshotPolicy
from ..report import RunReport, build_report
from ..stores._frozen import freeze
from ._context import MainLlmRetry, RunContext
from ._events import EventEmitter
from ._executor import Executor, InProcessExecutor
from ._run import FINISH_SECONDS, RunDriver, unwrapped
from ._stream import BUFFER, RunEvents
from ._turn import Turn

__all__ = ["Runner", "SystemClock", "UuidIds"]

S = TypeVar("S")


class SystemClock:
    """The real clock, in UTC."""

    def now(self) -> datetime:
        """Return the current UTC time."""
        return datetime.now(UTC)


class UuidIds:
    """Random ids ``<kind>_<32 hex>`` (128 random bits from the OS)."""

    def new_id(self, kind: str) -> str:
        """Return a new unique id."""
        return f"{kind}_{os.urandom(16).hex()}"


class Runner:
    """Runs operation profiles around one main LLM call per chat turn.

    Everything it uses is injected; nothing is global. ``await runner.run(request)``
    returns when the run is finished and no task it started is still running.

    Args:
        catalog: Operation definitions and implementations; profiles are validated
            against it.
        stores: Every store at once (``InMemoryStores()``, or any :class:`~opsrun.ports.Stores`).
        main_llm: The main LLM of the chat.
        profiles, sessions, chats, runs, archive: Individual stores; each overrides the
            one of ``stores``. ``archive`` receives artifact versions that retention
            prunes (default: the archive of ``stores``, if it has one).
        executor: Where operations execute (default: in-process tasks).
        events: Receives every event live, in ``seq`` order.
        clock, ids: Time and id sources (injectable for tests).
        summarize: Bounds and redacts operation summaries (default: bounded, then
            masked by ``redactor``).
        redactor: Masks secrets in everything a run records: errors, summaries,
            generation params, the prompt snapshot, the main LLM text and its stream
            events. Operations receive it as ``ctx.redactor``.
        window: The history window of the effective prompt (default: all history).
        snapshot: Limits and augmentation storage of the recorded prompt.
        concurrent_turns: What a run does while another run holds its chat branch:
            ``"wait"`` its turn (the default) or ``"refuse"`` (``StoreError`` with code
            ``branch_busy``).
        lease_seconds: How long a run's lease lasts; the runner renews it every third
            of that while the run goes on. A run whose process died stops renewing, and
            a retry of its turn after the lease expired takes the turn over.
        event_batch_seconds: How long a run's events may wait before they reach the run
            store (default 0.02 s): a store that costs a round trip per write (SQLite,
            PostgreSQL) then takes a few batches per run instead of one per wait, and a
            follower in another process sees each event about this much later. 0 stores
            them whenever the run waits. The ``events`` sink and ``stream`` get each
            event as soon as the run waits, whatever this is; every event is stored
            before the run returns.
        main_llm_retry: How the main LLM call retries a rate limit or timeout that came
            before any streamed text (default ``MainLlmRetry()``: 3 calls, backoff from
            0.5 s up to 8 s with jitter; ``MainLlmRetry(max_attempts=1)`` turns it off).
        telemetry: OpenTelemetry spans of each run, its hooks, operations and LLM calls
            (:class:`~opsrun.telemetry.Telemetry`; default None: no spans, and
            ``opentelemetry`` is not imported).

    Raises:
        ConfigError: a store is missing (neither in ``stores`` nor given on its own), or
            ``concurrent_turns`` is neither ``"wait"`` nor ``"refuse"``, or
            ``lease_seconds`` is not positive, or ``event_batch_seconds`` is negative, or
            ``telemetry`` is given but ``opentelemetry-api`` is not installed.
    """

    def __init__(
        self,
        *,
        catalog: OperationCatalog,
        main_llm: MainLlm,
        stores: Stores | None = None,
        profiles: ProfileStore | None = None,
        sessions: SessionStore | None = None,
        chats: ChatStore | None = None,
        runs: RunStore | None = None,
        archive: ArtifactArchive | None = None,
        executor: Executor | None = None,
        events: EventSink | None = None,
        clock: Clock | None = None,
        ids: IdFactory | None = None,
        summarize: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        redactor: Redactor | None = None,
        window: HistoryWindow | None = None,
        snapshot: SnapshotPolicy | None = None,
        concurrent_turns: Literal["wait", "refuse"] = "wait",
        lease_seconds: float = 30.0,
        event_batch_seconds: float = 0.02,
        main_llm_retry: MainLlmRetry | None = None,
        telemetry: Telemetry | None = None,
    ) -> None:
        self.catalog = catalog
        self.profiles = _store("profiles", profiles, stores, lambda s: s.profiles)
        self.sessions = _store("sessions", sessions, stores, lambda s: s.sessions)
        self.chats = _store("chats", chats, stores, lambda s: s.chats)
        self.runs = _store("runs", runs, stores, lambda s: s.runs)
        self.archive = archive if archive is not None or stores is None else stores.archive
        self.main_llm = main_llm
        self.executor: Executor = executor or InProcessExecutor()
        self.events = events
        self.clock: Clock = clock or SystemClock()
        self.ids: IdFactory = ids or UuidIds()
        self.redactor: Redactor = redactor or DEFAULT_REDACTOR
        self.summarize = summarize or self._summarize
        self.window = window
        self.snapshot = snapshot or SnapshotPolicy()
        self.concurrent_turns = concurrent_turns
        known = concurrent_turns in ("wait", "refuse")
        require(self, "concurrent_turns", known, '"wait" or "refuse"')
        self.lease_seconds = lease_seconds
        require_at_least(self, 0.001, "lease_seconds")
        self.event_batch_seconds = event_batch_seconds
        require_at_least(self, 0.0, "event_batch_seconds")
        self.main_llm_retry = main_llm_retry or MainLlmRetry()
        self.telemetry = telemetry
        self._tracing = Tracing(telemetry) if telemetry is not None else None
        self._active: dict[str, AbortSignal] = {}
        self._finished: dict[str, anyio.Event | None] = {}
        """Runs executing here, each with the event a duplicate of its turn waits on."""
        # Profiles are immutable: validation results (and the rank of each operation in
        # profile order) are cached per profile object.
        self._validated: dict[int, _Checked] = {}
        self._turns = _TurnsSeen()

    def _summarize(self, summary: dict[str, Any]) -> dict[str, Any]:
        """The default summariser: bounded, then redacted."""
        if not summary:
            return {}
        redacted: dict[str, Any] = bound_details(summary, redactor=self.redactor)
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

        ``opsrun.report.render_markdown(report)`` renders it for people.

        Raises:
            NotFound: if the run is unknown (or was pruned).
        """
        run, op_runs = await self.runs.get_run(run_id)
        user_message: str | None = None
        history_size: int | None = None
        texts: dict[str, str] = {}
        # What the run sent, by message id: a message edited since (a new selected
        # variant) still shows the text sent, from the variant that has its hash. A
        # message an artifact or effect acted on (wrapped, replaced) was sent changed:
        # its hash is not of any variant's text.
        snapshot = run.main_llm.prompt
        sent = {
            m.source.message_id: m.sha256
            for m in (snapshot.messages if snapshot else ())
            if m.source is not None
            and m.source.message_id is not None
            and m.source.kind == "history"
        }
        try:
            message = await self.chats.get_message(run.chat_id, run.user_message_id)
            user_message = _sent_text(message, sent.get(message.message_id), run.run_id)
        except NotFound:  # deleted since: the report shows no text for it
            pass
        try:
            history = await self.chats.history(run.chat_id, run.branch_id)
        except NotFound:
            history = []
        ids = [m.message_id for m in history]
        if run.user_message_id in ids:
            history_size = ids.index(run.user_message_id) + 1
        for m in history:
            if m.message_id in sent:
                text = _sent_text(m, sent[m.message_id], run.run_id)
                if text is not None:
                    texts[m.message_id] = text
        return build_report(
            run,
            op_runs,
            user_message=user_message,
            history_size=history_size,
            history_texts=texts,
            redactor=self.redactor,
        )

    async def run(self, request: RunRequest, *, abort: AbortSignal | None = None) -> RunResult:
        """Execute one run and return its result.

        A second call with the same turn key (see :class:`~opsrun.model.RunRequest`)
        returns the earlier run with ``deduplicated=True`` instead of starting another;
        while this runner is still executing that run, the call waits until it finishes.

        One run at a time per chat branch: while another run holds the branch (in this
        process or, with a shared store, in another), this one waits its turn, or is
        refused when the runner was built with ``concurrent_turns="refuse"``.

        Raises:
            RunError: the profile or the turn to regenerate does not exist
                (codes ``profile_not_found``, ``turn_not_found``).
            ProfileInvalid: the stored profile fails validation against the catalog.
            StoreError: ``concurrent_turns="refuse"`` and another run holds the branch
                (code ``branch_busy``).
        """
        return await self._run(request, abort, self.events)

    @asynccontextmanager
    async def stream(
        self, request: RunRequest, *, abort: AbortSignal | None = None
    ) -> AsyncIterator[RunEvents]:
        """Execute one run and stream its events; ``events.result`` holds its result.

        Example::

            async with runner.stream(request) as events:
                async for event in events:
                    await send_to_client(sse_event(event))
            result = events.result

        The runner's own ``events`` sink still receives every event. Leaving the block
        before the run finished (a client that went away) aborts the run: it is recorded
        ``aborted`` with reason ``cancelled``, and ``events.result`` then holds that
        record.

        Raises:
            RunError, ProfileInvalid, StoreError: as :meth:`run`, while iterating.
        """
        send, receive = anyio.create_memory_object_stream[RunEvent](BUFFER)
        events = RunEvents(receive)
        left_early = False
        try:
            with unwrapped():
                async with anyio.create_task_group() as tg:
                    run = partial(self._run, request, abort)
                    tg.start_soon(events.collect, send, run, self.events)
                    try:
                        async with receive:
                            yield events
                    finally:
                        if not events.finished:
                            left_early = True
                            tg.cancel_scope.cancel()
        finally:
            if left_early:  # the run is recorded aborted: its result is in the store
                with anyio.CancelScope(shield=True) as scope:
                    scope.deadline = anyio.current_time() + FINISH_SECONDS
                    await events.settle(self.result)

    async def follow(self, run_id: str, *, after_seq: int = 0) -> AsyncGenerator[RunEvent, None]:
        """Yield a run's stored events after ``after_seq``, then each one its runner
        stores, until ``run.finished``; the run may execute anywhere that shares the run
        store, another process included (``RunStore.follow``).

        This is how a web worker streams a run that another worker executes::

            async with contextlib.aclosing(runner.follow(run_id, after_seq=last)) as events:
                async for event in events:
                    await send_to_client(sse_event(event))

        After a reconnect, pass the ``seq`` of the last event the client received as
        ``after_seq``: it resumes without gaps or repeats. Leaving early (a client that
        went away) does not affect the run; close the iteration (``aclosing``) so the
        store stops waiting for events at once.

        Raises:
            NotFound: the run is unknown (or was pruned), or was deleted while followed.
        """
        events = self.runs.follow(run_id, after_seq=after_seq)
        try:
            async for event in events:
                yield event
        finally:
            aclose = getattr(events, "aclose", None)
            if aclose is not None:  # an async generator: close it with this one
                await aclose()

    async def _run(
        self, request: RunRequest, abort: AbortSignal | None, sink: EventSink | None
    ) -> RunResult:
        checked = await self._load_profile(request)
        wait = self.concurrent_turns == "wait"
        with unwrapped():  # the run's task groups, and a store's branch hold, wrap errors
            async with self.runs.hold_branch(request.chat_id, request.branch_id, wait=wait):
                return await self._run_on_branch(request, checked, abort, sink)

    async def _run_on_branch(
        self,
        request: RunRequest,
        checked: _Checked | None,
        abort: AbortSignal | None,
        sink: EventSink | None,
    ) -> RunResult:
        profile = checked.profile if checked is not None else None
        user_message_id = request.user_message_id or self.ids.new_id("msg")
        history = await self._turn_history(request, user_message_id)
        started_at = _instant(self.clock.now())
        run = _RUN.build(
            {
                "run_id": self.ids.new_id("run"),
                "trigger": request.trigger,
                "chat_id": request.chat_id,
                "branch_id": request.branch_id,
                "user_message_id": user_message_id,
                "profile_id": profile.profile_id if profile else None,
                "profile_ref": profile.ref if profile else None,
                "operation_profile_session_id": (
                    profile.operation_profile_session_id if profile else None
                ),
                "dedupe_key": _turn_key(request, user_message_id),
                "initiator": request.initiator,
                "started_at": started_at,
                "lease_expires_at": started_at + timedelta(seconds=self.lease_seconds),
            }
        )
        stored = await self.runs.claim(run)
        if stored.run_id != run.run_id:
            if stored.run_id in self._finished:  # still running here: return it once finished
                finished = self._finished[stored.run_id]
                if finished is None:
                    finished = self._finished[stored.run_id] = anyio.Event()
                await finished.wait()
            result = await self.result(stored.run_id)
            return result.model_copy(update={"deduplicated": True})

        # The run's own signal: the caller's aborts it, the deadline aborts only it, so a
        # caller's signal can be reused for a later run after a deadline.
        signal = AbortSignal()
        forget_caller = abort.subscribe(signal.abort) if abort is not None else None
        rank = checked.rank if checked is not None else _NO_RANK
        ctx = self._context(request, run, rank, signal)
        emitter = EventEmitter(
            run,
            clock=self.clock,
            sink=sink,
            store=self.runs,
            batch_seconds=self.event_batch_seconds,
        )
        driver = RunDriver(
            ctx,
            run,
            profile=profile,
            catalog=self.catalog,
            runs=self.runs,
            emitter=emitter,
            turn=Turn(ctx, history),
            lease_seconds=self.lease_seconds,
        )
        self._active[run.run_id] = signal
        self._finished[run.run_id] = None
        try:
            await driver.drive()
        finally:
            # A cancelled pump leaves events behind: deliver them, shielded and bounded.
            if emitter.pending:
                with anyio.CancelScope(shield=True) as scope:
                    scope.deadline = anyio.current_time() + FINISH_SECONDS
                    await emitter.flush()
            if forget_caller is not None:
                forget_caller()
            del self._active[run.run_id]
            finished = self._finished.pop(run.run_id)
            if finished is not None:
                finished.set()
        return driver.result

    def _context(
        self,
        request: RunRequest,
        run: Run,
        rank: Mapping[str, int],
        signal: AbortSignal,
    ) -> RunContext:
        session_key = _session_key(run)
        return RunContext(
            request=request,
            meta=RunMeta(
                run_id=run.run_id,
                trigger=run.trigger,
                chat_id=run.chat_id,
                branch_id=run.branch_id,
                user_message_id=run.user_message_id,
                profile_id=run.profile_id,
                session_key=session_key,
                assistant_variant_id=request.assistant_variant_id,
            ),
            abort=signal,
            session_key=session_key,
            started_at=run.started_at,
            profile_rank=rank,
            chats=self.chats,
            sessions=self.sessions,
            archive=self.archive,
            main_llm=self.main_llm,
            executor=self.executor,
            clock=self.clock,
            ids=self.ids,
            redactor=self.redactor,
            summarize=self.summarize,
            window=self.window,
            snapshot=self.snapshot,
            main_llm_retry=self.main_llm_retry,
            deadline=_deadline(request),
            tracing=self._tracing,
            host=freeze(request.host),
        )

    async def _load_profile(self, request: RunRequest) -> _Checked | None:
        """The request's profile, validated against the catalog, with its ranks.

        A profile object seen before is not validated again (the last 64 are kept).

        Raises:
            RunError: there is no such profile (``profile_not_found``).
            ProfileInvalid: the profile fails validation against the catalog.
        """
        if request.profile_id is None:
            return None
        try:
            profile = await self.profiles.get_profile(request.profile_id)
        except NotFound as exc:
            raise RunError(str(exc.message), code="profile_not_found") from exc
        validated = self._validated
        cached = validated.get(id(profile))
        if cached is None or cached.profile is not profile:
            cached = _Checked(profile, self.catalog.validate(profile), _rank(profile))
            if len(validated) >= 64:
                del validated[next(iter(validated))]  # the oldest
            validated[id(profile)] = cached
        issues = cached.issues
        if issues:
            raise ProfileInvalid(
                f"profile {profile.profile_id!r} is not valid for this catalog", issues=issues
            )
        return cached

    async def _turn_history(self, request: RunRequest, user_message_id: str) -> list[ChatMessage]:
        """The turn's history: up to and including its user message, answered turns only.

        A user message without an assistant reply (its run failed or was aborted) stays
        in the chat but is left out of later turns' history; regenerating that turn
        answers it.
        """
        history = await self.chats.history(request.chat_id, request.branch_id)
        key = (request.chat_id, request.branch_id)
        # The turn is usually the newest message: look from the end.
        for index in range(len(history) - 1, -1, -1) if request.user_message_id else ():
            message = history[index]
            if message.message_id == user_message_id and message.role == ChatRole.USER:
                before = history[:index]
                if self._turns.check(key, before):
                    return [*before, message]
                return [*_answered(before, user_message_id), message]
        if request.trigger == Trigger.REGENERATE:
            raise RunError(
                f"no user message {user_message_id!r} in chat {request.chat_id!r}",
                code="turn_not_found",
            )
        # the new user message is appended once the run is claimed
        if self._turns.check(key, history):
            return history
        return _answered(history, user_message_id)


@dataclass(frozen=True, slots=True)
class _Checked:
    """A profile as loaded, with its validation issues and its operations' ranks."""

    profile: OperationProfile
    issues: list[ProfileIssue]
    rank: Mapping[str, int]
    """Rank of each operation in profile order (``order``, then position)."""


_NO_RANK: Mapping[str, int] = MappingProxyType({})

_RUN = Builder(Run).shape(
    (
        "run_id",
        "trigger",
        "chat_id",
        "branch_id",
        "user_message_id",
        "profile_id",
        "profile_ref",
        "operation_profile_session_id",
        "dedupe_key",
        "initiator",
        "started_at",
        "lease_expires_at",
    )
)
"""Builds a new run's record from the validated request and profile."""
_SESSION_KEY = Builder(OperationProfileSessionKey).shape(
    ("chat_id", "branch_id", "profile_ref", "operation_profile_session_id")
)


def _session_key(run: Run) -> OperationProfileSessionKey | None:
    """``run.session_key``, built from the run's own (validated) values."""
    if run.profile_ref is None or run.operation_profile_session_id is None:
        return None
    return _SESSION_KEY.build(
        {
            "chat_id": run.chat_id,
            "branch_id": run.branch_id,
            "profile_ref": run.profile_ref,
            "operation_profile_session_id": run.operation_profile_session_id,
        }
    )


def _rank(profile: OperationProfile) -> Mapping[str, int]:
    """The rank of each operation of ``profile`` in profile order."""
    ranked = sorted(enumerate(profile.operations), key=lambda p: (p[1].config.order, p[0]))
    return MappingProxyType({entry.operation_id: i for i, (_, entry) in enumerate(ranked)})


_INSTANT: TypeAdapter[datetime] = TypeAdapter(datetime)


def _instant(value: object) -> datetime:
    """A host clock's reading as a ``datetime``, as a model field reads it.

    Raises:
        pydantic.ValidationError: it is not a time.
    """
    if type(value) is datetime:
        return value
    return _INSTANT.validate_python(value)


_ROLE_CODES: defaultdict[ChatRole, str] = defaultdict(
    lambda: "o", {ChatRole.USER: "u", ChatRole.ASSISTANT: "a"}
)
_UNFOLLOWED = re.compile("u(?!a)")
_role = attrgetter("role")


def _already_turns(history: Sequence[ChatMessage]) -> bool:
    """True when ``history`` is already turns: no user message lacks an answer right
    after it and no two answers are adjacent (answers are stored after their user
    message, one per turn). One scan of one letter per message decides."""
    codes = "".join(map(_ROLE_CODES.__getitem__, map(_role, history)))
    return _UNFOLLOWED.search(codes) is None and "aa" not in codes


class _TurnsSeen:
    """Per chat branch, how much of its history a runner already knows is turns, so a
    turn scans only the messages added since (the chat's length does not count).

    The knowledge is a prefix length and the id of the prefix's last message: a history
    whose message at that place is another one (a message deleted before it) is scanned
    whole again. Messages edited in place keep their role, so their letters hold.
    """

    _MAX = 4096

    def __init__(self) -> None:
        self._seen: OrderedDict[tuple[str, str | None], tuple[int, str]] = OrderedDict()

    def check(self, key: tuple[str, str | None], history: Sequence[ChatMessage]) -> bool:
        """Whether ``history`` is turns (as :func:`_already_turns`), remembered for next time."""
        if not history:
            return True
        start = 0
        known = self._seen.pop(key, None)
        if known is not None:
            count, last_id = known
            if len(history) >= count > 0 and history[count - 1].message_id == last_id:
                start = count - 1  # one letter of overlap: pairs across the boundary
        if not _already_turns(history[start:]):
            return False
        self._seen[key] = (len(history), history[-1].message_id)
        if len(self._seen) > self._MAX:
            self._seen.popitem(last=False)
        return True


def _answered(history: list[ChatMessage], current: str) -> list[ChatMessage]:
    """``history`` as turns: each answered user message followed by its answer.

    A user message is answered when an assistant message names it as its turn, or when
    an assistant message naming no stored turn follows it directly (a history the host
    wrote itself). User messages left unanswered are left out (``current``, the turn
    being run, stays). An answer stored after later turns (a turn taken over from a run
    whose process died) is placed right after its user message.
    """
    if _already_turns(history):
        return history
    questions = {m.message_id for m in history if m.role is ChatRole.USER}
    answers: dict[str, list[ChatMessage]] = {}
    for m in history:
        if m.role is ChatRole.ASSISTANT and m.turn_id in questions:
            answers.setdefault(m.turn_id, []).append(m)
    turns: list[ChatMessage] = []
    for i, m in enumerate(history):
        if m.role is ChatRole.ASSISTANT and m.turn_id in questions:
            continue  # placed after its user message
        if m.role is not ChatRole.USER:
            turns.append(m)
            continue
        own = answers.get(m.message_id)
        if own:
            turns.append(m)
            turns.extend(own)
        elif m.message_id == current or _host_answered(history, i, questions):
            turns.append(m)
    return turns


def _host_answered(history: list[ChatMessage], index: int, questions: set[str]) -> bool:
    """True when the message after ``index`` is an answer naming no stored turn."""
    if index + 1 >= len(history):
        return False
    after = history[index + 1]
    return after.role is ChatRole.ASSISTANT and after.turn_id not in questions


def _turn_key(request: RunRequest, user_message_id: str) -> str:
    """The run's idempotency key: the request's, or for a generate that carries none, its
    user message's id made here, so that a re-send carrying that id is the same turn."""
    key = request.dedupe_key
    if not key and request.trigger is Trigger.GENERATE:
        key = generate_key(request.chat_id, user_message_id)
    return key


def _deadline(request: RunRequest) -> float | None:
    """The run's deadline as an ``anyio.current_time()`` value, if it has one."""
    if request.deadline_ms is None:
        return None
    return anyio.current_time() + request.deadline_ms / 1000


def _store(name: str, given: S | None, stores: Stores | None, pick: Callable[[Stores], S]) -> S:
    """The store ``name``: given on its own, or else the bundle's.

    Raises:
        ConfigError: neither has it.
    """
    if given is not None:
        return given
    if stores is None:
        raise ConfigError(
            f"Runner needs a {name} store: pass stores=InMemoryStores() or {name}=...",
            details={"field": name},
        )
    return pick(stores)


def _sent_text(message: ChatMessage, sha256: str | None, run_id: str) -> str | None:
    """The text of ``message`` a run sent: the variant whose text has the hash the run
    recorded; without a hash, the variant the run wrote, else the only one. None when
    no variant is known to be it (edited since, or several variants and no record)."""
    variants = message.variants
    if sha256 is not None:
        return next((v.content for v in variants if sha256_text(v.content) == sha256), None)
    own = [v.content for v in variants if v.run_id == run_id and v.source == "user"]
    if own:
        return own[0]
    return variants[0].content if len(variants) == 1 else None
