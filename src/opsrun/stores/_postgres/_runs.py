"""The PostgreSQL run store: runs, operation runs, turn keys, leases, events, branch holds."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime, timedelta

from pydantic import TypeAdapter

from ...errors import NotFound
from ...model import OperationRun, Page, Run, RunEvent, RunEventAdapter, RunStatus
from ...model._base import mended
from .._cursor import check_limit, check_prune, decode_cursor, encode_cursor, micros
from .._json import record_json, values_json
from ._branches import BranchHolds
from ._db import Database
from ._follow import RunState, channel, follow, notify
from ._schema import Conn, statement

__all__ = ["PostgresRunStore"]

_OPERATION_RUNS: TypeAdapter[list[OperationRun]] = TypeAdapter(list[OperationRun])
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_LAST = (datetime.max.replace(tzinfo=UTC), "\U0010ffff")
"""A position after every run of :meth:`PostgresRunStore.list_runs` (ids are code points
below it; no real run starts at the end of time)."""


def _utc(moment: datetime) -> datetime:
    """``moment`` with a time zone (a naive time counts as UTC, as in the cursors)."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _holds(held: Run, claimant: Run) -> bool:
    """True while ``held`` keeps its turn key against ``claimant`` (see ``RunStore.claim``)."""
    if held.status == RunStatus.ABORTED:
        return False
    lease = held.lease_expires_at
    return held.status != RunStatus.RUNNING or lease is None or lease >= claimant.started_at


def _column_text(text: str | None) -> str | None:
    """``text`` for a ``text`` column, which cannot hold NUL or a lone UTF-16 surrogate:
    each is replaced by U+FFFD."""
    return None if text is None else mended(text).replace("\x00", "\ufffd")


def _run_row(run: Run) -> tuple[object, ...]:
    """The columns of ``run``'s row but its operation runs, in table order."""
    return (
        run.run_id,
        run.chat_id,
        run.branch_id,
        run.dedupe_key,
        run.status.value,
        # The abort reason is free text; its column is a copy that only the follow check
        # reads (is it ``lease_expired``?), so it keeps NUL as U+FFFD. The record (a
        # `json` column, which keeps the escape \u0000) holds the reason as given, and
        # every read returns the record's.
        _column_text(run.abort_reason),
        _utc(run.started_at),
        record_json(run),
    )


