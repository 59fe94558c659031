"""SQLite profile, session (artifact), chat and archive stores over one :class:`Database`."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import UTC, datetime

from ...errors import ArtifactConflict, NotFound
from ...model import (
    ArchivedVersion,
    Artifact,
    ArtifactVersion,
    ChatMessage,
    ChatSummary,
    OperationProfile,
    OperationProfileSession,
    OperationProfileSessionKey,
    Page,
)
from .._cursor import check_limit, decode_cursor, encode_cursor, from_micros, micros
from .._json import record_json
from ._db import Database

__all__ = ["SqliteArchive", "SqliteChatStore", "SqliteProfileStore", "SqliteSessionStore"]

_SESSION_COLUMNS = "chat_id, branch_id, profile_ref, session_id"
_IN_SESSION = "chat_id = ? AND branch_id = ? AND profile_ref = ? AND session_id = ?"


class SqliteProfileStore:
    """Operation profiles, one JSON record per profile id."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def get_profile(self, profile_id: str) -> OperationProfile:
        """Return the profile.

        Raises:
            NotFound: there is no such profile (code ``not_found``).
            StoreError: the database failed.
        """

        def read(conn: sqlite3.Connection) -> OperationProfile | None:
            row = conn.execute(
                "SELECT data FROM profiles WHERE profile_id = ?", (profile_id,)
            ).fetchone()
            return None if row is None else self._db.records.parse(OperationProfile, row[0])

        profile = await self._db.read(read)
        if profile is None:
            raise NotFound(f"no profile {profile_id!r}")
        return profile

    async def save_profile(self, profile: OperationProfile) -> None:
        """Insert or replace the profile.

        Raises:
            StoreError: the database failed.
        """
        data = record_json(profile)

        def write(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT OR REPLACE INTO profiles (profile_id, data) VALUES (?, ?)",
                (profile.profile_id, data),
            )

        await self._db.write(write)


