"""In-memory implementations of every store port: the default for tests and demos.

Each method completes without yielding to the event loop and takes a lock, so
concurrent runs (tasks or threads) see atomic reads and compare-and-set writes. Chat
branch holds and :meth:`InMemoryRunStore.follow` wake their waiters in whatever event
loop they wait, so the stores also serve several threads that each run their own event
loop (``asyncio.run`` per request in a threaded web server).

Stored records are snapshots. Records are frozen pydantic models; the dicts and lists
inside them (artifact values, message ``meta`` and ``blocks``, profile ``params``) are
copied on save into read-only ones that refuse changes with ``TypeError``. So changing
an object after saving it changes nothing stored, and a record the store returns cannot
be changed in place: change a copy (``copy.deepcopy`` gives plain dicts and lists) and
save that. Reads hand the stored records out as they are, without copying, however
long a chat grows. The runner's own records (``Run``, ``OperationRun`` and events) are
kept as given, which keeps a run cheap: the runner builds a new record for every save
and never changes one it saved; do not change the dicts inside one you read.
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_right
from collections import deque
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime
from operator import attrgetter

from ..errors import ArtifactConflict, NotFound
from ..model import (
    ArchivedVersion,
    Artifact,
    ArtifactVersion,
    ChatMessage,
    ChatSummary,
    OperationProfile,
    OperationProfileSession,
    OperationProfileSessionKey,
    OperationRun,
    Page,
    Run,
    RunEvent,
    RunFinished,
    RunStatus,
)
from ..model._build import Builder
from ._branch_hold import branch_busy
from ._cursor import check_limit, check_prune, decode_cursor, encode_cursor, micros
from ._frozen import FROZEN_EMPTY, freeze_model
from ._wakeup import Wakeup

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
_SESSION = Builder(OperationProfileSession).shape(("key", "created_at"))
_seq = attrgetter("seq")


class InMemoryProfileStore:
    """Profiles in a dict."""

    def __init__(self, profiles: Sequence[OperationProfile] = ()) -> None:
        self._profiles = {p.profile_id: freeze_model(p) for p in profiles}
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
        profile = freeze_model(profile)
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
                # Validated unless the values are already of the fields' own types.
                trusted = type(key) is OperationProfileSessionKey and type(now) is datetime
                values = {"key": key, "created_at": now}
                session = _SESSION.build(values) if trusted else OperationProfileSession(**values)
                session.__dict__["meta"] = FROZEN_EMPTY  # a new record: no copy needed
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
        artifact = freeze_model(artifact)
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
        self._branches: dict[tuple[str, str], dict[str, ChatMessage]] = {}
        """(chat, branch) -> its messages by id, in branch order."""
        self._chats: dict[str, dict[str, str]] = {}
        """Chat -> message id -> the branch holding it, in the order messages were added."""
        self._written: dict[str, tuple[int, float]] = {}
        """Chat -> the store's write count and clock (unix seconds) at its last write."""
        self._writes = 0
        self._clock = 0.0
        self._lock = threading.Lock()

    async def history(self, chat_id: str, branch_id: str) -> list[ChatMessage]:
        """Return the branch's messages, oldest first."""
        with self._lock:
            branch = self._branches.get((chat_id, branch_id))
            return [] if branch is None else list(branch.values())

    async def get_message(self, chat_id: str, message_id: str) -> ChatMessage:
        """Return one message. Raises NotFound when missing."""
        with self._lock:
            home = self._chats.get(chat_id, {}).get(message_id)
            if home is None:
                raise NotFound(f"no message {message_id!r} in chat {chat_id!r}")
            return self._branches[(chat_id, home)][message_id]

    async def save_message(self, message: ChatMessage) -> None:
        """Append a new message to its branch, or replace an existing one in place."""
        message = freeze_model(message)
        chat_id, message_id = message.chat_id, message.message_id
        with self._lock:
            homes = self._chats.get(chat_id)
            if homes is None:
                homes = self._chats[chat_id] = {}
            home = homes.get(message_id)
            if home is None:
                home = homes[message_id] = message.branch_id
            branch = self._branches.get((chat_id, home))
            if branch is None:
                branch = self._branches[(chat_id, home)] = {}
            branch[message_id] = message
            self._written[chat_id] = self._write()

    async def delete_message(self, chat_id: str, message_id: str) -> None:
        """Remove the message from its branch. Raises NotFound when missing."""
        with self._lock:
            homes = self._chats.get(chat_id, {})
            home = homes.pop(message_id, None)
            if home is None:
                raise NotFound(f"no message {message_id!r} in chat {chat_id!r}")
            branch = self._branches[(chat_id, home)]
            del branch[message_id]
            if not branch:
                del self._branches[(chat_id, home)]
            if homes:
                self._written[chat_id] = self._write()
            else:  # no message left: the chat leaves the chat list
                del self._chats[chat_id], self._written[chat_id]

    async def list_chats(self, *, limit: int = 50, cursor: str | None = None) -> Page[ChatSummary]:
        """A page of the chats with messages, most recently written first.

        Raises:
            ConfigError: ``limit`` is below 1.
            StoreError: ``cursor`` is not a cursor of this query (code ``bad_cursor``).
        """
        check_limit(limit)
        (before,) = decode_cursor("chats", cursor, int) if cursor is not None else (None,)
        with self._lock:
            chats = [
                (write, at, chat_id)
                for chat_id, (write, at) in self._written.items()
                if before is None or write < before
            ]
            chats.sort(reverse=True)
            more = len(chats) > limit
            del chats[limit:]
            page = tuple(
                ChatSummary(
                    chat_id=chat_id,
                    message_count=len(self._chats[chat_id]),
                    last_message_id=next(reversed(self._chats[chat_id])),
                    updated_at=datetime.fromtimestamp(at, UTC),
                )
                for _, at, chat_id in chats
            )
        next_cursor = encode_cursor("chats", chats[-1][0]) if more else None
        return Page[ChatSummary](items=page, next_cursor=next_cursor)

    def _write(self) -> tuple[int, float]:
        """Count a write (under the lock): its number and time, never before the last."""
        self._writes += 1
        now = time.time()
        if now > self._clock:
            self._clock = now
        return self._writes, self._clock


