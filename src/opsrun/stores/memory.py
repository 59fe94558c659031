"""In-memory implementations of every store port: the default for tests and demos.

Each method completes without yielding to the event loop and takes a lock, so
concurrent runs (tasks or threads) see atomic reads and compare-and-set writes. Chat
branches are held with one ``anyio.Lock`` each, so the one-run-per-branch rule holds
among the runs of one event loop.
Records are immutable pydantic models, so nothing handed out can be mutated
behind the store's back.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import NamedTuple

import anyio

from ..errors import ArtifactConflict, NotFound, StoreError
from ..model import (
    Artifact,
    ArtifactVersion,
    ChatMessage,
    OperationProfile,
    OperationProfileSession,
    OperationProfileSessionKey,
    OperationRun,
    Run,
    RunEvent,
    RunStatus,
)

__all__ = [
    "ArchivedVersion",
    "InMemoryArchive",
    "InMemoryChatStore",
    "InMemoryProfileStore",
    "InMemoryRunStore",
    "InMemorySessionStore",
    "InMemoryStores",
]

_SessionKey = tuple[str, str, str, str]


class InMemoryProfileStore:
    """Profiles in a dict."""

    def __init__(self, profiles: Sequence[OperationProfile] = ()) -> None:
        self._profiles = {p.profile_id: p for p in profiles}
        self._lock = threading.Lock()

    async def get_profile(self, profile_id: str) -> OperationProfile:
        """Return the profile. Raises NotFound when missing."""
        with self._lock:
            try:
                return self._profiles[profile_id]
            except KeyError:
                raise NotFound(f"no profile {profile_id!r}") from None

    async def save_profile(self, profile: OperationProfile) -> None:
        """Insert or replace the profile."""
        with self._lock:
            self._profiles[profile.profile_id] = profile


class InMemorySessionStore:
    """Profile sessions and their latest artifacts, with compare-and-set writes."""

    def __init__(self) -> None:
        self._sessions: dict[_SessionKey, OperationProfileSession] = {}
        self._artifacts: dict[_SessionKey, dict[str, Artifact]] = {}
        self._lock = threading.Lock()

    async def get_or_create_session(
        self, key: OperationProfileSessionKey, now: datetime
    ) -> OperationProfileSession:
        """Return the session for ``key``, creating it when missing."""
        with self._lock:
            k = key.as_tuple()
            session = self._sessions.get(k)
            if session is None:
                session = OperationProfileSession(key=key, created_at=now)
                self._sessions[k] = session
                self._artifacts[k] = {}
            return session

    async def get_artifacts(self, key: OperationProfileSessionKey) -> dict[str, Artifact]:
        """Return a copy of the session's latest artifacts by tag."""
        with self._lock:
            return dict(self._artifacts.get(key.as_tuple(), {}))

    async def put_artifact(
        self,
        key: OperationProfileSessionKey,
        artifact: Artifact,
        *,
        expected_version: int | None,
    ) -> None:
        """Compare-and-set the latest artifact of its tag. Raises ArtifactConflict."""
        with self._lock:
            tags = self._artifacts.setdefault(key.as_tuple(), {})
            current = tags.get(artifact.tag)
            current_version = current.version if current is not None else None
            if current_version != expected_version:
                raise ArtifactConflict(
                    f"art.{artifact.tag} is at version {current_version}, "
                    f"the write was based on {expected_version}",
                    details={
                        "tag": artifact.tag,
                        "currentVersion": current_version,
                        "basedOnVersion": expected_version,
                    },
                )
            tags[artifact.tag] = artifact

    def sessions(self) -> list[OperationProfileSession]:
        """Every session, for tests and inspection."""
        with self._lock:
            return list(self._sessions.values())


class InMemoryChatStore:
    """Chat messages per (chat, branch), in insertion order."""

    def __init__(self) -> None:
        self._messages: dict[tuple[str, str], tuple[ChatMessage, int]] = {}
        """(chat, message id) -> the message and its position in its branch."""
        self._branches: dict[tuple[str, str], list[ChatMessage]] = {}
        self._lock = threading.Lock()

    async def history(self, chat_id: str, branch_id: str) -> list[ChatMessage]:
        """Return the branch's messages, oldest first."""
        with self._lock:
            return list(self._branches.get((chat_id, branch_id), ()))

    async def get_message(self, chat_id: str, message_id: str) -> ChatMessage:
        """Return one message. Raises NotFound when missing."""
        with self._lock:
            try:
                return self._messages[(chat_id, message_id)][0]
            except KeyError:
                raise NotFound(f"no message {message_id!r} in chat {chat_id!r}") from None

    async def save_message(self, message: ChatMessage) -> None:
        """Append a new message to its branch, or replace an existing one."""
        with self._lock:
            key = (message.chat_id, message.message_id)
            stored = self._messages.get(key)
            if stored is None:
                branch = self._branches.setdefault((message.chat_id, message.branch_id), [])
                position = len(branch)
                branch.append(message)
            else:
                old, position = stored
                self._branches[(old.chat_id, old.branch_id)][position] = message
            self._messages[key] = (message, position)


def _holds(held: Run, claimant: Run) -> bool:
    """True while ``held`` keeps its turn key against ``claimant``."""
    if held.status == RunStatus.ABORTED:
        return False
    lease = held.lease_expires_at
    return held.status != RunStatus.RUNNING or lease is None or lease >= claimant.started_at


