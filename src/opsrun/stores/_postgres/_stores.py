"""PostgreSQL profile, session (artifact), chat and archive stores over one :class:`Database`."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

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
from .._cursor import check_limit, decode_cursor, encode_cursor, micros
from .._json import record_json
from ._db import Database
from ._schema import Conn, statement

__all__ = ["PostgresArchive", "PostgresChatStore", "PostgresProfileStore", "PostgresSessionStore"]

_IN_SESSION = "chat_id = %s AND branch_id = %s AND profile_ref = %s AND session_id = %s"

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_FIRST_CHAT_PAGE = (2**63 - 1, datetime.max.replace(tzinfo=UTC))
"""Where the chat list starts: above every tick, and the latest time."""

# The tail of a WITH that writes messages (its `saved` part returns the chat of each
# message written): give the chat the next tick of the chat list, and the time.
_TOUCH_CHAT = (
    ", touched AS (INSERT INTO {s}.chats (chat_id, updated_at)"
    " SELECT %(chat)s, clock_timestamp() WHERE EXISTS (SELECT FROM saved)"
    " ON CONFLICT (chat_id) DO UPDATE SET tick = DEFAULT, updated_at = excluded.updated_at)"
)


class PostgresProfileStore:
    """Operation profiles, one JSON record per profile id."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._get = statement(
            db.schema, "SELECT data::text FROM {s}.profiles WHERE profile_id = %s"
        )
        self._put = statement(
            db.schema,
            "INSERT INTO {s}.profiles (profile_id, data) VALUES (%s, %s)"
            " ON CONFLICT (profile_id) DO UPDATE SET data = excluded.data",
        )

    async def get_profile(self, profile_id: str) -> OperationProfile:
        """Return the profile.

        Raises:
            NotFound: there is no such profile (code ``not_found``).
            StoreError: PostgreSQL failed.
        """

        def read(conn: Conn) -> OperationProfile | None:
            row = conn.execute(self._get, (profile_id,)).fetchone()
            return None if row is None else OperationProfile.model_validate_json(row[0])

        profile = await self._db.call(read, transaction=False)
        if profile is None:
            raise NotFound(f"no profile {profile_id!r}")
        return profile

    async def save_profile(self, profile: OperationProfile) -> None:
        """Insert or replace the profile.

        Raises:
            StoreError: PostgreSQL failed.
        """
        params = (profile.profile_id, record_json(profile))
        await self._db.call(lambda conn: conn.execute(self._put, params), transaction=False)


