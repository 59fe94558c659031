"""What the SQLite stores promise beyond the store contract: schema, errors, shared files."""

from __future__ import annotations

import gc
import sqlite3
import threading
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any, cast

import anyio
import pytest

from _support import make_runner
from opsrun.errors import ConfigError, StoreError
from opsrun.model import (
    ChatMessage,
    ChatRole,
    MessageVariant,
    OperationProfile,
    Run,
    RunEventAdapter,
    RunRequest,
    RunStarted,
    RunStatus,
    Trigger,
)
from opsrun.ports import ArtifactArchive, ChatStore, ProfileStore, RunStore, SessionStore, Stores
from opsrun.runner import SystemClock, UuidIds
from opsrun.stores._sqlite import _runs as sqlite_runs
from opsrun.stores._sqlite._cache import RecordCache
from opsrun.stores._sqlite._schema import MIGRATIONS, migrate
from opsrun.stores.sqlite import SCHEMA_VERSION, SqliteStores
from opsrun.testing import ScriptedMainLlm
from opsrun.testing._contract._support import delta_events, make_run

pytestmark = pytest.mark.anyio

PROFILE = OperationProfile(profile_id="p", name="P", operation_profile_session_id="s1")


def _query(db: Path, sql: str, *params: object) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(db)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def test_the_stores_implement_the_ports(tmp_path: Path) -> None:
    with SqliteStores(tmp_path / "chat.db") as stores:
        bundle: Stores = stores
        profiles: ProfileStore = stores.profiles
        sessions: SessionStore = stores.sessions
        chats: ChatStore = stores.chats
        runs: RunStore = stores.runs
        archive: ArtifactArchive = stores.archive
        ports = [bundle.runs, profiles, sessions, chats, runs, archive]
        assert all(port is not None for port in ports)
        assert repr(stores) == f"SqliteStores({str(tmp_path / 'chat.db')!r})"


def test_a_new_file_gets_the_current_schema_in_wal_mode(tmp_path: Path) -> None:
    db = tmp_path / "chat.db"
    SqliteStores(db).close()
    assert _query(db, "SELECT version FROM schema_version") == [(SCHEMA_VERSION,)]
    assert _query(db, "PRAGMA journal_mode") == [("wal",)]


async def test_records_outlive_the_store_object(tmp_path: Path) -> None:
    db = tmp_path / "chat.db"
    with SqliteStores(db) as stores:
        await stores.profiles.save_profile(PROFILE)
    with SqliteStores(db) as stores:
        assert await stores.profiles.get_profile("p") == PROFILE
    assert _query(db, "SELECT version FROM schema_version") == [(SCHEMA_VERSION,)]


def test_an_older_schema_is_migrated_forward_keeping_its_records(tmp_path: Path) -> None:
    db = tmp_path / "chat.db"
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        assert migrate(conn, MIGRATIONS[:1]) == 1
        conn.execute("INSERT INTO profiles (profile_id, data) VALUES ('p', '{}')")
        later = (*MIGRATIONS[:1], ("CREATE TABLE notes (id INTEGER PRIMARY KEY)",))
        assert migrate(conn, later) == 2
        assert migrate(conn, later) == 2  # applied once
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(2,)]
        assert conn.execute("SELECT profile_id FROM profiles").fetchall() == [("p",)]
        assert conn.execute("SELECT COUNT(*) FROM notes").fetchall() == [(0,)]
    finally:
        conn.close()


def _message_json(chat_id: str, message_id: str, text: str = "hi") -> str:
    return ChatMessage(
        message_id=message_id,
        chat_id=chat_id,
        branch_id="main",
        role=ChatRole.USER,
        variants=(MessageVariant(variant_id=f"{message_id}-v", content=text),),
        selected_variant_id=f"{message_id}-v",
    ).model_dump_json()


def _run_json(run_id: str, started_at: datetime) -> str:
    run = Run(
        run_id=run_id,
        trigger=Trigger.GENERATE,
        chat_id="old",
        branch_id="main",
        user_message_id="u",
        status=RunStatus.DONE,
        started_at=started_at,
    )
    return run.model_dump_json()