def _holds(held: Run, claimant: Run) -> bool:
    """True while ``held`` keeps its turn key against ``claimant``."""
    if held.status == RunStatus.ABORTED:
        return False
    lease = held.lease_expires_at
    return held.status != RunStatus.RUNNING or lease is None or lease >= claimant.started_at


def _taken_over(run: Run) -> bool:
    """True when the run's turn went to a retry after its process died."""
    return run.status == RunStatus.ABORTED and run.abort_reason == "lease_expired"


def _newest_first(run: Run) -> tuple[int, str]:
    """The sort key of :meth:`InMemoryRunStore.list_runs` (used with ``reverse=True``)."""
    return micros(run.started_at), run.run_id


class InMemoryRunStore:
    """Runs, operation runs and events; ``delete_run`` forgets everything of a run."""

    def __init__(self) -> None:
        self._runs: dict[str, Run] = {}
        self._operation_runs: dict[str, list[OperationRun]] = {}
        self._events: dict[str, list[RunEvent]] = {}
        self._by_key: dict[str, str] = {}
        self._by_chat: dict[str, dict[str, None]] = {}
        self._followers: dict[str, list[Wakeup]] = {}
        """Run id -> what its followers wait on; set (and dropped) on a change."""
        self._lock = threading.Lock()
        self._branches: dict[tuple[str, str], deque[Wakeup]] = {}
        """Held chat branches, each with the runs waiting for it, in order."""

    async def claim(self, run: Run) -> Run:
        """Insert ``run`` unless its dedupe key is held; return the stored run.

        A run that ended ``aborted``, or whose lease expired before ``run`` started,
        does not hold its key any more (see :class:`~opsrun.ports.RunStore`).
        """
        taken_over: str | None = None
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
                        taken_over = existing
                self._by_key[run.dedupe_key] = run.run_id
            self._put(run)
            self._operation_runs.setdefault(run.run_id, [])
            self._events.setdefault(run.run_id, [])
        if taken_over is not None:
            self._wake(taken_over)
        return run

    async def save_run(self, run: Run, operation_runs: Sequence[OperationRun]) -> None:
        """Replace the run's record and operation runs."""
        records = list(operation_runs)
        with self._lock:
            self._put(run)
            self._operation_runs[run.run_id] = records

    async def renew_lease(self, run_id: str, until: datetime) -> None:
        """Extend a running run's lease (no effect on a finished or unknown run)."""
        with self._lock:
            run = self._runs.get(run_id)
            if run is not None and run.status == RunStatus.RUNNING:
                self._runs[run_id] = run.model_copy(update={"lease_expires_at": until})

    def hold_branch(
        self, chat_id: str, branch_id: str, *, wait: bool = True
    ) -> AbstractAsyncContextManager[object]:
        """Hold the branch for one run (see :class:`~opsrun.ports.RunStore`).

        Entering a free branch does not wait; holders queue first come, first served,
        in any thread and event loop.

        Raises:
            StoreError: ``wait=False`` and the branch is held (code ``branch_busy``).
        """
        return _BranchHold(self._branches, self._lock, (chat_id, branch_id), wait)

    async def append_events(self, run_id: str, events: Sequence[RunEvent]) -> None:
        """Append events to the run's log; an event whose ``seq`` is stored is kept once."""
        if not events:
            return
        with self._lock:
            log = self._events.get(run_id)
            if log is None:
                log = self._events[run_id] = []
            if not log or events[0].seq > log[-1].seq:
                log.extend(events)  # the usual case: the next events (a batch is in seq order)
            else:  # a retried batch
                for event in events:
                    _insert_missing(log, event)
            changed = self._followers.pop(run_id, None) if self._followers else None
        if changed is not None:
            _wake_all(changed)

    def append_event_now(self, run_id: str, event: RunEvent) -> None:
        """:meth:`append_events` of one event, without awaiting: with no event sink, the
        runner appends each event of a run as it is emitted, with no task to deliver them."""
        with self._lock:
            log = self._events.get(run_id)
            if log is None:
                log = self._events[run_id] = []
            if not log or event.seq > log[-1].seq:
                log.append(event)  # the usual case: the next event
            else:
                _insert_missing(log, event)
            changed = self._followers.pop(run_id, None) if self._followers else None
        if changed is not None:
            _wake_all(changed)

    async def get_run(self, run_id: str) -> tuple[Run, list[OperationRun]]:
        """Return the run and its operation runs. Raises NotFound when missing."""
        with self._lock:
            try:
                return self._runs[run_id], list(self._operation_runs.get(run_id, []))
            except KeyError:
                raise NotFound(f"no run {run_id!r}") from None

    async def events(self, run_id: str) -> list[RunEvent]:
        """Return the run's events in ``seq`` order."""
        with self._lock:
            return list(self._events.get(run_id, []))

    async def delete_run(self, run_id: str) -> None:
        """Forget the run; no error when absent."""
        with self._lock:
            self._forget(run_id)
        self._wake(run_id)

    async def list_runs(
        self, chat_id: str, *, limit: int = 50, cursor: str | None = None
    ) -> Page[Run]:
        """A page of the chat's runs, newest first (``started_at``, then run id).

        Raises:
            ConfigError: ``limit`` is below 1.
            StoreError: ``cursor`` is not a cursor of this query (code ``bad_cursor``).
        """
        check_limit(limit)
        after = decode_cursor("runs", cursor, int, str) if cursor is not None else None
        with self._lock:
            runs = [self._runs[run_id] for run_id in self._by_chat.get(chat_id, ())]
        if after is not None:
            runs = [run for run in runs if _newest_first(run) < after]
        runs.sort(key=_newest_first, reverse=True)
        more = len(runs) > limit
        next_cursor = encode_cursor("runs", *_newest_first(runs[limit - 1])) if more else None
        return Page[Run](items=tuple(runs[:limit]), next_cursor=next_cursor)

    async def prune_runs(
        self, *, older_than: datetime | None = None, keep_last: int | None = None
    ) -> int:
        """Delete the finished runs every given rule selects; return how many.

        Raises:
            ConfigError: neither rule is given, or ``keep_last`` is below 0.
        """
        check_prune(older_than, keep_last)
        before = micros(older_than) if older_than is not None else None
        with self._lock:
            doomed: list[str] = []
            for run_ids in self._by_chat.values():
                runs = sorted((self._runs[i] for i in run_ids), key=_newest_first, reverse=True)
                for rank, run in enumerate(runs):
                    if (
                        run.status != RunStatus.RUNNING
                        and (before is None or micros(run.started_at) < before)
                        and (keep_last is None or rank >= keep_last)
                    ):
                        doomed.append(run.run_id)
            for run_id in doomed:
                self._forget(run_id)
        for run_id in doomed:
            self._wake(run_id)
        return len(doomed)

    async def follow(self, run_id: str, *, after_seq: int = 0) -> AsyncIterator[RunEvent]:
        """Yield the run's events after ``after_seq``, then new ones as they are appended,
        until ``run.finished`` (see :class:`~opsrun.ports.RunStore`).

        An append wakes the followers at once; nothing polls.

        Raises:
            NotFound: there is no such run, or it was deleted while followed.
        """
        seen = after_seq
        while True:
            with self._lock:
                run = self._runs.get(run_id)
                if run is None:
                    raise NotFound(f"no run {run_id!r}")
                log = self._events.get(run_id, [])
                batch = log[bisect_right(log, seen, key=_seq) :]
                # run.finished is a run's last event: once stored, nothing follows it.
                finished = bool(log) and isinstance(log[-1], RunFinished)
                changed: Wakeup | None = None
                if not batch and not finished and not _taken_over(run):
                    changed = Wakeup()
                    self._followers.setdefault(run_id, []).append(changed)
            for event in batch:
                yield event
                seen = event.seq
                if isinstance(event, RunFinished):
                    return
            if changed is not None:
                await changed.wait()
            elif not batch:  # finished before after_seq, or taken over: nothing will come
                return

    def run_ids(self) -> list[str]:
        """Every stored run id, for tests and inspection."""
        with self._lock:
            return list(self._runs)

    def _put(self, run: Run) -> None:
        """Store the run's record (under the lock)."""
        run_id = run.run_id
        stored = self._runs.get(run_id)
        self._runs[run_id] = run
        if stored is None or stored.chat_id != run.chat_id:
            if stored is not None:
                self._unlist(stored)
            chat_runs = self._by_chat.get(run.chat_id)
            if chat_runs is None:
                chat_runs = self._by_chat[run.chat_id] = {}
            chat_runs[run_id] = None

    def _unlist(self, run: Run) -> None:
        """Drop the run from its chat's index (under the lock)."""
        chat_runs = self._by_chat[run.chat_id]
        del chat_runs[run.run_id]
        if not chat_runs:
            del self._by_chat[run.chat_id]

    def _forget(self, run_id: str) -> None:
        """Drop everything of the run (under the lock)."""
        run = self._runs.pop(run_id, None)
        if run is not None:
            if self._by_key.get(run.dedupe_key) == run_id:
                del self._by_key[run.dedupe_key]
            self._unlist(run)
        self._operation_runs.pop(run_id, None)
        self._events.pop(run_id, None)

    def _wake(self, run_id: str) -> None:
        """Wake the run's followers (outside the lock)."""
        with self._lock:
            changed = self._followers.pop(run_id, None)
        if changed is not None:
            _wake_all(changed)