class InMemoryRunStore:
    """Runs, operation runs and events; ``delete_run`` forgets everything of a run."""

    def __init__(self) -> None:
        self._runs: dict[str, Run] = {}
        self._operation_runs: dict[str, list[OperationRun]] = {}
        self._events: dict[str, list[RunEvent]] = {}
        self._by_key: dict[str, str] = {}
        self._lock = threading.Lock()
        self._branches: dict[tuple[str, str], tuple[anyio.Lock, int]] = {}
        """Per chat branch: its lock and how many runs hold or wait for it."""

    async def claim(self, run: Run) -> Run:
        """Insert ``run`` unless its dedupe key is held; return the stored run.

        A run that ended ``aborted``, or whose lease expired before ``run`` started,
        does not hold its key any more (see :class:`~opsrun.ports.RunStore`).
        """
        with self._lock:
            if run.dedupe_key:
                existing = self._by_key.get(run.dedupe_key)
                if existing is not None:
                    held = self._runs[existing]
                    if _holds(held, run):
                        return held
                    if held.status == RunStatus.RUNNING:
                        self._runs[existing] = held.model_copy(
                            update={"status": RunStatus.ABORTED, "abort_reason": "lease_expired"}
                        )
                self._by_key[run.dedupe_key] = run.run_id
            self._runs[run.run_id] = run
            self._operation_runs.setdefault(run.run_id, [])
            self._events.setdefault(run.run_id, [])
            return run

    async def save_run(self, run: Run, operation_runs: Sequence[OperationRun]) -> None:
        """Replace the run's record and operation runs."""
        with self._lock:
            self._runs[run.run_id] = run
            self._operation_runs[run.run_id] = list(operation_runs)

    async def renew_lease(self, run_id: str, until: datetime) -> None:
        """Extend a running run's lease (no effect on a finished or unknown run)."""
        with self._lock:
            run = self._runs.get(run_id)
            if run is not None and run.status == RunStatus.RUNNING:
                self._runs[run_id] = run.model_copy(update={"lease_expires_at": until})

    @asynccontextmanager
    async def hold_branch(
        self, chat_id: str, branch_id: str, *, wait: bool = True
    ) -> AsyncIterator[None]:
        """Hold the branch for one run (one event loop; see :class:`~opsrun.ports.RunStore`).

        Raises:
            StoreError: ``wait=False`` and the branch is held (code ``branch_busy``).
        """
        key = (chat_id, branch_id)
        lock, holders = self._branches.get(key, (None, 0))
        if lock is None:
            lock = anyio.Lock()
        if not wait and lock.locked():
            raise StoreError(
                f"chat {chat_id!r} branch {branch_id!r} already has an active run",
                code="branch_busy",
                details={"chat_id": chat_id, "branch_id": branch_id},
            )
        self._branches[key] = (lock, holders + 1)
        try:
            async with lock:
                yield
        finally:
            lock, holders = self._branches[key]
            if holders == 1:
                del self._branches[key]
            else:
                self._branches[key] = (lock, holders - 1)

    async def append_events(self, run_id: str, events: Sequence[RunEvent]) -> None:
        """Append events to the run's log."""
        with self._lock:
            self._events.setdefault(run_id, []).extend(events)

    async def get_run(self, run_id: str) -> tuple[Run, list[OperationRun]]:
        """Return the run and its operation runs. Raises NotFound when missing."""
        with self._lock:
            try:
                return self._runs[run_id], list(self._operation_runs.get(run_id, []))
            except KeyError:
                raise NotFound(f"no run {run_id!r}") from None

    async def events(self, run_id: str) -> list[RunEvent]:
        """Return the run's events in the order appended."""
        with self._lock:
            return list(self._events.get(run_id, []))

    async def delete_run(self, run_id: str) -> None:
        """Forget the run; no error when absent."""
        with self._lock:
            run = self._runs.pop(run_id, None)
            if run is not None and self._by_key.get(run.dedupe_key) == run_id:
                del self._by_key[run.dedupe_key]
            self._operation_runs.pop(run_id, None)
            self._events.pop(run_id, None)

    def run_ids(self) -> list[str]:
        """Every stored run id, for tests and inspection."""
        with self._lock:
            return list(self._runs)


class InMemoryArchive:
    """Pruned artifact versions, kept per session and tag (an ``ArtifactArchive``)."""

    def __init__(self) -> None:
        self._versions: dict[tuple[_SessionKey, str], list[ArchivedVersion]] = {}
        self._lock = threading.Lock()

    async def archive(
        self,
        key: OperationProfileSessionKey,
        tag: str,
        versions: Sequence[ArtifactVersion],
        *,
        run_id: str,
    ) -> None:
        """Keep ``versions``; archiving a version twice keeps it once."""
        with self._lock:
            kept = self._versions.setdefault((key.as_tuple(), tag), [])
            known = {item.version.version for item in kept}
            kept.extend(ArchivedVersion(v, run_id) for v in versions if v.version not in known)

    def versions(self, key: OperationProfileSessionKey, tag: str) -> list[ArchivedVersion]:
        """The archived versions of ``art.<tag>``, newest first."""
        with self._lock:
            kept = self._versions.get((key.as_tuple(), tag), [])
            return sorted(kept, key=lambda item: item.version.version, reverse=True)


class ArchivedVersion(NamedTuple):
    """One archived artifact version and the run whose write pruned it."""

    version: ArtifactVersion
    """The pruned version."""
    run_id: str
    """The run that pruned it."""


class InMemoryStores:
    """All in-memory stores together: ``Runner(stores=InMemoryStores(...))``.

    ``archive`` is an :class:`InMemoryArchive` that keeps the artifact versions retention
    prunes; the runner uses it along with the other stores.
    """

    def __init__(self, profiles: Sequence[OperationProfile] = ()) -> None:
        self.profiles = InMemoryProfileStore(profiles)
        self.sessions = InMemorySessionStore()
        self.chats = InMemoryChatStore()
        self.runs = InMemoryRunStore()
        self.archive = InMemoryArchive()