async def test_a_version_1_file_keeps_its_chats_and_runs_in_order(tmp_path: Path) -> None:
    """Migration 2 lists the chats of a version 1 file (in the order their newest messages
    were added) and its runs (ordered by their exact start, across time zones)."""
    db = tmp_path / "chat.db"
    conn = sqlite3.connect(db, isolation_level=None)
    start = datetime(2026, 1, 1, 12, 0, 0, 500_001, tzinfo=UTC)
    plus_one = timezone(timedelta(hours=1))
    try:
        migrate(conn, MIGRATIONS[:1])
        rows = [("old", "o1", 1), ("new", "n1", 1), ("old", "o2", 2), ("new", "n2", 2)]
        conn.executemany(
            "INSERT INTO messages (chat_id, message_id, branch_id, position, data)"
            " VALUES (?, ?, 'main', ?, ?)",
            [(c, m, p, _message_json(c, m)) for c, m, p in rows],
        )
        runs = [
            ("r-late", start + timedelta(microseconds=1)),
            ("r-early", start),
            ("r-zone", start.astimezone(plus_one) - timedelta(microseconds=1)),
        ]
        conn.executemany(
            "INSERT INTO runs (run_id, chat_id, branch_id, dedupe_key, status, data)"
            " VALUES (?, 'old', 'main', '', 'done', ?)",
            [(run_id, _run_json(run_id, at)) for run_id, at in runs],
        )
    finally:
        conn.close()
    with SqliteStores(db) as stores:
        chats = (await stores.chats.list_chats()).items
        assert [(c.chat_id, c.message_count, c.last_message_id) for c in chats] == [
            ("new", 2, "n2"),
            ("old", 2, "o2"),
        ]
        listed = (await stores.runs.list_runs("old")).items
        assert [run.run_id for run in listed] == ["r-late", "r-early", "r-zone"]
        await stores.chats.save_message(ChatMessage.model_validate_json(_message_json("old", "o3")))
        chats = (await stores.chats.list_chats()).items
        assert [(c.chat_id, c.message_count, c.last_message_id) for c in chats] == [
            ("old", 3, "o3"),
            ("new", 2, "n2"),
        ]
        history = await stores.chats.history("old", "main")
        assert [m.message_id for m in history] == ["o1", "o2", "o3"]
    assert _query(db, "SELECT version FROM schema_version") == [(SCHEMA_VERSION,)]


def test_a_failed_migration_leaves_the_schema_as_it_was(tmp_path: Path) -> None:
    db = tmp_path / "chat.db"
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        migrate(conn, MIGRATIONS[:1])
        broken = (*MIGRATIONS[:1], ("CREATE TABLE notes (id)", "NOT SQL"))
        with pytest.raises(sqlite3.Error):
            migrate(conn, broken)
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(1,)]
        assert conn.execute("SELECT name FROM sqlite_master WHERE name = 'notes'").fetchall() == []
    finally:
        conn.close()


def test_a_file_from_a_newer_release_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "chat.db"
    SqliteStores(db).close()
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION + 1,))
    conn.close()
    with pytest.raises(StoreError) as refused:
        SqliteStores(db)
    assert refused.value.code == "schema_too_new"
    assert refused.value.details["version"] == SCHEMA_VERSION + 1


@pytest.mark.parametrize("version", ["two", 2.5, b"\x02"])
def test_a_schema_version_that_is_not_an_integer_is_store_corrupt(
    tmp_path: Path, version: object
) -> None:
    db = tmp_path / "chat.db"
    SqliteStores(db).close()
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("UPDATE schema_version SET version = ?", (version,))
    conn.close()
    with pytest.raises(StoreError) as corrupt:
        SqliteStores(db)
    assert corrupt.value.code == "store_corrupt"
    assert corrupt.value.details["version"] == repr(version)


def test_a_file_that_cannot_be_opened_is_a_store_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError) as failed:
        SqliteStores(tmp_path / "missing" / "chat.db")
    assert failed.value.code == "store_error"


@pytest.mark.parametrize(
    ("option", "value"), [("busy_timeout", -1), ("branch_lease_seconds", 0.01)]
)
def test_bad_options_are_config_errors(tmp_path: Path, option: str, value: float) -> None:
    with pytest.raises(ConfigError) as bad:
        SqliteStores(tmp_path / "chat.db", **{option: value})
    assert bad.value.details["field"] == option


