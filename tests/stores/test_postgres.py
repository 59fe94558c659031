"""What the PostgreSQL stores promise beyond the store contract: schema and migrations,
errors, the pool, branch holds and following runs across store objects."""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import aclosing, asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import psycopg
import pytest
from _postgres_support import (
    drop_schema,
    new_schema,
    open_stores,
    postgres_for_module,
    with_params,
)
from psycopg import sql

from _support import make_runner
from opsrun.errors import NotFound, StoreError
from opsrun.model import (
    ChatMessage,
    ChatRole,
    MessageVariant,
    OperationProfile,
    Run,
    RunEvent,
    RunFinished,
    RunRequest,
    RunStarted,
    RunStatus,
    Trigger,
)
from opsrun.operations import AbortSignal
from opsrun.ports import (
    ArtifactArchive,
    ChatStore,
    MainLlmRequest,
    ProfileStore,
    RunStore,
    SessionStore,
    Stores,
)
from opsrun.runner import UuidIds
from opsrun.stores import InMemoryStores
from opsrun.stores._postgres._branches import HOLD_APPLICATION_NAME
from opsrun.stores._postgres._schema import MIGRATIONS, advisory_key, migrate
from opsrun.stores.postgres import SCHEMA_VERSION, PostgresStores
from opsrun.testing import FunctionMainLlm, ScriptedMainLlm

pytestmark = pytest.mark.anyio

PROFILE = OperationProfile(profile_id="p", name="P", operation_profile_session_id="s1")
T0 = datetime(2026, 1, 1, tzinfo=UTC)


DSN = postgres_for_module()

ASYNCIO_ONLY = pytest.mark.parametrize("anyio_backend", ["asyncio"])
"""For tests of what the event loop has no part in (schema, records, errors, listings):
the stores take the same worker-thread path on trio, which the other tests cover."""


@pytest.fixture
def dsn() -> str:
    return DSN


@pytest.fixture
def schema(dsn: str) -> Iterator[str]:
    """A schema name of its own, dropped after the test."""
    name = new_schema()
    yield name
    drop_schema(dsn, name)


def _query(dsn: str, query: sql.Composable | str, *params: object) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cursor = conn.execute(query, params)  # type: ignore[arg-type]
        return cursor.fetchall() if cursor.description is not None else []


def _table(schema: str, table: str) -> sql.Composed:
    return sql.SQL("SELECT * FROM {}").format(sql.Identifier(schema, table))


@asynccontextmanager
async def _also(stores: PostgresStores, **options: Any) -> AsyncIterator[PostgresStores]:
    """A second store object on the schema of ``stores`` (as another process would open)."""
    async with PostgresStores(stores._db.dsn, schema=stores.schema, **options) as other:
        yield other


def _event(run_id: str, seq: int, *, last: bool = False) -> RunEvent:
    base: dict[str, Any] = {
        "seq": seq,
        "ts": T0 + timedelta(milliseconds=seq),
        "run_id": run_id,
        "chat_id": "c",
        "user_message_id": "u1",
        "trigger": Trigger.GENERATE,
    }
    if last:
        return RunFinished(**base, status=RunStatus.DONE)
    return RunStarted(**base)


def _run(run_id: str, **fields: Any) -> Run:
    values: dict[str, Any] = {
        "trigger": Trigger.GENERATE,
        "chat_id": "c",
        "branch_id": "main",
        "user_message_id": "u1",
        "started_at": T0,
    }
    return Run(run_id=run_id, **{**values, **fields})


def _message(chat_id: str, message_id: str) -> ChatMessage:
    return ChatMessage(
        message_id=message_id,
        chat_id=chat_id,
        branch_id="main",
        role=ChatRole.USER,
        variants=(MessageVariant(variant_id="v1", content=message_id),),
        selected_variant_id="v1",
    )


# --- the ports, the schema and migrations -----------------------------------------------