class _Sql:
    """The run store's statements, composed once for its schema."""

    def __init__(self, schema: str) -> None:
        self.put_run = statement(
            schema,
            "INSERT INTO {s}.runs (run_id, chat_id, branch_id, dedupe_key, status,"
            " abort_reason, started_at, data) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
            " ON CONFLICT (run_id) DO UPDATE SET chat_id = excluded.chat_id,"
            " branch_id = excluded.branch_id, dedupe_key = excluded.dedupe_key,"
            " status = excluded.status, abort_reason = excluded.abort_reason,"
            " started_at = excluded.started_at, data = excluded.data",
        )
        # The run with its operation runs, in one statement (atomic without a transaction).
        self.save_run = statement(
            schema,
            "INSERT INTO {s}.runs (run_id, chat_id, branch_id, dedupe_key, status,"
            " abort_reason, started_at, data, operation_runs)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)"
            " ON CONFLICT (run_id) DO UPDATE SET chat_id = excluded.chat_id,"
            " branch_id = excluded.branch_id, dedupe_key = excluded.dedupe_key,"
            " status = excluded.status, abort_reason = excluded.abort_reason,"
            " started_at = excluded.started_at, data = excluded.data,"
            " operation_runs = excluded.operation_runs",
        )
        # A first claim of a turn key: takes the key and inserts the run in one statement;
        # no row when the key is taken (the claim then checks its holder).
        self.claim_new_key = statement(
            schema,
            "WITH taken AS (INSERT INTO {s}.turn_keys (dedupe_key, run_id) VALUES (%s, %s)"
            " ON CONFLICT DO NOTHING RETURNING run_id)"
            " INSERT INTO {s}.runs (run_id, chat_id, branch_id, dedupe_key, status,"
            " abort_reason, started_at, data)"
            " SELECT run_id, %s, %s, %s, %s, %s, %s::timestamptz, %s::json FROM taken"
            " ON CONFLICT (run_id) DO UPDATE SET chat_id = excluded.chat_id,"
            " branch_id = excluded.branch_id, dedupe_key = excluded.dedupe_key,"
            " status = excluded.status, abort_reason = excluded.abort_reason,"
            " started_at = excluded.started_at, data = excluded.data",
        )
        self.take_key = statement(
            schema,
            "INSERT INTO {s}.turn_keys (dedupe_key, run_id) VALUES (%s, %s) ON CONFLICT DO NOTHING",
        )
        # Locks the key's row: concurrent claims of one key queue here, in any process.
        self.key_holder = statement(
            schema,
            "SELECT runs.data::text FROM {s}.turn_keys LEFT JOIN {s}.runs USING (run_id)"
            " WHERE turn_keys.dedupe_key = %s FOR UPDATE OF turn_keys",
        )
        self.move_key = statement(
            schema, "UPDATE {s}.turn_keys SET run_id = %s WHERE dedupe_key = %s"
        )
        self.running = statement(
            schema, "SELECT data::text FROM {s}.runs WHERE run_id = %s AND status = %s FOR UPDATE"
        )
        # The events and the notification in one statement: atomic, one round trip,
        # and the notification leaves when it commits.
        self.append = statement(
            schema,
            "WITH appended AS (INSERT INTO {s}.events (run_id, seq, type, data)"
            " SELECT %s, e.seq, e.type, e.data FROM ROWS FROM (unnest(%s::integer[]),"
            " unnest(%s::text[]), json_array_elements(%s::json)) AS e (seq, type, data)"
            " ON CONFLICT DO NOTHING)"
            " SELECT pg_notify(%s, '')",
        )
        self.get_run = statement(
            schema, "SELECT data::text, operation_runs::text FROM {s}.runs WHERE run_id = %s"
        )
        self.events = statement(
            schema,
            "SELECT data::text FROM {s}.events WHERE run_id = %s AND seq > %s ORDER BY seq",
        )
        # The turn keys first, as claims lock them first.
        self.delete = (
            statement(schema, "DELETE FROM {s}.turn_keys WHERE run_id = ANY(%s)"),
            statement(schema, "DELETE FROM {s}.runs WHERE run_id = ANY(%s)"),
            statement(schema, "DELETE FROM {s}.events WHERE run_id = ANY(%s)"),
        )
        self.list_runs = statement(
            schema,
            "SELECT data::text FROM {s}.runs WHERE chat_id = %s AND (started_at, run_id) < (%s, %s)"
            " ORDER BY started_at DESC, run_id DESC LIMIT %s",
        )
        self.finished_before = statement(
            schema, "SELECT run_id FROM {s}.runs WHERE status <> %s AND started_at < %s"
        )
        # rank: the run's place in its chat's list_runs order, from 1.
        self.finished_ranked = statement(
            schema,
            "SELECT run_id FROM (SELECT run_id, status, started_at, row_number() OVER"
            " (PARTITION BY chat_id ORDER BY started_at DESC, run_id DESC) AS rank"
            " FROM {s}.runs) AS ranked WHERE status <> %s AND started_at < %s AND rank > %s",
        )
        self.state = statement(
            schema,
            "SELECT status, abort_reason, (SELECT max(seq) FROM {s}.events"
            " WHERE run_id = %(run)s AND type = 'run.finished') FROM {s}.runs"
            " WHERE run_id = %(run)s",
        )


