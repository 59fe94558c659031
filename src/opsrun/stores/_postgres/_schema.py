"""The PostgreSQL schema as forward migrations, and the code that applies them.

Each migration is a tuple of statements in which ``{s}`` stands for the configured schema
(quoted as an identifier); migration ``n`` (1-based) brings a schema from version
``n - 1`` to ``n``. A released migration is never edited: a change of the schema is a new
migration appended to :data:`MIGRATIONS`.
"""

from __future__ import annotations

from collections.abc import Sequence
from hashlib import blake2b
from typing import LiteralString, TypeAlias

import psycopg
from psycopg import sql
from psycopg.rows import TupleRow

from ...errors import StoreError

__all__ = [
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "Conn",
    "advisory_key",
    "check_version",
    "migrate",
    "read_version",
    "statement",
]

Conn: TypeAlias = psycopg.Connection[TupleRow]
"""A connection as the stores use it (rows are tuples)."""

_ID = 'text COLLATE "C" NOT NULL'  # ids compare by code point, as Python compares them
_SESSION = f"chat_id {_ID}, branch_id {_ID}, profile_ref {_ID}, session_id {_ID}"

MIGRATIONS: tuple[tuple[LiteralString, ...], ...] = (
    (
        # Records are the models' JSON (camelCase) in `json` columns: the text is kept as
        # written (jsonb would refuse \u0000 and renormalise numbers); key columns are
        # copies for lookups.
        f"CREATE TABLE {{s}}.profiles (profile_id {_ID} PRIMARY KEY, data json NOT NULL)",
        f"CREATE TABLE {{s}}.sessions ({_SESSION}, data json NOT NULL,"
        " PRIMARY KEY (chat_id, branch_id, profile_ref, session_id))",
        # `version` is the row version that compare-and-set writes check.
        f"CREATE TABLE {{s}}.artifacts ({_SESSION}, tag {_ID},"
        " version integer NOT NULL, data json NOT NULL,"
        " PRIMARY KEY (chat_id, branch_id, profile_ref, session_id, tag))",
        f"CREATE TABLE {{s}}.archived_versions ({_SESSION}, tag {_ID},"
        f" version integer NOT NULL, run_id {_ID}, data json NOT NULL,"
        " archived_at timestamptz NOT NULL DEFAULT now(),"
        " PRIMARY KEY (chat_id, branch_id, profile_ref, session_id, tag, version))",
        # position: the order messages were first saved (an identity, never reused).
        f"CREATE TABLE {{s}}.messages (chat_id {_ID}, message_id {_ID}, branch_id {_ID},"
        " position bigint GENERATED ALWAYS AS IDENTITY, data json NOT NULL,"
        " PRIMARY KEY (chat_id, message_id))",
        "CREATE INDEX messages_by_branch ON {s}.messages (chat_id, branch_id, position)",
        "CREATE INDEX messages_by_chat ON {s}.messages (chat_id, position)",
        # The chat list: each write of a chat's messages gives the chat the next tick
        # (an identity, taken again with `SET tick = DEFAULT`), so chats are ordered by
        # their last write even within one clock tick, without a lock that all writers
        # share.
        f"CREATE TABLE {{s}}.chats (chat_id {_ID} PRIMARY KEY,"
        " tick bigint GENERATED ALWAYS AS IDENTITY, updated_at timestamptz NOT NULL)",
        "CREATE INDEX chats_by_tick ON {s}.chats (tick)",
        f"CREATE TABLE {{s}}.runs (run_id {_ID} PRIMARY KEY, chat_id {_ID},"
        f" branch_id {_ID}, dedupe_key text NOT NULL, status text NOT NULL,"
        " abort_reason text, started_at timestamptz NOT NULL, data json NOT NULL,"
        " operation_runs json NOT NULL DEFAULT '[]')",
        "CREATE INDEX runs_by_chat ON {s}.runs (chat_id, started_at, run_id)",
        # One run holds a turn key at a time: the key is the primary key.
        f"CREATE TABLE {{s}}.turn_keys (dedupe_key text PRIMARY KEY, run_id {_ID})",
        "CREATE INDEX turn_keys_by_run ON {s}.turn_keys (run_id)",
        f"CREATE TABLE {{s}}.events (run_id {_ID}, seq integer NOT NULL, type text NOT NULL,"
        " data json NOT NULL, PRIMARY KEY (run_id, seq))",
    ),
)
"""Every migration, oldest first."""

