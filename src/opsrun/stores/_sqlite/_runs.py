"""The SQLite run store: runs, operation runs, turn keys, leases, events, branch holds."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from functools import partial

import anyio
from pydantic import TypeAdapter

from ...errors import NotFound
from ...model import (
    OperationRun,
    Page,
    Run,
    RunEvent,
    RunEventAdapter,
    RunFinished,
    RunStatus,
)
from .._cursor import check_limit, check_prune, decode_cursor, encode_cursor, micros
from .._json import record_json, values_json
from ._branches import BranchHolds
from ._db import Database

__all__ = ["SqliteRunStore"]

_OPERATION_RUNS: TypeAdapter[list[OperationRun]] = TypeAdapter(list[OperationRun])

FOLLOW_POLL = (0.01, 0.05)
"""Seconds between a follower's reads: the first after a new event, and the longest."""
FOLLOW_BATCH = 500
"""The most events a follower reads at once."""

_MAX_SEQ = 2**63 - 1
"""The largest ``seq`` SQLite can compare with: a larger ``after_seq`` means none."""


def _holds(held: Run, claimant: Run) -> bool:
    """True while ``held`` keeps its turn key against ``claimant`` (see ``RunStore.claim``)."""
    if held.status == RunStatus.ABORTED:
        return False
    lease = held.lease_expires_at
    return held.status != RunStatus.RUNNING or lease is None or lease >= claimant.started_at


def _save_run(conn: sqlite3.Connection, run: Run, operation_runs: str) -> None:
    """Replace ``run``'s record and its operation runs.

    The usual case, a stored run whose keys stay, rewrites only the changing columns,
    so the indexes on the keys are left as they are (fewer pages to write).
    """
    updated = conn.execute(
        "UPDATE runs SET status = ?, data = ?, operation_runs = ? WHERE run_id = ?"
        " AND chat_id = ? AND branch_id = ? AND dedupe_key = ? AND started_us = ?",
        (
            run.status.value,
            record_json(run),
            operation_runs,
            run.run_id,
            run.chat_id,
            run.branch_id,
            run.dedupe_key,
            micros(run.started_at),
        ),
    ).rowcount
    if not updated:
        _put_run(conn, run, operation_runs)


def _put_run(conn: sqlite3.Connection, run: Run, operation_runs: str | None = None) -> None:
    """Insert or replace ``run``'s record; its operation runs too when given."""
    conn.execute(
        "INSERT INTO runs (run_id, chat_id, branch_id, dedupe_key, status, started_us, data)"
        " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (run_id) DO UPDATE SET"
        " chat_id = excluded.chat_id, branch_id = excluded.branch_id,"
        " dedupe_key = excluded.dedupe_key, status = excluded.status,"
        " started_us = excluded.started_us, data = excluded.data",
        (
            run.run_id,
            run.chat_id,
            run.branch_id,
            run.dedupe_key,
            run.status.value,
            micros(run.started_at),
            record_json(run),
        ),
    )
    if operation_runs is not None:
        conn.execute(
            "UPDATE runs SET operation_runs = ? WHERE run_id = ?", (operation_runs, run.run_id)
        )


def _claim(run: Run, conn: sqlite3.Connection) -> Run:
    if run.dedupe_key:
        row = conn.execute(
            "SELECT runs.data FROM turn_keys JOIN runs ON runs.run_id = turn_keys.run_id"
            " WHERE turn_keys.dedupe_key = ?",
            (run.dedupe_key,),
        ).fetchone()
        if row is not None:
            held = Run.model_validate_json(row[0])
            if _holds(held, run):
                return held
            if held.status == RunStatus.RUNNING:  # its owner stopped renewing the lease
                aborted = {"status": RunStatus.ABORTED, "abort_reason": "lease_expired"}
                _put_run(conn, held.model_copy(update=aborted))
        conn.execute(
            "INSERT OR REPLACE INTO turn_keys (dedupe_key, run_id) VALUES (?, ?)",
            (run.dedupe_key, run.run_id),
        )
    _put_run(conn, run)
    return run


