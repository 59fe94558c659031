"""``PostgresStores``: every store port over one PostgreSQL schema."""

from __future__ import annotations

import math
from types import TracebackType

from psycopg.conninfo import conninfo_to_dict

from ..._config import require, require_at_least
from ._db import Database
from ._runs import PostgresRunStore
from ._stores import PostgresArchive, PostgresChatStore, PostgresProfileStore, PostgresSessionStore

__all__ = ["PostgresStores"]

_MAX_IDENTIFIER = 63  # bytes: PostgreSQL's NAMEDATALEN - 1


class PostgresStores:
    """Every store in one PostgreSQL schema: ``Runner(stores=stores)`` once it is open.

    Creating the object connects to nothing. Open it with ``async with`` (or
    ``await stores.open()`` and later ``await stores.close()``) inside the event loop that
    uses it: opening creates the schema or applies the migrations it lacks (with
    ``migrate=False`` it only checks that the schema is current) and starts the
    connection pools. Any number of processes may use one schema: turn keys, artifact
    versions and branch holds are exact across all of them. Runs on asyncio and trio
    (psycopg's blocking calls run in worker threads).

    Args:
        dsn: A libpq connection string or URL (``postgresql://user@host/db``).
        schema: The schema that holds the tables; created when missing.
        min_size: Connections the pool keeps open for store calls.
        max_size: Most store calls in progress at once (one connection each).
        max_branch_holds: Most chat branches this object holds or waits for at once (one
            connection each, beside ``max_size``); more runs wait for a slot.
        timeout: Seconds to connect, and that a call waits for a connection before it
            fails with ``store_unavailable``.
        migrate: Apply missing migrations on open (True) or refuse an outdated schema
            with ``schema_outdated`` (False: run :meth:`migrate` in your deployment).
        branch_keepalive_seconds: TCP keepalive idle time the server uses on a branch
            hold's connection, so that a holder whose host vanished frees the branch
            after about twice this; None leaves the server's settings.

    Raises:
        ConfigError: an option is out of range, the schema name is empty or longer than
            63 bytes, or ``dsn`` does not parse.
    """

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = "opsrun",
        min_size: int = 1,
        max_size: int = 10,
        max_branch_holds: int = 20,
        timeout: float = 30.0,
        migrate: bool = True,
        branch_keepalive_seconds: int | None = 30,
    ) -> None:
        self.schema = schema
        self.min_size = min_size
        self.max_size = max_size
        self.max_branch_holds = max_branch_holds
        self.timeout = timeout
        self.branch_keepalive_seconds = branch_keepalive_seconds
        require(
            self,
            "schema",
            isinstance(schema, str) and 0 < _utf8_length(schema) <= _MAX_IDENTIFIER,
            f"a name of 1 to {_MAX_IDENTIFIER} bytes of UTF-8",
        )
        require_at_least(self, 0, "min_size")
        require_at_least(self, max(1, min_size), "max_size")
        require_at_least(self, 1, "max_branch_holds", "branch_keepalive_seconds", optional=True)
        require_at_least(self, 0.1, "timeout")
        require(self, "timeout", math.isfinite(timeout), "a finite number of seconds")
        for field in ("min_size", "max_size", "max_branch_holds"):
            require(self, field, isinstance(getattr(self, field), int), "an int")
        self._migrate = migrate
        self._db = Database(
            dsn,
            schema=schema,
            min_size=min_size,
            max_size=max_size,
            max_holds=max_branch_holds,
            timeout=timeout,
        )
        self.profiles = PostgresProfileStore(self._db)
        """Operation profiles."""
        self.sessions = PostgresSessionStore(self._db)
        """Profile sessions and their persisted artifacts."""
        self.chats = PostgresChatStore(self._db)
        """Chat messages."""
        self.runs = PostgresRunStore(self._db, branch_keepalive=branch_keepalive_seconds)
        """Runs, operation runs, events and branch holds."""
        self.archive = PostgresArchive(self._db)
        """Artifact versions that retention pruned."""

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called."""
        return self._db.state == "closed"

    async def open(self) -> None:
        """Connect, bring the schema up to date (or check it) and start the pools.

        Opening an open store does nothing.

        Raises:
            StoreError: the server cannot be reached (``store_unavailable``), the schema
                is outdated and ``migrate`` is False (``schema_outdated``), it was
                written by a newer release (``schema_too_new``), its version is not an
                integer (``store_corrupt``), the stores were closed (``store_closed``),
                or PostgreSQL failed (``store_error``).
        """
        await self._db.open(apply_migrations=self._migrate)

    async def migrate(self) -> int:
        """Create the schema or apply the migrations it lacks; return its version.

        Uses a connection of its own, so it works whether or not the stores are open.
        Migrations run in one transaction under an advisory lock: a failed migration
        changes nothing, and processes migrating at once apply each migration once.

        Raises:
            StoreError: the server cannot be reached (``store_unavailable``), the schema
                was written by a newer release (``schema_too_new``), its version is not
                an integer (``store_corrupt``), or PostgreSQL failed (``store_error``).
        """
        return await self._db.migrate()

    async def close(self) -> None:
        """Close the pools; every later call raises ``StoreError`` (``store_closed``).

        Waits for the calls in progress. Followers of runs end with ``store_closed`` and
        close their listening connections. Closing twice is harmless.
        """
        await self._db.close()

    async def __aenter__(self) -> PostgresStores:
        try:
            await self.open()
        except BaseException:  # cancelled as the pool started: nothing may keep running
            await self.close()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def __repr__(self) -> str:
        # Never the whole DSN: it may hold a password.
        params = conninfo_to_dict(self._db.dsn)
        where = " ".join(
            f"{name}={params[name]}" for name in ("host", "port", "dbname") if params.get(name)
        )
        return f"PostgresStores({where!r}, schema={self.schema!r})"


def _utf8_length(name: str) -> int:
    """Bytes of ``name`` in UTF-8; 0 when it has none (a lone surrogate)."""
    try:
        return len(name.encode())
    except UnicodeEncodeError:
        return 0