def _insert_missing(log: list[RunEvent], event: RunEvent) -> None:
    """Insert ``event`` in ``log`` (in ``seq`` order) unless an event of its ``seq`` is there."""
    at = bisect_right(log, event.seq, key=_seq)
    if not (at and log[at - 1].seq == event.seq):
        log.insert(at, event)


def _wake_all(wakeups: list[Wakeup]) -> None:
    for wakeup in wakeups:
        wakeup.set()


class _BranchHold:
    """Holds one chat branch while entered (:meth:`InMemoryRunStore.hold_branch`)."""

    __slots__ = ("_branches", "_key", "_lock", "_wait")

    def __init__(
        self,
        branches: dict[tuple[str, str], deque[Wakeup]],
        lock: threading.Lock,
        key: tuple[str, str],
        wait: bool,
    ) -> None:
        self._branches = branches
        self._lock = lock
        self._key = key
        self._wait = wait

    async def __aenter__(self) -> None:
        with self._lock:
            waiters = self._branches.get(self._key)
            if waiters is None:  # free: held at once
                self._branches[self._key] = deque()
                return
            if not self._wait:
                raise branch_busy(*self._key)
            turn = Wakeup()
            waiters.append(turn)
        try:
            await turn.wait()
        except BaseException:
            with self._lock:
                handed = turn.fired  # handed the branch while cancelled: hand it on
                if not handed:
                    waiters.remove(turn)
            if handed:
                self._release()
            raise

    async def __aexit__(self, *exc_info: object) -> None:
        self._release()

    def _release(self) -> None:
        """Hand the branch to the next waiter, or free it."""
        with self._lock:
            waiters = self._branches[self._key]
            if not waiters:
                del self._branches[self._key]
                return
            turn = waiters.popleft()
            turn.fired = True  # under the lock: a cancelled waiter sees it was handed
        turn.set()


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
        frozen = [freeze_model(v) for v in versions]
        with self._lock:
            kept = self._versions.setdefault((key.as_tuple(), tag), [])
            known = {item.version.version for item in kept}
            for version in frozen:
                if version.version not in known:
                    known.add(version.version)
                    kept.append(ArchivedVersion(version=version, run_id=run_id))

    async def versions(self, key: OperationProfileSessionKey, tag: str) -> list[ArchivedVersion]:
        """The archived versions of ``art.<tag>``, newest first."""
        with self._lock:
            kept = self._versions.get((key.as_tuple(), tag), [])
            return sorted(kept, key=lambda item: item.version.version, reverse=True)


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
