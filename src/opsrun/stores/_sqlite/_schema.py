"""The SQLite schema as forward migrations, and the code that applies them on open.

Each migration is a tuple of steps, SQL statements or functions of the connection (for
data SQL cannot convert exactly); migration ``n`` (1-based) brings a file from schema
version ``n - 1`` to ``n``. A released migration is never edited: a change of the schema
is a new migration appended to :data:`MIGRATIONS`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TypeAlias

from ...errors import StoreError
from .._cursor import micros

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "Step", "migrate"]

Step: TypeAlias = str | Callable[[sqlite3.Connection], None]
"""One step of a migration: a statement, or a function that runs its own."""

_SESSION = (
    "chat_id TEXT NOT NULL, branch_id TEXT NOT NULL, profile_ref TEXT NOT NULL,"
    " session_id TEXT NOT NULL"
)


def _fill_started_us(conn: sqlite3.Connection) -> None:
    """Copy each run's ``startedAt`` into ``started_us`` (migration 2)."""
    rows = conn.execute("SELECT run_id, json_extract(data, '$.startedAt') FROM runs").fetchall()
    conn.executemany(
        "UPDATE runs SET started_us = ? WHERE run_id = ?",
        [(micros(datetime.fromisoformat(started)), run_id) for run_id, started in rows],
    )


MIGRATIONS: tuple[tuple[Step, ...], ...] = (
    (
        # Records are JSON (the models' camelCase dump); key columns are copies for lookups.
        "CREATE TABLE profiles (profile_id TEXT PRIMARY KEY, data TEXT NOT NULL)",
        f"CREATE TABLE sessions ({_SESSION}, data TEXT NOT NULL,"
        " PRIMARY KEY (chat_id, branch_id, profile_ref, session_id))",
        f"CREATE TABLE artifacts ({_SESSION}, tag TEXT NOT NULL, version INTEGER NOT NULL,"
        " data TEXT NOT NULL,"
        " PRIMARY KEY (chat_id, branch_id, profile_ref, session_id, tag))",
        f"CREATE TABLE archived_versions ({_SESSION}, tag TEXT NOT NULL,"
        " version INTEGER NOT NULL, run_id TEXT NOT NULL, data TEXT NOT NULL,"
        " PRIMARY KEY (chat_id, branch_id, profile_ref, session_id, tag, version))",
        "CREATE TABLE messages (chat_id TEXT NOT NULL, message_id TEXT NOT NULL,"
        " branch_id TEXT NOT NULL, position INTEGER NOT NULL, data TEXT NOT NULL,"
        " PRIMARY KEY (chat_id, message_id))",
        "CREATE UNIQUE INDEX messages_by_branch ON messages (chat_id, branch_id, position)",
        "CREATE TABLE runs (run_id TEXT PRIMARY KEY, chat_id TEXT NOT NULL,"
        " branch_id TEXT NOT NULL, dedupe_key TEXT NOT NULL, status TEXT NOT NULL,"
        " data TEXT NOT NULL, operation_runs TEXT NOT NULL DEFAULT '[]')",
        "CREATE INDEX runs_by_branch ON runs (chat_id, branch_id)",
        # One run holds a turn key at a time: the key is the primary key.
        "CREATE TABLE turn_keys (dedupe_key TEXT PRIMARY KEY, run_id TEXT NOT NULL)",
        "CREATE INDEX turn_keys_by_run ON turn_keys (run_id)",
        "CREATE TABLE events (run_id TEXT NOT NULL, seq INTEGER NOT NULL, data TEXT NOT NULL,"
        " PRIMARY KEY (run_id, seq)) WITHOUT ROWID",
        # Holders and waiters of a chat branch, first come first served by ticket; a row
        # whose expires_at (unix seconds) passed belongs to a process that stopped renewing.
        "CREATE TABLE branch_queue (ticket INTEGER PRIMARY KEY AUTOINCREMENT,"
        " chat_id TEXT NOT NULL, branch_id TEXT NOT NULL, owner TEXT NOT NULL UNIQUE,"
        " expires_at REAL NOT NULL)",
        "CREATE INDEX branch_queue_by_branch ON branch_queue (chat_id, branch_id, ticket)",
    ),
    (
        # The chat list and the runs of a chat, newest first.
        # messages.added orders a chat's messages by when they were added (its newest is
        # the chat's last message); rowid kept that order in version 1.
        "ALTER TABLE messages ADD COLUMN added INTEGER",
        "UPDATE messages SET added = rowid",
        "CREATE INDEX messages_by_added ON messages (chat_id, added)",
        # One row per chat with messages. write_seq orders writes (the store's own
        # sequence, exact within a clock tick); updated_us is the clock at that write
        # (unix microseconds). Version 1 kept no write times: migrated chats get the
        # time of the migration, in the order their newest messages were added.
        "CREATE TABLE chats (chat_id TEXT PRIMARY KEY, message_count INTEGER NOT NULL,"
        " write_seq INTEGER NOT NULL, updated_us INTEGER NOT NULL)",
        "CREATE UNIQUE INDEX chats_by_write ON chats (write_seq)",
        "INSERT INTO chats (chat_id, message_count, write_seq, updated_us)"
        " SELECT chat_id, COUNT(*), ROW_NUMBER() OVER (ORDER BY MAX(added)),"
        " CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)"
        " FROM messages GROUP BY chat_id",
        # runs.started_us: started_at as unix microseconds, exact and comparable.
        "ALTER TABLE runs ADD COLUMN started_us INTEGER",
        _fill_started_us,
        "CREATE INDEX runs_by_chat_started ON runs (chat_id, started_us, run_id)",
    ),
)
"""Every migration, oldest first."""


SCHEMA_VERSION = len(MIGRATIONS)
"""The schema version this release writes and reads."""


def _stored_version(conn: sqlite3.Connection) -> int:
    """The version in ``schema_version`` (0 when it holds none).

    Raises:
        StoreError: the stored version is not an integer (code ``store_corrupt``).
    """
    (version,) = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
    if version is None:
        return 0
    if type(version) is not int:  # the column's affinity keeps what is not a whole number
        raise StoreError(
            f"the database has a schema version that is not an integer: {version!r}",
            code="store_corrupt",
            details={"version": repr(version)},
        )
    return version


def migrate(conn: sqlite3.Connection, migrations: Sequence[Sequence[Step]] = MIGRATIONS) -> int:
    """Bring the database to the newest schema in one write transaction; return its version.

    Concurrent openers serialise on SQLite's write lock, so each migration runs once.

    Raises:
        StoreError: the file was written by a newer release (code ``schema_too_new``), or
            its schema version is not an integer (code ``store_corrupt``).
        sqlite3.Error: the database could not be read or written.
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
        current = _stored_version(conn)
        if current > len(migrations):
            raise StoreError(
                f"the database has schema version {current}; this release knows versions up "
                f"to {len(migrations)}",
                code="schema_too_new",
                details={"version": current, "supported": len(migrations)},
            )
        for version in range(current + 1, len(migrations) + 1):
            for step in migrations[version - 1]:
                if isinstance(step, str):
                    conn.execute(step)
                else:
                    step(conn)
            conn.execute("DELETE FROM schema_version")
            conn.execute("INSERT INTO schema_version (version) VALUES (?)", (version,))
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return max(current, len(migrations))