async def test_a_closed_store_refuses_every_call(tmp_path: Path) -> None:
    stores = SqliteStores(tmp_path / "chat.db")
    stores.close()
    stores.close()
    assert stores.closed
    with pytest.raises(StoreError) as closed:
        await stores.profiles.get_profile("p")
    assert closed.value.code == "store_closed"
    with pytest.raises(StoreError) as closed:
        await stores.profiles.save_profile(PROFILE)
    assert closed.value.code == "store_closed"


async def test_a_record_that_does_not_parse_is_a_store_error(tmp_path: Path) -> None:
    db = tmp_path / "chat.db"
    with SqliteStores(db) as stores:
        conn = sqlite3.connect(db)
        with conn:
            conn.execute("INSERT INTO profiles (profile_id, data) VALUES ('p', '{\"name\": 1}')")
        conn.close()
        with pytest.raises(StoreError) as corrupt:
            await stores.profiles.get_profile("p")
        assert corrupt.value.code == "store_corrupt"


async def test_a_write_that_waits_too_long_for_another_writer_is_store_busy(
    tmp_path: Path,
) -> None:
    db = tmp_path / "chat.db"
    with SqliteStores(db, busy_timeout=0) as stores:
        other = sqlite3.connect(db, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")
            with pytest.raises(StoreError) as busy:
                await stores.profiles.save_profile(PROFILE)
            assert busy.value.code == "store_busy"
            assert await stores.chats.history("c", "main") == []  # reads do not wait
            other.execute("ROLLBACK")
        finally:
            other.close()
        await stores.profiles.save_profile(PROFILE)


async def test_events_delivered_twice_are_kept_once(tmp_path: Path) -> None:
    def event(seq: int) -> RunStarted:
        return RunStarted(
            seq=seq,
            ts=SystemClock().now(),
            run_id="r",
            chat_id="c",
            user_message_id="u",
            trigger=Trigger.GENERATE,
        )

    with SqliteStores(tmp_path / "chat.db") as stores:
        await stores.runs.append_events("r", [event(s) for s in (1, 2, 3)])
        await stores.runs.append_events("r", [event(s) for s in (2, 3, 4, 5)])
        assert [e.seq for e in await stores.runs.events("r")] == [1, 2, 3, 4, 5]


async def test_a_follower_reads_a_final_batch_committed_while_it_polls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process commits a run's last events (run.finished among them) just after a
    poll found nothing new: the follower still yields them before it ends."""
    path = tmp_path / "chat.db"
    run = make_run("r")
    rows = [
        (run.run_id, e.seq, RunEventAdapter.dump_json(e).decode())
        for e in delta_events(run.run_id, 1, 3, finish=True)
    ]
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    committed = False

    class CommitAfterEventsRead:
        def __init__(self, conn: sqlite3.Connection) -> None:
            self._conn = conn

        def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
            nonlocal committed
            cursor = self._conn.execute(sql, *args)
            if "FROM events" in sql and not committed:
                committed = True  # the other process's final batch, after this read
                other.executemany("INSERT INTO events (run_id, seq, data) VALUES (?, ?, ?)", rows)
            return cursor

    poll = sqlite_runs._poll
    monkeypatch.setattr(
        sqlite_runs,
        "_poll",
        lambda run_id, seen, conn: poll(run_id, seen, cast(Any, CommitAfterEventsRead(conn))),
    )
    try:
        with SqliteStores(path) as stores:
            await stores.runs.claim(run)
            followed = [event.seq async for event in stores.runs.follow(run.run_id)]
            assert committed
            assert followed == [e.seq for e in await stores.runs.events(run.run_id)] == [1, 2, 3]
    finally:
        other.close()


async def test_two_store_objects_on_one_file_share_records_and_branches(tmp_path: Path) -> None:
    db = tmp_path / "chat.db"
    with SqliteStores(db) as one, SqliteStores(db) as two, anyio.fail_after(30):
        await one.profiles.save_profile(PROFILE)
        assert await two.profiles.get_profile("p") == PROFILE
        entered = anyio.Event()

        async def wait_for_the_branch() -> None:
            async with two.runs.hold_branch("c", "main"):
                entered.set()

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


async def test_closing_the_stores_releases_the_branches_they_hold_and_wait_for(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Closing one store object frees its holds and waits at once for another (as for
    another process): not after their leases, which outlast the test here."""
    db = tmp_path / "chat.db"
    one = SqliteStores(db, branch_lease_seconds=3600)
    with SqliteStores(db) as two, anyio.fail_after(30):
        waiter_failed: list[StoreError] = []

        async def wait_for_the_branch() -> None:
            with pytest.raises(StoreError) as closed:
                async with one.runs.hold_branch("c", "main"):
                    raise AssertionError("entered a held branch")
            waiter_failed.append(closed.value)

        async with anyio.create_task_group() as tg, one.runs.hold_branch("c", "main"):
            tg.start_soon(wait_for_the_branch)
            while len(await _expires_at(db)) < 2:  # the holder and its waiter
                await anyio.sleep(0.01)
            one.close()
            assert await _expires_at(db) == []
            async with two.runs.hold_branch("c", "main", wait=False):  # free at once
                pass
        assert [e.code for e in waiter_failed] == ["store_closed"]
        async with two.runs.hold_branch("c", "main", wait=False):
            pass
    assert "could not" not in caplog.text  # nothing left to release or renew


async def _expires_at(db: Path) -> list[float]:
    """Lease ends of the branch holders and waiters, in ticket order."""
    return [e for (e,) in _query(db, "SELECT expires_at FROM branch_queue ORDER BY ticket")]


async def test_a_holder_renews_its_lease_while_it_holds(tmp_path: Path) -> None:
    db = tmp_path / "chat.db"
    with SqliteStores(db, branch_lease_seconds=0.3) as stores, anyio.fail_after(30):
        async with stores.runs.hold_branch("c", "main"):
            (first,) = await _expires_at(db)
            while (await _expires_at(db))[0] == first:
                await anyio.sleep(0.02)
            assert (await _expires_at(db))[0] > first


async def test_a_waiter_whose_lease_ran_out_queues_again(tmp_path: Path) -> None:
    db = tmp_path / "chat.db"
    with SqliteStores(db) as stores, anyio.fail_after(30):
        entered = anyio.Event()

        async def wait_for_the_branch() -> None:
            async with stores.runs.hold_branch("c", "main"):
                entered.set()

        async with anyio.create_task_group() as tg:
            async with stores.runs.hold_branch("c", "main"):
                tg.start_soon(wait_for_the_branch)
                while len(await _expires_at(db)) < 2:
                    await anyio.sleep(0.01)
                conn = sqlite3.connect(db)
                with conn:  # the waiter's process stalled past its lease
                    conn.execute(
                        "UPDATE branch_queue SET expires_at = 0"
                        " WHERE ticket = (SELECT MAX(ticket) FROM branch_queue)"
                    )
                conn.close()
            await entered.wait()
        assert entered.is_set()
        assert await _expires_at(db) == []  # both holds are gone from the queue


async def test_turns_on_one_branch_take_turns_through_a_runner(tmp_path: Path) -> None:
    with SqliteStores(tmp_path / "chat.db") as stores:
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


def _write_then_fail(conn: sqlite3.Connection) -> None:
    conn.execute("INSERT INTO profiles (profile_id, data) VALUES ('lost', '{}')")
    raise ValueError("refused after writing")


async def test_writes_queued_together_commit_together_and_fail_alone(tmp_path: Path) -> None:
    """Writes that queue up while another runs share its successor's transaction (group
    commit); each one that fails rolls back alone and raises to its own caller."""
    db = tmp_path / "chat.db"
    with SqliteStores(db) as stores, anyio.fail_after(30):
        gate = threading.Event()
        failures: list[BaseException] = []

        async def expect_failure() -> None:
            with pytest.raises(ValueError, match="refused after writing") as failed:
                await stores._db.write(_write_then_fail)
            failures.append(failed.value)

        async with anyio.create_task_group() as tg:
            tg.start_soon(stores._db.write, lambda conn: gate.wait(10))
            await anyio.sleep(0.05)  # the writer's thread is inside that job
            tg.start_soon(stores.profiles.save_profile, PROFILE)
            tg.start_soon(expect_failure)
            other = PROFILE.model_copy(update={"profile_id": "q"})
            tg.start_soon(stores.profiles.save_profile, other)
            await anyio.sleep(0.05)  # all three are queued
            gate.set()
        assert len(failures) == 1
        assert await stores.profiles.get_profile("p") == PROFILE
        assert await stores.profiles.get_profile("q") == other
    assert _query(db, "SELECT profile_id FROM profiles ORDER BY profile_id") == [("p",), ("q",)]


def _store_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("opsrun-sqlite")}