class SqliteSessionStore:
    """Profile sessions and their latest artifacts, with compare-and-set writes."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def get_or_create_session(
        self, key: OperationProfileSessionKey, now: datetime
    ) -> OperationProfileSession:
        """Return the session for ``key``, creating it (``created_at=now``) when missing.

        Raises:
            StoreError: the database failed.
        """
        where = key.as_tuple()

        def read(conn: sqlite3.Connection) -> OperationProfileSession | None:
            row = conn.execute(f"SELECT data FROM sessions WHERE {_IN_SESSION}", where).fetchone()
            return None if row is None else self._db.records.parse(OperationProfileSession, row[0])

        data = record_json(OperationProfileSession(key=key, created_at=now))

        def create(conn: sqlite3.Connection) -> OperationProfileSession:
            conn.execute(
                f"INSERT OR IGNORE INTO sessions ({_SESSION_COLUMNS}, data) VALUES (?, ?, ?, ?, ?)",
                (*where, data),
            )
            session = read(conn)
            assert session is not None  # inserted or already there, in this transaction
            return session

        # The common case reads; only a new session takes the write lock.
        session = await self._db.read(read)
        return session if session is not None else await self._db.write(create)

    async def get_artifacts(self, key: OperationProfileSessionKey) -> dict[str, Artifact]:
        """Return the latest artifact of every tag in the session (empty when none).

        Raises:
            StoreError: the database failed.
        """

        def read(conn: sqlite3.Connection) -> dict[str, Artifact]:
            rows = conn.execute(
                f"SELECT tag, data FROM artifacts WHERE {_IN_SESSION}", key.as_tuple()
            ).fetchall()
            return {tag: self._db.records.parse(Artifact, data) for tag, data in rows}

        return await self._db.read(read)

    async def put_artifact(
        self,
        key: OperationProfileSessionKey,
        artifact: Artifact,
        *,
        expected_version: int | None,
    ) -> None:
        """Store ``artifact`` as the latest value of its tag if the stored version is
        ``expected_version`` (None: no artifact yet); check and write are one transaction.

        Raises:
            ArtifactConflict: the stored version differs (code ``artifact_conflict``).
            StoreError: the database failed.
        """
        data = record_json(artifact)
        where = (*key.as_tuple(), artifact.tag)

        def write(conn: sqlite3.Connection) -> None:
            row = conn.execute(
                f"SELECT version FROM artifacts WHERE {_IN_SESSION} AND tag = ?", where
            ).fetchone()
            current = None if row is None else int(row[0])
            if current != expected_version:
                raise ArtifactConflict(
                    f"art.{artifact.tag} is at version {current}, "
                    f"the write was based on {expected_version}",
                    details={
                        "tag": artifact.tag,
                        "currentVersion": current,
                        "basedOnVersion": expected_version,
                    },
                )
            conn.execute(
                f"INSERT OR REPLACE INTO artifacts ({_SESSION_COLUMNS}, tag, version, data)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (*where, artifact.version, data),
            )

        await self._db.write(write)


class SqliteChatStore:
    """Chat messages per (chat, branch), in the order they were first saved, and the chat
    list (table ``chats``: one row per chat with messages, kept in step by every write)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def history(self, chat_id: str, branch_id: str) -> list[ChatMessage]:
        """Return the branch's messages, oldest first.

        Raises:
            StoreError: the database failed.
        """

        def read(conn: sqlite3.Connection) -> list[ChatMessage]:
            rows = conn.execute(
                "SELECT data FROM messages WHERE chat_id = ? AND branch_id = ? ORDER BY position",
                (chat_id, branch_id),
            ).fetchall()
            parse = self._db.records.parse
            return [parse(ChatMessage, data) for (data,) in rows]

        return await self._db.read(read)

    async def get_message(self, chat_id: str, message_id: str) -> ChatMessage:
        """Return one message.

        Raises:
            NotFound: there is no such message in the chat (code ``not_found``).
            StoreError: the database failed.
        """

        def read(conn: sqlite3.Connection) -> ChatMessage | None:
            row = conn.execute(
                "SELECT data FROM messages WHERE chat_id = ? AND message_id = ?",
                (chat_id, message_id),
            ).fetchone()
            return None if row is None else self._db.records.parse(ChatMessage, row[0])

        message = await self._db.read(read)
        if message is None:
            raise NotFound(f"no message {message_id!r} in chat {chat_id!r}")
        return message

    async def save_message(self, message: ChatMessage) -> None:
        """Append a new message to its branch, or replace it in place if its id exists.

        Raises:
            StoreError: the database failed.
        """
        data = record_json(message)
        chat_id, message_id, branch_id = message.chat_id, message.message_id, message.branch_id
        now = micros(datetime.now(UTC))

        def write(conn: sqlite3.Connection) -> None:
            replaced = conn.execute(
                "UPDATE messages SET data = ? WHERE chat_id = ? AND message_id = ?",
                (data, chat_id, message_id),
            ).rowcount
            if not replaced:
                conn.execute(
                    "INSERT INTO messages (chat_id, message_id, branch_id, position, added, data)"
                    " VALUES (?, ?, ?,"
                    " (SELECT COALESCE(MAX(position), 0) + 1 FROM messages"
                    "  WHERE chat_id = ? AND branch_id = ?),"
                    " (SELECT COALESCE(MAX(added), 0) + 1 FROM messages WHERE chat_id = ?), ?)",
                    (chat_id, message_id, branch_id, chat_id, branch_id, chat_id, data),
                )
            _wrote_chat(conn, chat_id, 0 if replaced else 1, now)

        await self._db.write(write)

    async def delete_message(self, chat_id: str, message_id: str) -> None:
        """Remove the message from its branch (the ones after it move up one place).

        Raises:
            NotFound: there is no such message in the chat (code ``not_found``).
            StoreError: the database failed.
        """
        now = micros(datetime.now(UTC))

        def write(conn: sqlite3.Connection) -> None:
            deleted = conn.execute(
                "DELETE FROM messages WHERE chat_id = ? AND message_id = ?", (chat_id, message_id)
            ).rowcount
            if not deleted:
                raise NotFound(f"no message {message_id!r} in chat {chat_id!r}")
            _wrote_chat(conn, chat_id, -1, now)

        await self._db.write(write)

    async def list_chats(self, *, limit: int = 50, cursor: str | None = None) -> Page[ChatSummary]:
        """Return a page of the chats with messages, most recently written first.

        Raises:
            ConfigError: ``limit`` is below 1.
            StoreError: ``cursor`` is not a cursor of this query (code ``bad_cursor``),
                or the database failed.
        """
        check_limit(limit)
        (before,) = decode_cursor("chats", cursor, int) if cursor is not None else (None,)

        def read(conn: sqlite3.Connection) -> list[tuple[str, int, int, int, str | None]]:
            return conn.execute(
                "SELECT chat_id, message_count, write_seq, updated_us,"
                " (SELECT message_id FROM messages WHERE messages.chat_id = chats.chat_id"
                "  ORDER BY added DESC LIMIT 1)"
                " FROM chats WHERE ? IS NULL OR write_seq < ? ORDER BY write_seq DESC LIMIT ?",
                (before, before, limit + 1),
            ).fetchall()

        rows = await self._db.read(read)
        items = tuple(
            ChatSummary(
                chat_id=chat_id,
                message_count=count,
                last_message_id=last,
                updated_at=from_micros(updated),
            )
            for chat_id, count, _, updated, last in rows[:limit]
        )
        more = len(rows) > limit
        return Page[ChatSummary](
            items=items, next_cursor=encode_cursor("chats", rows[limit - 1][2]) if more else None
        )