def _poll(run_id: str, seen: int, conn: sqlite3.Connection) -> tuple[list[RunEvent], bool] | None:
    """The run's events after ``seen`` (a batch), and whether no more will come once
    they are read; None when there is no such run."""
    run = conn.execute(
        "SELECT status, json_extract(data, '$.abortReason') FROM runs WHERE run_id = ?",
        (run_id,),
    ).fetchone()
    if run is None:
        return None
    rows = conn.execute(
        "SELECT data FROM events WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?",
        (run_id, seen, FOLLOW_BATCH),
    ).fetchall()
    events = [RunEventAdapter.validate_json(data) for (data,) in rows]
    if events:
        return events, False
    # run.finished is a run's last event; a run whose turn was taken over never finishes.
    # Each statement sees the database as it is then: a batch committed since the read
    # above is not over yet, it is read on the next poll.
    last = conn.execute(
        "SELECT seq, json_extract(data, '$.type') FROM events WHERE run_id = ?"
        " ORDER BY seq DESC LIMIT 1",
        (run_id,),
    ).fetchone()
    if last is not None and last[0] > seen:
        return [], False
    finished = last is not None and last[1] == "run.finished"
    taken_over = tuple(run) == (RunStatus.ABORTED.value, "lease_expired")
    return [], finished or taken_over


def _renew_lease(run_id: str, until: datetime, conn: sqlite3.Connection) -> None:
    row = conn.execute(
        "SELECT data FROM runs WHERE run_id = ? AND status = ?", (run_id, RunStatus.RUNNING.value)
    ).fetchone()
    if row is not None:
        run = Run.model_validate_json(row[0])
        _put_run(conn, run.model_copy(update={"lease_expires_at": until}))