async def test_stores_stop_their_threads_when_closed_or_dropped(tmp_path: Path) -> None:
    others = _store_threads()
    stores = SqliteStores(tmp_path / "chat.db")
    await stores.profiles.save_profile(PROFILE)
    assert len(_store_threads() - others) == 3  # a writer, a reader and a checkpointer
    stores.close()
    assert _store_threads() - others == set()
    dropped = SqliteStores(tmp_path / "chat.db")
    assert await dropped.profiles.get_profile("p") == PROFILE
    assert len(_store_threads() - others) == 3
    del dropped
    gc.collect()
    for _ in range(100):  # the finalizer asked the threads to stop; they end at once
        if not _store_threads() - others:
            break
        await anyio.sleep(0.01)
    assert _store_threads() - others == set()


async def test_a_cancelled_call_waits_for_its_write_to_finish(tmp_path: Path) -> None:
    with SqliteStores(tmp_path / "chat.db") as stores, anyio.fail_after(30):
        gate = threading.Event()
        with anyio.move_on_after(0.05):
            threading.Timer(0.2, gate.set).start()
            await stores._db.write(lambda conn: gate.wait(10))
            assert gate.is_set()  # returned only once its transaction was over
            await anyio.sleep(10)  # the cancellation arrives at the next checkpoint
        assert gate.is_set()