@ASYNCIO_ONLY
async def test_the_stores_implement_the_ports(dsn: str) -> None:
    async with open_stores(dsn) as stores:
        bundle: Stores = stores
        profiles: ProfileStore = stores.profiles
        sessions: SessionStore = stores.sessions
        chats: ChatStore = stores.chats
        runs: RunStore = stores.runs
        archive: ArtifactArchive = stores.archive
        assert all(port is not None for port in (bundle, profiles, sessions, chats, runs, archive))


@ASYNCIO_ONLY
async def test_opening_creates_the_schema_at_the_current_version(dsn: str, schema: str) -> None:
    async with PostgresStores(dsn, schema=schema) as stores:
        await stores.profiles.save_profile(PROFILE)
    assert _query(dsn, _table(schema, "schema_version")) == [(SCHEMA_VERSION,)]
    tables = _query(dsn, "SELECT tablename FROM pg_tables WHERE schemaname = %s", schema)
    assert {"profiles", "runs", "events", "messages", "turn_keys"} <= {t for (t,) in tables}
    async with PostgresStores(dsn, schema=schema, migrate=False) as stores:
        assert await stores.profiles.get_profile("p") == PROFILE  # records outlive the object


def test_an_older_schema_is_migrated_forward_keeping_its_records(dsn: str, schema: str) -> None:
    later = (*MIGRATIONS, ("CREATE TABLE {s}.notes (id integer PRIMARY KEY)",))
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert migrate(conn, schema) == SCHEMA_VERSION
        conn.execute(
            sql.SQL("INSERT INTO {} VALUES ('p', '{{}}')").format(
                sql.Identifier(schema, "profiles")
            )
        )
        assert migrate(conn, schema, later) == SCHEMA_VERSION + 1
        assert migrate(conn, schema, later) == SCHEMA_VERSION + 1  # applied once
    assert _query(dsn, _table(schema, "schema_version")) == [(SCHEMA_VERSION + 1,)]
    assert _query(dsn, _table(schema, "profiles")) == [("p", {})]
    assert _query(dsn, _table(schema, "notes")) == []


def test_a_failed_migration_changes_nothing(dsn: str, schema: str) -> None:
    broken = (*MIGRATIONS, ("CREATE TABLE {s}.notes (id integer)", "NOT SQL"))
    with psycopg.connect(dsn, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.SyntaxError):
            migrate(conn, schema, broken)
        assert _query(dsn, "SELECT 1 FROM pg_namespace WHERE nspname = %s", schema) == []
        migrate(conn, schema)
        with pytest.raises(psycopg.errors.SyntaxError):
            migrate(conn, schema, broken)
    assert _query(dsn, _table(schema, "schema_version")) == [(SCHEMA_VERSION,)]
    notes = "SELECT 1 FROM pg_tables WHERE schemaname = %s AND tablename = 'notes'"
    assert _query(dsn, notes, schema) == []