class PostgresRunStore:
    """Runs, their operation runs and events; chat branches held across processes."""

    def __init__(self, db: Database, *, branch_keepalive: int | None) -> None:
        self._db = db
        self._sql = _Sql(db.schema)
        self._branches = BranchHolds(db, keepalive=branch_keepalive)

    def _put_run(self, conn: Conn, run: Run) -> None:
        conn.execute(self._sql.put_run, _run_row(run))

    def _claim(self, run: Run, conn: Conn) -> Run:
        if run.dedupe_key:
            while not conn.execute(self._sql.take_key, (run.dedupe_key, run.run_id)).rowcount:
                row = conn.execute(self._sql.key_holder, (run.dedupe_key,)).fetchone()
                if row is None:  # its run was deleted meanwhile: take the key again
                    continue
                held = None if row[0] is None else Run.model_validate_json(row[0])
                if held is not None and _holds(held, run):
                    return held
                if held is not None and held.status == RunStatus.RUNNING:  # lease ran out
                    aborted = {"status": RunStatus.ABORTED, "abort_reason": "lease_expired"}
                    self._put_run(conn, held.model_copy(update=aborted))
                    notify(conn, self._db.schema, [held.run_id])  # its followers stop
                conn.execute(self._sql.move_key, (run.run_id, run.dedupe_key))
                break
        self._put_run(conn, run)
        return run

    async def claim(self, run: Run) -> Run:
        """Insert ``run`` unless a run with its non-empty ``dedupe_key`` holds it.

        Returns ``run`` or the earlier run that holds the key. A run that ended
        ``aborted``, or that is running with a lease that expired before ``run`` started,
        does not hold it: the latter is stored ``aborted`` (``lease_expired``). The key is
        the primary key of ``turn_keys``, taken with ``INSERT … ON CONFLICT DO NOTHING``
        and otherwise locked (``FOR UPDATE``) while its holder is checked, so concurrent
        claims in any process have one winner.

        Raises:
            StoreError: PostgreSQL failed.
        """
        row = _run_row(run)
        if not run.dedupe_key:  # one statement: atomic by itself
            await self._db.call(
                lambda conn: conn.execute(self._sql.put_run, row), transaction=False
            )
            return run

        def claim(conn: Conn) -> Run:
            # The common case, a key nobody holds, in one statement; else check its holder.
            if conn.execute(self._sql.claim_new_key, (run.dedupe_key, *row)).rowcount:
                return run
            with conn.transaction():
                return self._claim(run, conn)

        return await self._db.call(claim, transaction=False)

    async def renew_lease(self, run_id: str, until: datetime) -> None:
        """Extend a running run's lease to ``until`` (no effect on a finished or unknown run).

        Raises:
            StoreError: PostgreSQL failed.
        """

        def write(conn: Conn) -> None:
            row = conn.execute(self._sql.running, (run_id, RunStatus.RUNNING.value)).fetchone()
            if row is not None:
                run = Run.model_validate_json(row[0])
                self._put_run(conn, run.model_copy(update={"lease_expires_at": until}))

        await self._db.call(write)

    async def save_run(self, run: Run, operation_runs: Sequence[OperationRun]) -> None:
        """Replace the run's record and its operation runs.

        Raises:
            StoreError: PostgreSQL failed.
        """
        records = values_json(_OPERATION_RUNS, list(operation_runs))
        params = (*_run_row(run), records)
        await self._db.call(
            lambda conn: conn.execute(self._sql.save_run, params), transaction=False
        )

    def hold_branch(
        self, chat_id: str, branch_id: str, *, wait: bool = True
    ) -> AbstractAsyncContextManager[None]:
        """Hold a chat branch for one run, in every process that uses the schema.

        Entering waits (first come, first served) while another holder has the branch;
        with ``wait=False`` it raises at once instead. The hold is an advisory lock of a
        transaction on a connection kept for the block: if the holder's process dies,
        PostgreSQL ends the connection and the branch is free.

        Raises:
            StoreError: ``wait=False`` and the branch is held (code ``branch_busy``), or
                PostgreSQL failed.
        """
        return self._branches.hold(chat_id, branch_id, wait=wait)

    async def append_events(self, run_id: str, events: Sequence[RunEvent]) -> None:
        """Append events to the run's log; an event whose ``seq`` is stored is kept once.

        The same transaction notifies the run's followers (``NOTIFY``, delivered when it
        commits).

        Raises:
            StoreError: PostgreSQL failed.
        """
        if not events:
            return
        params = (
            run_id,
            [e.seq for e in events],
            [e.type for e in events],
            # One JSON array (each event's text is kept as written): cheaper to send
            # than an array of texts, whose quotes would all be escaped.
            "[" + ",".join(values_json(RunEventAdapter, e) for e in events) + "]",
            channel(self._db.schema, run_id),
        )
        await self._db.call(lambda conn: conn.execute(self._sql.append, params), transaction=False)

    async def get_run(self, run_id: str) -> tuple[Run, list[OperationRun]]:
        """Return the run and its operation runs.

        Raises:
            NotFound: there is no such run (code ``not_found``).
            StoreError: PostgreSQL failed.
        """

        def read(conn: Conn) -> tuple[Run, list[OperationRun]] | None:
            row = conn.execute(self._sql.get_run, (run_id,)).fetchone()
            if row is None:
                return None
            return Run.model_validate_json(row[0]), _OPERATION_RUNS.validate_json(row[1])

        found = await self._db.call(read, transaction=False)
        if found is None:
            raise NotFound(f"no run {run_id!r}")
        return found

    async def events(self, run_id: str) -> list[RunEvent]:
        """Return the run's events in ``seq`` order (empty when none).

        Raises:
            StoreError: PostgreSQL failed.
        """
        return await self._db.call(lambda conn: self._events(conn, run_id, 0), transaction=False)

    def _events(self, conn: Conn, run_id: str, after_seq: int) -> list[RunEvent]:
        rows = conn.execute(self._sql.events, (run_id, after_seq)).fetchall()
        return [RunEventAdapter.validate_json(data) for (data,) in rows]

    def _delete(self, conn: Conn, run_ids: list[str]) -> int:
        """Delete the runs and everything of them, wake their followers; count the runs."""
        conn.execute(self._sql.delete[0], (run_ids,))
        deleted = conn.execute(self._sql.delete[1], (run_ids,)).rowcount
        conn.execute(self._sql.delete[2], (run_ids,))
        notify(conn, self._db.schema, run_ids)
        return deleted

    async def delete_run(self, run_id: str) -> None:
        """Forget the run, its operation runs, events and turn key (no error when absent).

        Its followers stop with ``NotFound``.

        Raises:
            StoreError: PostgreSQL failed.
        """
        await self._db.call(lambda conn: self._delete(conn, [run_id]))

    async def list_runs(
        self, chat_id: str, *, limit: int = 50, cursor: str | None = None
    ) -> Page[Run]:
        """Return a page of the chat's runs (every branch), newest first: by ``started_at``,
        then by run id, both descending.

        Raises:
            ConfigError: ``limit`` is below 1.
            StoreError: the cursor is not one this query made (code ``bad_cursor``), or
                PostgreSQL failed.
        """
        check_limit(limit)
        after = _LAST
        if cursor is not None:
            at, run_id = decode_cursor("runs", cursor, int, str)
            after = (_EPOCH + timedelta(microseconds=at), run_id)
        params = (chat_id, *after, limit + 1)

        def read(conn: Conn) -> list[Run]:
            rows = conn.execute(self._sql.list_runs, params).fetchall()
            return [Run.model_validate_json(data) for (data,) in rows]

        runs = await self._db.call(read, transaction=False)
        next_cursor = None
        if len(runs) > limit:
            last = runs[limit - 1]
            next_cursor = encode_cursor("runs", micros(last.started_at), last.run_id)
        return Page[Run](items=tuple(runs[:limit]), next_cursor=next_cursor)

    async def prune_runs(
        self, *, older_than: datetime | None = None, keep_last: int | None = None
    ) -> int:
        """Delete finished runs, with their operation runs and events; return how many.

        A run is deleted when it is not ``running`` and every given rule selects it:
        ``older_than`` the runs that started before it, ``keep_last`` the runs of a chat
        after its newest ``keep_last`` (in :meth:`list_runs` order, running runs
        counted). One transaction; the deleted runs' turn keys are freed and their
        followers stop with ``NotFound``.

        Raises:
            ConfigError: neither rule is given, or ``keep_last`` is below 0.
            StoreError: PostgreSQL failed.
        """
        check_prune(older_than, keep_last)
        before = _utc(older_than) if older_than is not None else _LAST[0]
        running = RunStatus.RUNNING.value
        params: tuple[object, ...]
        if keep_last is None:
            query, params = self._sql.finished_before, (running, before)
        else:
            query, params = self._sql.finished_ranked, (running, before, keep_last)

        def prune(conn: Conn) -> int:
            run_ids = [run_id for (run_id,) in conn.execute(query, params)]
            return self._delete(conn, run_ids) if run_ids else 0

        return await self._db.call(prune)

    def follow(self, run_id: str, *, after_seq: int = 0) -> AsyncGenerator[RunEvent, None]:
        """Yield the run's events with ``seq`` above ``after_seq``, then each new one as it
        is appended, in ``seq`` order, each once; end after ``run.finished``.

        Listens (``LISTEN``) on a connection of its own, outside the pool, for the
        notification that :meth:`append_events` sends in its transaction, and reads the
        stored events after the last one it yielded once it listens and after each
        notification, so nothing appended by any process is missed. Also ends, once the
        stored events are yielded, when the run finished before ``after_seq`` or its turn
        was taken over (``aborted``, ``lease_expired``). The connection closes when the
        iteration ends or is closed (``aclose()``, ``contextlib.aclosing``).

        Raises:
            NotFound: there is no such run, or it was deleted while followed (raised by
                the iteration).
            StoreError: PostgreSQL failed, or the listening connection was lost.
        """
        return follow(self._db, run_id, after_seq, self._read_for_follow)

    def _read_for_follow(
        self, conn: Conn, run_id: str, after_seq: int
    ) -> tuple[RunState | None, list[RunEvent]]:
        """The run's state (None when there is no such run) and its events after
        ``after_seq``."""
        row = conn.execute(self._sql.state, {"run": run_id}).fetchone()
        if row is None:
            return None, []
        status, abort_reason, finished_seq = row
        state = RunState(
            finished_seq=finished_seq,
            taken_over=status == RunStatus.ABORTED.value and abort_reason == "lease_expired",
        )
        return state, self._events(conn, run_id, after_seq)