class PostgresSessionStore:
    """Profile sessions and their latest artifacts, with compare-and-set writes."""

    def __init__(self, db: Database) -> None:
        self._db = db
        schema = db.schema
        self._create = statement(
            schema,
            "INSERT INTO {s}.sessions (chat_id, branch_id, profile_ref, session_id, data)"
            " VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
        )
        self._session = statement(
            schema, f"SELECT data::text FROM {{s}}.sessions WHERE {_IN_SESSION}"
        )
        self._artifacts = statement(
            schema, f"SELECT tag, data::text FROM {{s}}.artifacts WHERE {_IN_SESSION}"
        )
        self._insert = statement(
            schema,
            "INSERT INTO {s}.artifacts"
            " (chat_id, branch_id, profile_ref, session_id, tag, version, data)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
        )
        self._update = statement(
            schema,
            f"UPDATE {{s}}.artifacts SET version = %s, data = %s WHERE {_IN_SESSION}"
            " AND tag = %s AND version = %s",
        )
        self._version = statement(
            schema, f"SELECT version FROM {{s}}.artifacts WHERE {_IN_SESSION} AND tag = %s"
        )

    async def get_or_create_session(
        self, key: OperationProfileSessionKey, now: datetime
    ) -> OperationProfileSession:
        """Return the session for ``key``, creating it (``created_at=now``) when missing.

        Raises:
            StoreError: PostgreSQL failed.
        """
        data = record_json(OperationProfileSession(key=key, created_at=now))

        def read(conn: Conn) -> OperationProfileSession | None:
            row = conn.execute(self._session, key.as_tuple()).fetchone()
            return None if row is None else OperationProfileSession.model_validate_json(row[0])

        def create(conn: Conn) -> OperationProfileSession:
            conn.execute(self._create, (*key.as_tuple(), data))
            session = read(conn)  # a statement of its own: sees a concurrent insert too
            assert session is not None  # inserted or already there, and never deleted
            return session

        # The common case reads; only a new session writes.
        session = await self._db.call(read, transaction=False)
        return session if session is not None else await self._db.call(create)

    async def get_artifacts(self, key: OperationProfileSessionKey) -> dict[str, Artifact]:
        """Return the latest artifact of every tag in the session (empty when none).

        Raises:
            StoreError: PostgreSQL failed.
        """

        def read(conn: Conn) -> dict[str, Artifact]:
            rows = conn.execute(self._artifacts, key.as_tuple()).fetchall()
            return {tag: Artifact.model_validate_json(data) for tag, data in rows}

        return await self._db.call(read, transaction=False)

    async def put_artifact(
        self,
        key: OperationProfileSessionKey,
        artifact: Artifact,
        *,
        expected_version: int | None,
    ) -> None:
        """Store ``artifact`` as the latest value of its tag if the stored version is
        ``expected_version`` (None: no artifact yet).

        The check is part of the write: an ``INSERT … ON CONFLICT DO NOTHING`` for a first
        version, an ``UPDATE … WHERE version = expected`` otherwise, so of two writers on
        one version exactly one applies, in any process.

        Raises:
            ArtifactConflict: the stored version differs (code ``artifact_conflict``).
            StoreError: PostgreSQL failed.
        """
        where = (*key.as_tuple(), artifact.tag)
        data = record_json(artifact)
        params: tuple[object, ...]
        if expected_version is None:
            write, params = self._insert, (*where, artifact.version, data)
        else:
            write, params = self._update, (artifact.version, data, *where, expected_version)

        def put(conn: Conn) -> None:
            if conn.execute(write, params).rowcount == 1:
                return
            row = conn.execute(self._version, where).fetchone()
            stored = None if row is None else int(row[0])
            raise ArtifactConflict(
                f"art.{artifact.tag} is at version {stored}, "
                f"the write was based on {expected_version}",
                details={
                    "tag": artifact.tag,
                    "currentVersion": stored,
                    "basedOnVersion": expected_version,
                },
            )

        # One statement checks and writes, so it needs no transaction of its own.
        await self._db.call(put, transaction=False)


