"""What every part of the engine reads about one run, how an abort reaches it, and how
the main LLM call retries."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import anyio

from .._config import require, require_at_least, require_whole
from .._redact import Redactor
from .._retry import Backoff, Sleep
from .._telemetry import Tracing
from ..model import OperationProfileSessionKey, RunRequest
from ..operations import AbortSignal, RunMeta
from ..ports import ArtifactArchive, ChatStore, Clock, IdFactory, MainLlm, SessionStore
from ..prompt import HistoryWindow, SnapshotPolicy
from ._executor import Executor

__all__ = ["Cancellation", "MainLlmRetry", "RunContext"]


@dataclass(frozen=True, slots=True, kw_only=True)
class MainLlmRetry:
    """How the main LLM call retries a failure that came before any streamed text.

    A ``RateLimited`` or ``ProviderTimeout`` from the main LLM, raised before the call
    emitted any ``main_llm.delta``, is retried: the call is made again after a wait that
    doubles from ``initial_backoff`` up to ``max_backoff``, plus a random jitter of up to
    ``initial_backoff``, and at least the provider's ``retry_after``. Once text was
    streamed, an error ends the call. A retry whose wait would end at or after the run's
    deadline is not made, and the run's abort ends a wait at once.

    ``MainLlmRetry(max_attempts=1)`` turns retries off.

    Attributes:
        max_attempts: Calls in total, the first included.
        initial_backoff: Seconds before the first retry; also the width of the jitter.
        max_backoff: Cap of the backoff in seconds (a longer ``retry_after`` still wins).
        jitter: Spread the waits at random, so clients that failed together do not
            retry together.
        sleep: How a wait passes (default ``anyio.sleep``); a test passes a recording
            fake to see the waits without spending them.

    Raises:
        ConfigError: ``max_attempts`` is not an integer of at least 1, a backoff is
            negative, or ``max_backoff`` is below ``initial_backoff``.
    """

    max_attempts: int = 3
    initial_backoff: float = 0.5
    max_backoff: float = 8.0
    jitter: bool = True
    sleep: Sleep = anyio.sleep

    def __post_init__(self) -> None:
        require_whole(self, "max_attempts", self.max_attempts, 1)
        require_at_least(self, 0, "initial_backoff", "max_backoff")
        enough = self.max_backoff >= self.initial_backoff
        require(self, "max_backoff", enough, "at least initial_backoff")

    @property
    def backoff(self) -> Backoff:
        """The wait schedule between attempts."""
        return Backoff(self.initial_backoff, self.max_backoff, self.jitter)


@dataclass(frozen=True, slots=True, kw_only=True)
class RunContext:
    """The read-only facts and ports of one run, shared by the engine's collaborators."""

    request: RunRequest
    meta: RunMeta
    abort: AbortSignal
    """The run's own abort signal (operations see it as ``ctx.abort``)."""
    session_key: OperationProfileSessionKey | None
    started_at: datetime
    profile_rank: Mapping[str, int]
    """Rank of each operation in profile order (``order``, then position)."""
    chats: ChatStore
    sessions: SessionStore
    archive: ArtifactArchive | None
    main_llm: MainLlm
    executor: Executor
    clock: Clock
    ids: IdFactory
    redactor: Redactor
    summarize: Callable[[dict[str, Any]], dict[str, Any]]
    window: HistoryWindow | None
    snapshot: SnapshotPolicy
    main_llm_retry: MainLlmRetry
    """How the main LLM call retries failures that came before any streamed text."""
    deadline: float | None
    """``anyio.current_time()`` value of the run's deadline (``deadline_ms``), if any."""
    tracing: Tracing | None = None
    """The runner's spans (``Runner(telemetry=...)``); None: no spans at all."""
    host: Mapping[str, Any] = field(default_factory=dict)
    """``request.host`` made read-only all the way down (a copy when it holds a dict or
    list): what operations, templates and the main LLM read, none of which can change
    the request or another reader's view."""

    @property
    def run_id(self) -> str:
        """The run."""
        return self.meta.run_id


class Cancellation:
    """The run's abort: its first reason, and the cancel scopes an abort cancels.

    Only the run's own abort (the caller's :class:`AbortSignal`, ``Runner.abort`` or the
    deadline) cancels operations and the main LLM: their scopes register here.
    """

    __slots__ = ("_scopes", "_unsubscribe", "reason")

    def __init__(self, signal: AbortSignal) -> None:
        self.reason: str | None = None
        self._scopes: set[anyio.CancelScope] = set()
        self._unsubscribe = signal.subscribe(self._on_abort)

    @property
    def aborted(self) -> bool:
        """True once the run was aborted."""
        return self.reason is not None

    def _on_abort(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason
        for scope in list(self._scopes):
            scope.cancel()

    def watch(self, scope: anyio.CancelScope) -> None:
        """Cancel ``scope`` on abort (at once when already aborted)."""
        self._scopes.add(scope)
        if self.reason is not None:
            scope.cancel()

    def unwatch(self, scope: anyio.CancelScope) -> None:
        """Stop watching ``scope``."""
        self._scopes.discard(scope)

    def close(self) -> None:
        """Stop listening to the signal (the run is over)."""
        self._unsubscribe()
