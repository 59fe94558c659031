"""What every part of the engine reads about one run, and how an abort reaches it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import anyio

from .._redact import Redactor
from ..model import OperationProfileSessionKey, RunRequest
from ..operations import AbortSignal, RunMeta
from ..ports import ArtifactArchive, ChatStore, Clock, IdFactory, MainLlm, SessionStore
from ..prompt import HistoryWindow, SnapshotPolicy
from ._executor import Executor

__all__ = ["Cancellation", "RunContext"]


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