SCHEMA_VERSION = len(MIGRATIONS)
"""The schema version this release writes and reads."""


def advisory_key(*parts: str) -> int:
    """A signed 64-bit advisory lock key for ``parts`` (the schema first, so that two
    schemas in one database never share a lock)."""
    digest = blake2b("\0".join(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def statement(schema: str, text: LiteralString) -> bytes | sql.Composed:
    """``text`` with ``{s}`` replaced by ``schema`` quoted as an identifier.

    Rendered to bytes once when the schema name is ASCII (the same in every client
    encoding), so that running it does not compose it again each time.
    """
    composed = sql.SQL(text).format(s=sql.Identifier(schema))
    return composed.as_bytes(None) if schema.isascii() else composed


def read_version(conn: Conn, schema: str) -> int:
    """The schema version stored in ``schema`` (0 when it has no ``schema_version`` table).

    Raises:
        StoreError: the stored version is not an integer (code ``store_corrupt``).
    """
    table = conn.execute(
        "SELECT to_regclass(format('%%I.schema_version', %s::text))", (schema,)
    ).fetchone()
    if table is None or table[0] is None:
        return 0
    row = conn.execute(statement(schema, "SELECT max(version) FROM {s}.schema_version")).fetchone()
    version = None if row is None else row[0]
    if version is None:
        return 0
    if type(version) is not int:  # a table this release did not make
        raise StoreError(
            f"the schema {schema!r} has a version that is not an integer: {version!r}",
            code="store_corrupt",
            details={"schema": schema, "version": repr(version)},
        )
    return version


def _too_new(schema: str, version: int, supported: int) -> StoreError:
    return StoreError(
        f"the schema {schema!r} has version {version}; this release knows versions up to "
        f"{supported}",
        code="schema_too_new",
        details={"schema": schema, "version": version, "supported": supported},
    )


def check_version(conn: Conn, schema: str) -> int:
    """Return the stored schema version if it is the one this release uses.

    Raises:
        StoreError: the schema lacks migrations (``schema_outdated``), was written by a
            newer release (``schema_too_new``), or its version is not an integer
            (``store_corrupt``).
    """
    version = read_version(conn, schema)
    if version > SCHEMA_VERSION:
        raise _too_new(schema, version, SCHEMA_VERSION)
    if version < SCHEMA_VERSION:
        raise StoreError(
            f"the schema {schema!r} has version {version}, this release needs "
            f"{SCHEMA_VERSION}: run `await stores.migrate()` or open with migrate=True",
            code="schema_outdated",
            details={"schema": schema, "version": version, "supported": SCHEMA_VERSION},
        )
    return version


def migrate(
    conn: Conn,
    schema: str,
    migrations: Sequence[Sequence[LiteralString]] = MIGRATIONS,
) -> int:
    """Create ``schema`` if needed and apply the migrations it lacks; return its version.

    Everything happens in one transaction under an advisory lock of the schema, so a
    failed migration changes nothing and concurrent callers (in any process) apply each
    migration once. ``conn`` must be in autocommit mode.

    Raises:
        StoreError: the schema was written by a newer release (code ``schema_too_new``),
            or its version is not an integer (code ``store_corrupt``).
        psycopg.Error: the database could not be read or written.
    """
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (advisory_key(schema, "migrate"),))
        exists = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,))
        if exists.fetchone() is None:
            conn.execute(statement(schema, "CREATE SCHEMA {s}"))
        conn.execute(
            statement(
                schema, "CREATE TABLE IF NOT EXISTS {s}.schema_version (version integer NOT NULL)"
            )
        )
        current = read_version(conn, schema)
        if current > len(migrations):
            raise _too_new(schema, current, len(migrations))
        for version in range(current + 1, len(migrations) + 1):
            for text in migrations[version - 1]:
                conn.execute(statement(schema, text))
            conn.execute(statement(schema, "DELETE FROM {s}.schema_version"))
            conn.execute(
                statement(schema, "INSERT INTO {s}.schema_version (version) VALUES (%s)"),
                (version,),
            )
    return max(current, len(migrations))