async def test_the_wal_is_checkpointed_in_the_background(tmp_path: Path) -> None:
    """Commits wake the checkpointer thread every ``EVERY_COMMITS``; its checkpoints
    leave every record readable, before and after the stores are reopened."""
    from opsrun.stores._sqlite._checkpoint import EVERY_COMMITS

    with SqliteStores(tmp_path / "chat.db") as stores:
        checkpointer = stores._db.checkpointer
        assert checkpointer is not None
        for i in range(2 * EVERY_COMMITS):  # one commit each
            await stores.profiles.save_profile(PROFILE.model_copy(update={"profile_id": f"p{i}"}))
        for _ in range(1000):
            if checkpointer.checkpoints >= 1:
                break
            await anyio.sleep(0.01)
        assert checkpointer.checkpoints >= 1
        assert await stores.profiles.get_profile(f"p{2 * EVERY_COMMITS - 1}") is not None
    with SqliteStores(tmp_path / "chat.db") as reopened:
        for i in range(2 * EVERY_COMMITS):
            assert await reopened.profiles.get_profile(f"p{i}") is not None


def test_a_private_database_has_no_checkpointer() -> None:
    with SqliteStores(":memory:") as stores:
        assert stores._db.checkpointer is None


def _variant_text(n: int, size: int) -> str:
    return MessageVariant(variant_id=f"v{n}", content="x" * size).model_dump_json()


def test_the_record_cache_keeps_the_newest_records_within_its_characters() -> None:
    texts = [_variant_text(n, 100) for n in range(20)]
    cache = RecordCache(size=100, chars=len(texts[-1]) * 5)
    first = [cache.parse(MessageVariant, text) for text in texts]
    again = [cache.parse(MessageVariant, text) for text in texts[-5:]]
    assert all(a is b for a, b in zip(again, first[-5:], strict=True))  # kept: not parsed again
    oldest = cache.parse(MessageVariant, texts[0])
    assert oldest == first[0]
    assert oldest is not first[0]  # let go for the newer ones: parsed anew


def test_the_record_cache_keeps_at_most_its_count_of_records() -> None:
    texts = [_variant_text(n, 1) for n in range(10)]
    cache = RecordCache(size=3)
    first = [cache.parse(MessageVariant, text) for text in texts]
    assert cache.parse(MessageVariant, texts[-1]) is first[-1]
    assert cache.parse(MessageVariant, texts[-4]) is not first[-4]