def test_processes_migrating_at_once_apply_each_migration_once(dsn: str, schema: str) -> None:
    versions: list[int] = []
    start = threading.Barrier(4)

    def open_and_migrate() -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            start.wait()
            versions.append(migrate(conn, schema))

    threads = [threading.Thread(target=open_and_migrate) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert versions == [SCHEMA_VERSION] * 4
    assert _query(dsn, _table(schema, "schema_version")) == [(SCHEMA_VERSION,)]


@ASYNCIO_ONLY
async def test_a_schema_from_a_newer_release_is_refused(dsn: str, schema: str) -> None:
    async with PostgresStores(dsn, schema=schema):
        pass
    newer = sql.SQL("UPDATE {} SET version = %s").format(sql.Identifier(schema, "schema_version"))
    _query(dsn, newer, SCHEMA_VERSION + 1)
    for opening in (
        PostgresStores(dsn, schema=schema).open,
        PostgresStores(dsn, schema=schema).migrate,
    ):
        with pytest.raises(StoreError) as refused:
            await opening()
        assert refused.value.code == "schema_too_new"
        assert refused.value.details["version"] == SCHEMA_VERSION + 1


@ASYNCIO_ONLY
async def test_a_schema_version_that_is_not_an_integer_is_store_corrupt(
    dsn: str, schema: str
) -> None:
    _query(dsn, sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    table = sql.Identifier(schema, "schema_version")
    _query(dsn, sql.SQL("CREATE TABLE {} (version text NOT NULL)").format(table))
    _query(dsn, sql.SQL("INSERT INTO {} VALUES ('two')").format(table))
    for opening in (
        PostgresStores(dsn, schema=schema).open,
        PostgresStores(dsn, schema=schema, migrate=False).open,
        PostgresStores(dsn, schema=schema).migrate,
    ):
        with pytest.raises(StoreError) as corrupt:
            await opening()
        assert corrupt.value.code == "store_corrupt"
        assert corrupt.value.details == {"schema": schema, "version": "'two'"}


@ASYNCIO_ONLY
async def test_without_migrate_an_outdated_schema_is_refused_until_migrated(
    dsn: str, schema: str
) -> None:
    stores = PostgresStores(dsn, schema=schema, migrate=False)
    with pytest.raises(StoreError) as outdated:
        await stores.open()
    assert outdated.value.code == "schema_outdated"
    assert outdated.value.details == {"schema": schema, "version": 0, "supported": SCHEMA_VERSION}
    assert await stores.migrate() == SCHEMA_VERSION
    async with stores:
        await stores.profiles.save_profile(PROFILE)


@ASYNCIO_ONLY
async def test_two_schemas_keep_their_records_and_branches_apart(dsn: str) -> None:
    async with open_stores(dsn) as one, open_stores(dsn) as two:
        await one.profiles.save_profile(PROFILE)
        with pytest.raises(NotFound):
            await two.profiles.get_profile("p")
        async with (
            one.runs.hold_branch("c", "main"),
            two.runs.hold_branch("c", "main", wait=False),
        ):
            pass


# --- errors ---------------------------------------------------------------------------


@ASYNCIO_ONLY
async def test_calls_before_open_and_after_close_are_store_closed(dsn: str) -> None:
    stores = PostgresStores(dsn, schema=new_schema())
    with pytest.raises(StoreError) as not_open:
        await stores.profiles.get_profile("p")
    assert (not_open.value.code, not_open.value.details["state"]) == ("store_closed", "new")
    async with open_stores(dsn, stores.schema) as opened:
        assert opened is not stores
    await stores.close()
    await stores.close()
    assert stores.closed
    for call in (stores.profiles.save_profile(PROFILE), stores.open()):
        with pytest.raises(StoreError) as closed:
            await call
        assert (closed.value.code, closed.value.details["state"]) == ("store_closed", "closed")


@ASYNCIO_ONLY
async def test_a_record_that_does_not_parse_is_store_corrupt(dsn: str) -> None:
    async with open_stores(dsn) as stores:
        insert = sql.SQL("INSERT INTO {} VALUES ('p', '{{\"name\": 1}}')")
        _query(dsn, insert.format(sql.Identifier(stores.schema, "profiles")))
        with pytest.raises(StoreError) as corrupt:
            await stores.profiles.get_profile("p")
        assert corrupt.value.code == "store_corrupt"


@ASYNCIO_ONLY
async def test_a_write_that_waits_past_the_lock_timeout_is_store_busy(dsn: str) -> None:
    busy_dsn = with_params(dsn, options="-c lock_timeout=50")
    async with open_stores(busy_dsn) as stores:
        await stores.profiles.save_profile(PROFILE)
        with psycopg.connect(dsn) as other:
            lock = sql.SQL("LOCK TABLE {} IN EXCLUSIVE MODE")
            other.execute(lock.format(sql.Identifier(stores.schema, "profiles")))
            with pytest.raises(StoreError) as busy:
                await stores.profiles.save_profile(PROFILE)
            assert (busy.value.code, busy.value.details["sqlstate"]) == ("store_busy", "55P03")
            assert await stores.profiles.get_profile("p") == PROFILE  # reads do not wait
        await stores.profiles.save_profile(PROFILE)


@ASYNCIO_ONLY
async def test_events_delivered_twice_are_kept_once(dsn: str) -> None:
    async with open_stores(dsn) as stores:
        await stores.runs.append_events("r", [_event("r", s) for s in (1, 2, 3)])
        await stores.runs.append_events("r", [_event("r", s) for s in (2, 3, 4, 5)])
        assert [e.seq for e in await stores.runs.events("r")] == [1, 2, 3, 4, 5]


async def test_a_run_aborted_with_nul_in_its_reason_is_saved_as_given(dsn: str) -> None:
    reason = "stopped \x00 by the host"
    async with open_stores(dsn) as stores:
        runner = make_runner(stores=stores, ids=UuidIds())
        abort = AbortSignal()
        abort.abort(reason)
        request = RunRequest(trigger=Trigger.GENERATE, chat_id="c", user_message="a \x00 b")
        result = await runner.run(request, abort=abort)
        assert (result.status, result.run.abort_reason) == (RunStatus.ABORTED, reason)
        stored, _ = await stores.runs.get_run(result.run.run_id)
        assert stored == result.run
        # The column that the follow check reads keeps NUL as U+FFFD; the record keeps it.
        column = sql.SQL("SELECT abort_reason FROM {} WHERE run_id = %s")
        found = _query(dsn, column.format(sql.Identifier(stores.schema, "runs")), stored.run_id)
        assert found == [("stopped \ufffd by the host",)]


# --- the pool -------------------------------------------------------------------------


class _BlockedOpen:
    """Stands in for ``Database._open``: counts the calls, keeps the pools they start, and
    holds each in its thread until released."""

    def __init__(self, stores: PostgresStores) -> None:
        self._open = stores._db._open
        self.pools: list[Any] = []
        self.entered = threading.Event()
        self.release = threading.Event()

    def __call__(self, apply_migrations: bool) -> Any:
        self.entered.set()
        self.release.wait(30)
        pools = self._open(apply_migrations)
        self.pools.extend(pools)
        return pools

    async def wait_entered(self) -> None:
        await anyio.to_thread.run_sync(self.entered.wait, 30)


@pytest.fixture
def blocked(
    dsn: str, schema: str, monkeypatch: pytest.MonkeyPatch
) -> tuple[PostgresStores, _BlockedOpen]:
    """Stores whose pools start only once the test lets them (``opening.release``)."""
    stores = PostgresStores(dsn, schema=schema)
    opening = _BlockedOpen(stores)
    monkeypatch.setattr(stores._db, "_open", opening)
    return stores, opening


async def test_concurrent_opens_start_one_set_of_pools(
    blocked: tuple[PostgresStores, _BlockedOpen],
) -> None:
    stores, opening = blocked
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(stores.open)
            tg.start_soon(stores.open)
            await opening.wait_entered()
            await anyio.wait_all_tasks_blocked()  # the second opener waits its turn
            opening.release.set()
        assert len(opening.pools) == 2  # one call: the calls' pool and the holds' pool
        await stores.profiles.save_profile(PROFILE)
        await stores.close()
    assert all(pool.closed for pool in opening.pools)


async def test_stores_closed_while_they_open_start_no_pools(
    blocked: tuple[PostgresStores, _BlockedOpen],
) -> None:
    stores, opening = blocked
    errors: list[StoreError] = []

    async def open_in_vain() -> None:
        with pytest.raises(StoreError) as closed:
            await stores.open()
        errors.append(closed.value)

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(open_in_vain)
            await opening.wait_entered()
            await stores.close()
            opening.release.set()
    assert [e.code for e in errors] == ["store_closed"]
    assert stores.closed
    assert len(opening.pools) == 2
    assert all(pool.closed for pool in opening.pools)


async def test_an_open_cancelled_while_the_pools_start_closes_them(
    blocked: tuple[PostgresStores, _BlockedOpen],
) -> None:
    stores, opening = blocked
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(stores.open)
            await opening.wait_entered()
            tg.cancel_scope.cancel()
            opening.release.set()
        assert len(opening.pools) == 2
        assert all(pool.closed for pool in opening.pools)
        async with stores:  # not open, not closed: opens again
            await stores.profiles.save_profile(PROFILE)
    assert all(pool.closed for pool in opening.pools[2:])


def _connections(dsn: str, application_name: str) -> int:
    query = "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
    return int(_query(dsn, query, application_name)[0][0])


async def test_more_calls_than_connections_wait_for_one(dsn: str) -> None:
    name = new_schema()
    named = with_params(dsn, application_name=name)
    async with open_stores(named, max_size=2) as stores:
        await stores.profiles.save_profile(PROFILE)
        found: list[OperationProfile] = []

        async def read() -> None:
            found.append(await stores.profiles.get_profile("p"))

        async with anyio.create_task_group() as tg:
            for _ in range(30):
                tg.start_soon(read)
        assert found == [PROFILE] * 30
        # The migration's own connection is closed, but its server process may still be
        # listed for a moment while it exits; the pool's connections stay open until
        # the stores close, so a third pooled one would still be counted after this.
        with anyio.fail_after(10):
            while _connections(dsn, name) > 2:
                await anyio.sleep(0.01)
        assert _connections(dsn, name) >= 1


async def test_branch_holds_and_waiters_leave_the_store_calls_their_connections(
    dsn: str,
) -> None:
    async with (
        open_stores(dsn, max_size=1, max_branch_holds=1) as stores,
        _also(stores, max_size=1, max_branch_holds=1) as other,
    ):
        entered = anyio.Event()

        async def wait_for_the_branch() -> None:
            async with other.runs.hold_branch("c", "main"):
                entered.set()

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                async with stores.runs.hold_branch("c", "main"):
                    tg.start_soon(wait_for_the_branch)
                    await anyio.sleep(0.05)  # time to queue up; the test holds either way
                    await stores.profiles.save_profile(PROFILE)
                    assert await other.profiles.get_profile("p") == PROFILE
                    assert not entered.is_set()
                await entered.wait()


async def test_holds_beyond_max_branch_holds_wait_for_a_slot(dsn: str) -> None:
    async with open_stores(dsn, max_branch_holds=1) as stores:
        entered = anyio.Event()

        async def hold_another_branch() -> None:
            async with stores.runs.hold_branch("c", "other"):
                entered.set()

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                async with stores.runs.hold_branch("c", "main"):
                    tg.start_soon(hold_another_branch)
                    await anyio.sleep(0.05)
                    assert not entered.is_set()
                await entered.wait()


# --- branch holds ---------------------------------------------------------------------


def _lock_holders(dsn: str, schema: str, chat_id: str, branch_id: str) -> list[tuple[Any, ...]]:
    """(granted, state, backend_xmin, application_name) of each session holding or
    waiting for the branch's advisory lock."""
    key = advisory_key(schema, "branch", chat_id, branch_id) & (2**64 - 1)
    return _query(
        dsn,
        "SELECT l.granted, a.state, a.backend_xmin, a.application_name"
        " FROM pg_locks l JOIN pg_stat_activity a USING (pid)"
        " WHERE l.locktype = 'advisory' AND l.classid = %s AND l.objid = %s"
        " AND l.objsubid = 1 ORDER BY l.granted DESC",
        key >> 32,
        key & 0xFFFFFFFF,
    )


@ASYNCIO_ONLY
async def test_a_hold_is_an_idle_transaction_that_keeps_no_snapshot(dsn: str) -> None:
    async with open_stores(dsn) as stores:
        async with stores.runs.hold_branch("c", "main"):
            held = _lock_holders(dsn, stores.schema, "c", "main")
            assert held == [(True, "idle in transaction", None, HOLD_APPLICATION_NAME)]
        assert _lock_holders(dsn, stores.schema, "c", "main") == []


async def test_a_waiter_that_gives_up_stops_waiting_on_the_server(dsn: str) -> None:
    async with open_stores(dsn) as stores, _also(stores) as other:
        with anyio.fail_after(30):
            async with stores.runs.hold_branch("c", "main"):
                with anyio.move_on_after(0.2):
                    async with other.runs.hold_branch("c", "main"):
                        raise AssertionError("entered a held branch")
                assert [g for g, *_ in _lock_holders(dsn, stores.schema, "c", "main")] == [True]
            async with other.runs.hold_branch("c", "main", wait=False):
                pass


async def test_a_hold_whose_connection_ends_frees_the_branch_and_says_so(
    dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="opsrun.stores.postgres")
    async with open_stores(dsn) as stores, _also(stores) as other:
        with anyio.fail_after(30):
            async with stores.runs.hold_branch("c", "main"):
                key = advisory_key(stores.schema, "branch", "c", "main") & (2**64 - 1)
                _query(
                    dsn,
                    "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory'"
                    " AND classid = %s AND objid = %s AND objsubid = 1",
                    key >> 32,
                    key & 0xFFFFFFFF,
                )
                entered = False
                async with other.runs.hold_branch("c", "main"):
                    entered = True  # the branch freed with the holder's connection
                assert entered
                while "was lost" not in caplog.text:
                    await anyio.sleep(0.01)
            await stores.profiles.save_profile(PROFILE)  # the pool replaced the connection
            assert await stores.profiles.get_profile("p") == PROFILE
        assert "was lost" in caplog.text


async def test_a_branch_held_while_its_stores_close_is_still_released(dsn: str) -> None:
    async with open_stores(dsn) as stores, _also(stores) as other:
        async with stores.runs.hold_branch("c", "main"):
            await stores.close()
        entered = False
        async with other.runs.hold_branch("c", "main", wait=False):  # raises if still held
            entered = True
        assert entered


async def test_two_store_objects_share_records_and_branches(dsn: str) -> None:
    async with open_stores(dsn) as one, _also(one) as two:
        await one.profiles.save_profile(PROFILE)
        assert await two.profiles.get_profile("p") == PROFILE
        entered = anyio.Event()

        async def wait_for_the_branch() -> None:
            async with two.runs.hold_branch("c", "main"):
                entered.set()

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                async with one.runs.hold_branch("c", "main"):
                    with pytest.raises(StoreError) as busy:
                        async with two.runs.hold_branch("c", "main", wait=False):
                            pass
                    assert busy.value.code == "branch_busy"
                    tg.start_soon(wait_for_the_branch)
                    await anyio.sleep(0.02)
                    assert not entered.is_set()
                await entered.wait()


async def test_turns_on_one_branch_take_turns_through_a_runner(dsn: str) -> None:
    async with open_stores(dsn) as stores:
        main_llm = ScriptedMainLlm(default="an answer", chunk_size=2)
        runner = make_runner(stores=stores, main_llm=main_llm, ids=UuidIds())
        statuses: list[RunStatus] = []

        async def turn(text: str) -> None:
            request = RunRequest(trigger=Trigger.GENERATE, chat_id="c", user_message=text)
            statuses.append((await runner.run(request)).status)

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                for text in ("one", "two", "three"):
                    tg.start_soon(turn, text)
        assert statuses == [RunStatus.DONE] * 3
        history = await stores.chats.history("c", "main")
        assert [m.role for m in history] == [ChatRole.USER, ChatRole.ASSISTANT] * 3
        assert sorted(len(r.messages) for r in main_llm.requests) == [1, 3, 5]


# --- following a run ------------------------------------------------------------------


async def test_a_run_is_followed_from_another_store_object_as_it_runs(dsn: str) -> None:
    async with open_stores(dsn) as stores, _also(stores) as other:
        started, release = anyio.Event(), anyio.Event()
        run_ids: list[str] = []

        async def answer(request: MainLlmRequest) -> str:
            run_ids.append(request.run_id)
            started.set()
            await release.wait()
            return "a long enough answer to come in several deltas"

        runner = make_runner(
            stores=stores, main_llm=FunctionMainLlm(answer, chunk_size=4), ids=UuidIds()
        )
        followed: list[RunEvent] = []
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                request = RunRequest(trigger=Trigger.GENERATE, chat_id="c", user_message="hi")
                tg.start_soon(runner.run, request)
                await started.wait()
                web = make_runner(stores=other)  # another process's runner, streaming
                async with aclosing(web.follow(run_ids[0])) as events:
                    async for event in events:
                        followed.append(event)
                        release.set()  # the rest is appended while the follower listens
        stored = await stores.runs.events(run_ids[0])
        assert followed == stored
        assert [e.seq for e in followed] == list(range(1, len(stored) + 1))
        assert followed[-1].type == "run.finished"
        resumed = [e async for e in other.runs.follow(run_ids[0], after_seq=3)]
        assert resumed == stored[3:]


async def test_a_run_deleted_while_followed_ends_the_follow_with_not_found(dsn: str) -> None:
    async with open_stores(dsn) as stores, _also(stores) as other:
        await stores.runs.claim(_run("r"))
        await stores.runs.append_events("r", [_event("r", 1)])
        followed: list[RunEvent] = []

        async def follow_and_delete() -> None:
            async for event in other.runs.follow("r"):
                followed.append(event)
                await stores.runs.delete_run("r")

        with anyio.fail_after(30):
            with pytest.raises(NotFound):
                await follow_and_delete()
            assert [e.seq for e in followed] == [1]
            with pytest.raises(NotFound):
                await anext(other.runs.follow("r"))


async def test_a_follower_ends_when_its_run_is_taken_over(dsn: str) -> None:
    async with open_stores(dsn) as stores, _also(stores) as other:
        await stores.runs.claim(_run("dead", dedupe_key="k", lease_expires_at=T0))
        await stores.runs.append_events("dead", [_event("dead", 1)])
        with anyio.fail_after(30):
            followed = []
            async for event in other.runs.follow("dead"):
                followed.append(event)
                retry = _run("retry", dedupe_key="k", started_at=T0 + timedelta(seconds=1))
                assert await stores.runs.claim(retry) == retry
        assert [e.seq for e in followed] == [1]


@ASYNCIO_ONLY
async def test_a_follower_closes_its_connection(dsn: str) -> None:
    name = new_schema()
    named = with_params(dsn, application_name=name)
    async with open_stores(named, min_size=0) as stores:
        await stores.runs.claim(_run("r"))
        await stores.runs.append_events("r", [_event("r", 1), _event("r", 2)])
        follower = stores.runs.follow("r")
        assert (await anext(follower)).seq == 1
        listening = _connections(dsn, name)
        await follower.aclose()
        with anyio.fail_after(30):  # the server ends the session just after the close
            while _connections(dsn, name) != listening - 1:
                await anyio.sleep(0.01)


async def test_closing_the_stores_ends_their_followers(dsn: str) -> None:
    """A follower waiting for a quiet run (its process busy or gone) ends with
    store_closed when its stores close, and its listening connection with it."""
    name = new_schema()
    named = with_params(dsn, application_name=name)
    async with open_stores(named, min_size=0) as stores:
        await stores.runs.claim(_run("r"))
        await stores.runs.append_events("r", [_event("r", 1)])
        followed: list[int] = []
        errors: list[StoreError] = []
        stored_read = anyio.Event()

        async def follow() -> None:
            try:
                async for event in stores.runs.follow("r"):
                    followed.append(event.seq)
                    stored_read.set()
            except StoreError as exc:
                errors.append(exc)

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(follow)
                await stored_read.wait()  # the follower read what is stored, waits for more
                await anyio.sleep(0.1)
                await stores.close()
            while _connections(dsn, name):  # the listening one too
                await anyio.sleep(0.01)
    assert followed == [1]
    assert [e.code for e in errors] == ["store_closed"]


# --- listings and prunes --------------------------------------------------------------


@ASYNCIO_ONLY
async def test_listings_and_prunes_agree_with_the_in_memory_store(dsn: str) -> None:
    memory = InMemoryStores()
    async with open_stores(dsn) as stores:
        both: list[Stores] = [memory, stores]
        for bundle in both:
            for chat, message in [("a", "1"), ("b", "1"), ("a", "2"), ("c", "1"), ("b", "2")]:
                await bundle.chats.save_message(_message(chat, message))
            await bundle.chats.save_message(_message("a", "1"))  # an edit moves a to the front
            await bundle.chats.delete_message("c", "1")
            for n in range(7):
                status = RunStatus.RUNNING if n == 5 else RunStatus.DONE
                at = T0 + timedelta(minutes=n // 2)
                await bundle.runs.claim(_run(f"r{n}", status=status, started_at=at))
        for bundle in both:
            with pytest.raises(NotFound):
                await bundle.chats.delete_message("c", "1")

        async def chat_pages(bundle: Stores) -> list[list[tuple[str, int, str | None]]]:
            pages, cursor = [], None
            while True:
                page = await bundle.chats.list_chats(limit=1, cursor=cursor)
                pages.append([(s.chat_id, s.message_count, s.last_message_id) for s in page.items])
                if (cursor := page.next_cursor) is None:
                    return pages

        async def run_pages(bundle: Stores) -> list[list[str]]:
            pages, cursor = [], None
            while True:
                page = await bundle.runs.list_runs("c", limit=3, cursor=cursor)
                pages.append([run.run_id for run in page.items])
                if (cursor := page.next_cursor) is None:
                    return pages

        assert (
            await chat_pages(stores)
            == await chat_pages(memory)
            == [
                [("a", 2, "2")],
                [("b", 2, "2")],
            ]
        )
        assert await run_pages(stores) == await run_pages(memory)
        summaries = (await stores.chats.list_chats()).items
        assert summaries[0].updated_at >= summaries[1].updated_at
        assert summaries[0].updated_at.tzinfo is not None
        for rules in ({"older_than": T0 + timedelta(minutes=1)}, {"keep_last": 2}):
            pruned = [await b.runs.prune_runs(**rules) for b in both]
            assert pruned[0] == pruned[1] > 0
            assert await run_pages(stores) == await run_pages(memory)
        with pytest.raises(StoreError) as bad:
            await stores.runs.list_runs("c", cursor="not a cursor")
        assert bad.value.code == "bad_cursor"


@ASYNCIO_ONLY
async def test_chat_times_never_rise_down_the_chat_list(dsn: str) -> None:
    async with open_stores(dsn) as stores:
        for chat_id in ("older", "newer", "newest"):
            await stores.chats.save_message(_message(chat_id, "m1"))
        # The older chat's writer read the clock after the newer one's (one tick later).
        later = sql.SQL("UPDATE {} SET updated_at = updated_at + interval '1 second'")
        _query(
            dsn,
            later.format(sql.Identifier(stores.schema, "chats"))
            + sql.SQL(" WHERE chat_id = 'older'"),
        )
        pages = [await stores.chats.list_chats(limit=2)]
        pages.append(await stores.chats.list_chats(limit=2, cursor=pages[0].next_cursor))
        listed = [summary for page in pages for summary in page.items]
        assert [s.chat_id for s in listed] == ["newest", "newer", "older"]
        assert listed[2].updated_at == listed[1].updated_at
        assert listed[0].updated_at >= listed[1].updated_at
