"""``SqliteStores``: every store port over one SQLite file."""

from __future__ import annotations

import os
from types import TracebackType

from ..._config import require_at_least
from ._db import Database
from ._runs import SqliteRunStore
from ._stores import SqliteArchive, SqliteChatStore, SqliteProfileStore, SqliteSessionStore

__all__ = ["SqliteStores"]


class SqliteStores:
    """Every store over one SQLite file: ``Runner(stores=SqliteStores("chat.db"))``.

    Opening creates the file if needed, switches it to WAL mode and applies the schema
    migrations it lacks. Any number of processes may open the same file: turn keys,
    artifact versions and branch holds are exact across all of them. ``":memory:"``
    opens a private database for tests that lives as long as this object.

    Args:
        path: The database file (or ``":memory:"``).
        busy_timeout: Seconds a call waits for another process's write before it fails
            with ``store_busy``.
        branch_lease_seconds: How long a branch hold outlives its process if that
            process dies; the holder renews it every third of that.

    Raises:
        ConfigError: ``busy_timeout`` is negative or ``branch_lease_seconds`` is below
            0.1.
        StoreError: the file cannot be opened (``store_error``), stays locked longer
            than ``busy_timeout`` (``store_busy``), was written by a newer release
            (``schema_too_new``), or holds a schema version that is not an integer
            (``store_corrupt``).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        busy_timeout: float = 5.0,
        branch_lease_seconds: float = 30.0,
    ) -> None:
        self.busy_timeout = busy_timeout
        self.branch_lease_seconds = branch_lease_seconds
        require_at_least(self, 0, "busy_timeout")
        require_at_least(self, 0.1, "branch_lease_seconds")
        self._db = Database(path, busy_timeout=busy_timeout)
        self.path: str = self._db.path
        """The database file as given (``":memory:"`` for a private database)."""
        self.profiles = SqliteProfileStore(self._db)
        """Operation profiles."""
        self.sessions = SqliteSessionStore(self._db)
        """Profile sessions and their persisted artifacts."""
        self.chats = SqliteChatStore(self._db)
        """Chat messages."""
        self.runs = SqliteRunStore(self._db, branch_lease_seconds=branch_lease_seconds)
        """Runs, operation runs, events and branch holds."""
        self.archive = SqliteArchive(self._db)
        """Artifact versions that retention pruned."""

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called."""
        return self._db.closed

    def close(self) -> None:
        """Close the database; every later call raises ``StoreError`` (``store_closed``).

        Waits for a call in progress to finish. The branches this object holds or waits
        for are freed first, so that other processes can take them at once. Closing
        twice is harmless.
        """
        self._db.close()

    def __enter__(self) -> SqliteStores:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SqliteStores({self.path!r})"