def _wrote_chat(conn: sqlite3.Connection, chat_id: str, added: int, now: int) -> None:
    """Record a write of the chat that added ``added`` messages (-1: deleted one) at ``now``
    (unix microseconds), in the write's transaction: its place in the chat list."""
    latest = conn.execute(
        "SELECT write_seq, updated_us FROM chats ORDER BY write_seq DESC LIMIT 1"
    ).fetchone()
    seq, updated = (1, now) if latest is None else (latest[0] + 1, max(now, latest[1]))
    conn.execute(
        "INSERT INTO chats (chat_id, message_count, write_seq, updated_us) VALUES (?, ?, ?, ?)"
        " ON CONFLICT (chat_id) DO UPDATE SET"
        " message_count = message_count + excluded.message_count,"
        " write_seq = excluded.write_seq, updated_us = excluded.updated_us",
        (chat_id, added, seq, updated),
    )
    if added < 0:
        conn.execute("DELETE FROM chats WHERE chat_id = ? AND message_count <= 0", (chat_id,))


class SqliteArchive:
    """Artifact versions that retention pruned, per session and tag (an ``ArtifactArchive``)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def archive(
        self,
        key: OperationProfileSessionKey,
        tag: str,
        versions: Sequence[ArtifactVersion],
        *,
        run_id: str,
    ) -> None:
        """Keep ``versions`` of ``art.<tag>``; a version archived twice is kept once.

        Raises:
            StoreError: the database failed (the runner then does not apply the write
                that pruned them).
        """
        rows = [(*key.as_tuple(), tag, v.version, run_id, record_json(v)) for v in versions]

        def write(conn: sqlite3.Connection) -> None:
            conn.executemany(
                f"INSERT OR IGNORE INTO archived_versions ({_SESSION_COLUMNS}, tag, version,"
                " run_id, data) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                rows,
            )

        await self._db.write(write)

    async def versions(self, key: OperationProfileSessionKey, tag: str) -> list[ArchivedVersion]:
        """The archived versions of ``art.<tag>``, newest first.

        Raises:
            StoreError: the database failed.
        """

        def read(conn: sqlite3.Connection) -> list[ArchivedVersion]:
            rows = conn.execute(
                f"SELECT data, run_id FROM archived_versions WHERE {_IN_SESSION} AND tag = ?"
                " ORDER BY version DESC",
                (*key.as_tuple(), tag),
            ).fetchall()
            return [
                ArchivedVersion(version=ArtifactVersion.model_validate_json(d), run_id=r)
                for d, r in rows
            ]

        return await self._db.read(read)