class PostgresChatStore:
    """Chat messages per (chat, branch), in the order they were first saved."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._history = statement(
            db.schema,
            "SELECT data::text FROM {s}.messages WHERE chat_id = %s AND branch_id = %s"
            " ORDER BY position",
        )
        self._get = statement(
            db.schema,
            "SELECT data::text FROM {s}.messages WHERE chat_id = %s AND message_id = %s",
        )
        # A known id keeps its branch and position: only its record is replaced. Each
        # write also moves the chat to the front of the chat list, in the same statement.
        self._save = statement(
            db.schema,
            "WITH saved AS (INSERT INTO {s}.messages (chat_id, message_id, branch_id, data)"
            " VALUES (%(chat)s, %(message)s, %(branch)s, %(data)s)"
            " ON CONFLICT (chat_id, message_id) DO UPDATE SET data = excluded.data"
            " RETURNING chat_id)" + _TOUCH_CHAT + " SELECT count(*) FROM saved",
        )
        self._delete = statement(
            db.schema,
            "WITH saved AS (DELETE FROM {s}.messages"
            " WHERE chat_id = %(chat)s AND message_id = %(message)s RETURNING chat_id)"
            + _TOUCH_CHAT
            + " SELECT count(*) FROM saved",
        )
        self._chats = statement(
            db.schema,
            "SELECT chats.chat_id, chats.tick, chats.updated_at, counts.messages, ("
            "  SELECT message_id FROM {s}.messages WHERE chat_id = chats.chat_id"
            "  ORDER BY position DESC LIMIT 1)"
            " FROM {s}.chats CROSS JOIN LATERAL ("
            "  SELECT count(*) AS messages FROM {s}.messages WHERE chat_id = chats.chat_id"
            " ) AS counts"
            " WHERE counts.messages > 0 AND chats.tick < %s"
            " ORDER BY chats.tick DESC LIMIT %s",
        )

    async def history(self, chat_id: str, branch_id: str) -> list[ChatMessage]:
        """Return the branch's messages, oldest first.

        Raises:
            StoreError: PostgreSQL failed.
        """

        def read(conn: Conn) -> list[ChatMessage]:
            rows = conn.execute(self._history, (chat_id, branch_id)).fetchall()
            return [ChatMessage.model_validate_json(data) for (data,) in rows]

        return await self._db.call(read, transaction=False)

    async def get_message(self, chat_id: str, message_id: str) -> ChatMessage:
        """Return one message.

        Raises:
            NotFound: there is no such message in the chat (code ``not_found``).
            StoreError: PostgreSQL failed.
        """

        def read(conn: Conn) -> ChatMessage | None:
            row = conn.execute(self._get, (chat_id, message_id)).fetchone()
            return None if row is None else ChatMessage.model_validate_json(row[0])

        message = await self._db.call(read, transaction=False)
        if message is None:
            raise NotFound(f"no message {message_id!r} in chat {chat_id!r}")
        return message

    async def save_message(self, message: ChatMessage) -> None:
        """Append a new message to its branch, or replace it in place if its id exists.

        Raises:
            StoreError: PostgreSQL failed.
        """
        params = {
            "chat": message.chat_id,
            "message": message.message_id,
            "branch": message.branch_id,
            "data": record_json(message),
        }
        await self._db.call(lambda conn: conn.execute(self._save, params), transaction=False)

    async def delete_message(self, chat_id: str, message_id: str) -> None:
        """Remove a message from its branch; the messages after it move up one place.

        Raises:
            NotFound: there is no such message in the chat (code ``not_found``).
            StoreError: PostgreSQL failed.
        """
        params = {"chat": chat_id, "message": message_id}

        def delete(conn: Conn) -> int:
            row = conn.execute(self._delete, params).fetchone()
            return 0 if row is None else int(row[0])

        if not await self._db.call(delete, transaction=False):
            raise NotFound(f"no message {message_id!r} in chat {chat_id!r}")

    async def list_chats(self, *, limit: int = 50, cursor: str | None = None) -> Page[ChatSummary]:
        """Return a page of the chats that have messages, most recently written first.

        Raises:
            ConfigError: ``limit`` is below 1.
            StoreError: the cursor is not one this query made (code ``bad_cursor``), or
                PostgreSQL failed.
        """
        check_limit(limit)
        before, shown = _FIRST_CHAT_PAGE
        if cursor is not None:
            before, at = decode_cursor("chats", cursor, int, int)
            shown = _EPOCH + timedelta(microseconds=at)

        def read(conn: Conn) -> list[tuple[Any, ...]]:
            return conn.execute(self._chats, (before, limit + 1)).fetchall()

        rows = await self._db.call(read, transaction=False)
        items: list[ChatSummary] = []
        for chat_id, _, updated_at, count, last in rows[:limit]:
            # Two writers may read the clock in the other order than they took their
            # ticks: show the earlier time, so that times never rise down the list.
            shown = min(shown, updated_at.astimezone(UTC))
            summary = ChatSummary(
                chat_id=chat_id, message_count=count, last_message_id=last, updated_at=shown
            )
            items.append(summary)
        next_cursor = None
        if len(rows) > limit:
            next_cursor = encode_cursor("chats", rows[limit - 1][1], micros(shown))
        return Page[ChatSummary](items=tuple(items), next_cursor=next_cursor)


class PostgresArchive:
    """Artifact versions that retention pruned, per session and tag (an ``ArtifactArchive``)."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._archive = statement(
            db.schema,
            "INSERT INTO {s}.archived_versions"
            " (chat_id, branch_id, profile_ref, session_id, tag, version, run_id, data)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
        )
        self._versions = statement(
            db.schema,
            f"SELECT data::text, run_id FROM {{s}}.archived_versions WHERE {_IN_SESSION}"
            " AND tag = %s ORDER BY version DESC",
        )

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
            StoreError: PostgreSQL failed (the runner then does not apply the write
                that pruned them).
        """
        rows = [(*key.as_tuple(), tag, v.version, run_id, record_json(v)) for v in versions]
        if rows:
            await self._db.call(lambda conn: conn.cursor().executemany(self._archive, rows))

    async def versions(self, key: OperationProfileSessionKey, tag: str) -> list[ArchivedVersion]:
        """The archived versions of ``art.<tag>``, newest first.

        Raises:
            StoreError: PostgreSQL failed.
        """

        def read(conn: Conn) -> list[ArchivedVersion]:
            rows = conn.execute(self._versions, (*key.as_tuple(), tag)).fetchall()
            return [
                ArchivedVersion(version=ArtifactVersion.model_validate_json(d), run_id=r)
                for d, r in rows
            ]

        return await self._db.call(read, transaction=False)