class SqliteRunStore:
    """Runs, their operation runs and events; chat branches held across processes."""

    def __init__(self, db: Database, *, branch_lease_seconds: float) -> None:
        self._db = db
        self._branches = BranchHolds(db, lease_seconds=branch_lease_seconds)

    async def claim(self, run: Run) -> Run:
        """Insert ``run`` unless a run with its non-empty ``dedupe_key`` holds it.

        Returns ``run`` or the earlier run that holds the key. A run that ended
        ``aborted``, or that is running with a lease that expired before ``run`` started,
        does not hold it: the latter is stored ``aborted`` (``lease_expired``). One
        ``BEGIN IMMEDIATE`` transaction, so concurrent claims in any process have one
        winner.

        Raises:
            StoreError: the database failed.
        """
        return await self._db.write(lambda conn: _claim(run, conn))

    async def renew_lease(self, run_id: str, until: datetime) -> None:
        """Extend a running run's lease to ``until`` (no effect on a finished or unknown run).

        Raises:
            StoreError: the database failed.
        """
        await self._db.write(lambda conn: _renew_lease(run_id, until, conn))

    async def save_run(self, run: Run, operation_runs: Sequence[OperationRun]) -> None:
        """Replace the run's record and its operation runs.

        Raises:
            StoreError: the database failed.
        """
        records = values_json(_OPERATION_RUNS, list(operation_runs))
        await self._db.write(lambda conn: _save_run(conn, run, records))

    def hold_branch(
        self, chat_id: str, branch_id: str, *, wait: bool = True
    ) -> AbstractAsyncContextManager[None]:
        """Hold a chat branch for one run, in every process that opened the file.

        Entering waits (first come, first served) while another holder has the branch;
        with ``wait=False`` it raises at once instead. The hold is a lease the holder
        renews while the block runs; if its process dies, the branch is free once the
        lease (``branch_lease_seconds``) runs out. Closing the stores frees the branch at
        once, also while the block still runs.

        Raises:
            StoreError: ``wait=False`` and the branch is held (code ``branch_busy``), or
                the database failed.
        """
        return self._branches.hold(chat_id, branch_id, wait=wait)

    async def append_events(self, run_id: str, events: Sequence[RunEvent]) -> None:
        """Append events to the run's log; an event whose ``seq`` is stored is kept once.

        Raises:
            StoreError: the database failed.
        """
        rows = [(run_id, e.seq, values_json(RunEventAdapter, e)) for e in events]

        def write(conn: sqlite3.Connection) -> None:
            conn.executemany(
                "INSERT OR IGNORE INTO events (run_id, seq, data) VALUES (?, ?, ?)", rows
            )

        await self._db.write(write)

    async def get_run(self, run_id: str) -> tuple[Run, list[OperationRun]]:
        """Return the run and its operation runs.

        Raises:
            NotFound: there is no such run (code ``not_found``).
            StoreError: the database failed.
        """

        def read(conn: sqlite3.Connection) -> tuple[Run, list[OperationRun]] | None:
            row = conn.execute(
                "SELECT data, operation_runs FROM runs WHERE run_id = ?", (run_id,)
            ).fetchone()
            if row is None:
                return None
            return Run.model_validate_json(row[0]), _OPERATION_RUNS.validate_json(row[1])

        found = await self._db.read(read)
        if found is None:
            raise NotFound(f"no run {run_id!r}")
        return found

    async def events(self, run_id: str) -> list[RunEvent]:
        """Return the run's events in ``seq`` order (empty when none).

        Raises:
            StoreError: the database failed.
        """

        def read(conn: sqlite3.Connection) -> list[RunEvent]:
            rows = conn.execute(
                "SELECT data FROM events WHERE run_id = ? ORDER BY seq", (run_id,)
            ).fetchall()
            return [RunEventAdapter.validate_json(data) for (data,) in rows]

        return await self._db.read(read)

    async def delete_run(self, run_id: str) -> None:
        """Forget the run, its operation runs, events and turn key (no error when absent).

        Raises:
            StoreError: the database failed.
        """

        def write(conn: sqlite3.Connection) -> None:
            conn.execute("DELETE FROM runs WHERE run_id = ?", (run_id,))
            conn.execute("DELETE FROM events WHERE run_id = ?", (run_id,))
            conn.execute("DELETE FROM turn_keys WHERE run_id = ?", (run_id,))

        await self._db.write(write)

    async def list_runs(
        self, chat_id: str, *, limit: int = 50, cursor: str | None = None
    ) -> Page[Run]:
        """Return a page of the chat's runs, newest first (``started_at``, then run id).

        Raises:
            ConfigError: ``limit`` is below 1.
            StoreError: ``cursor`` is not a cursor of this query (code ``bad_cursor``),
                or the database failed.
        """
        check_limit(limit)
        after = decode_cursor("runs", cursor, int, str) if cursor is not None else None

        def read(conn: sqlite3.Connection) -> list[tuple[str, int, str]]:
            if after is None:
                return conn.execute(
                    "SELECT data, started_us, run_id FROM runs WHERE chat_id = ?"
                    " ORDER BY started_us DESC, run_id DESC LIMIT ?",
                    (chat_id, limit + 1),
                ).fetchall()
            return conn.execute(
                "SELECT data, started_us, run_id FROM runs"
                " WHERE chat_id = ? AND (started_us, run_id) < (?, ?)"
                " ORDER BY started_us DESC, run_id DESC LIMIT ?",
                (chat_id, *after, limit + 1),
            ).fetchall()

        rows = await self._db.read(read)
        runs = tuple(Run.model_validate_json(data) for data, _, _ in rows[:limit])
        more = len(rows) > limit
        next_cursor = encode_cursor("runs", *rows[limit - 1][1:]) if more else None
        return Page[Run](items=runs, next_cursor=next_cursor)

    async def prune_runs(
        self, *, older_than: datetime | None = None, keep_last: int | None = None
    ) -> int:
        """Delete the finished runs every given rule selects, with their operation runs,
        events and turn keys, in one transaction; return how many.

        Raises:
            ConfigError: neither rule is given, or ``keep_last`` is below 0.
            StoreError: the database failed.
        """
        check_prune(older_than, keep_last)
        before = micros(older_than) if older_than is not None else None

        def write(conn: sqlite3.Connection) -> int:
            doomed = conn.execute(
                "SELECT run_id FROM (SELECT run_id, status, started_us, ROW_NUMBER() OVER"
                " (PARTITION BY chat_id ORDER BY started_us DESC, run_id DESC) - 1 AS rank"
                " FROM runs) WHERE status != ? AND (? IS NULL OR started_us < ?)"
                " AND (? IS NULL OR rank >= ?)",
                (RunStatus.RUNNING.value, before, before, keep_last, keep_last),
            ).fetchall()
            for table in ("runs", "events", "turn_keys"):
                conn.executemany(f"DELETE FROM {table} WHERE run_id = ?", doomed)
            return len(doomed)

        return await self._db.write(write)

    async def follow(self, run_id: str, *, after_seq: int = 0) -> AsyncIterator[RunEvent]:
        """Yield the run's events after ``after_seq``, then new ones as they are appended,
        until ``run.finished`` (see :class:`~opsrun.ports.RunStore`).

        Polls the file, so it sees runs of every process: every 10 ms while events
        arrive, backing off to every 50 ms while the run is quiet. An event reaches the
        follower at most about 50 ms after it was stored.

        Raises:
            NotFound: there is no such run, or it was deleted while followed.
            StoreError: the database failed.
        """
        seen = min(max(after_seq, -1), _MAX_SEQ)  # SQLite binds 64-bit integers only
        delay, longest = FOLLOW_POLL
        while True:
            found = await self._db.read(partial(_poll, run_id, seen))
            if found is None:
                raise NotFound(f"no run {run_id!r}")
            events, over = found
            for event in events:
                yield event
                seen = event.seq
                if isinstance(event, RunFinished):
                    return
            if events:
                delay = FOLLOW_POLL[0]
            elif over:
                return
            else:
                await anyio.sleep(delay)
                delay = min(delay * 2, longest)
