"""Every store port over one SQLite file: the embedded default for one machine.

``SqliteStores("chat.db")`` opens (or creates) the file and is ready for
``Runner(stores=...)``. Uses only the standard library's ``sqlite3``, in worker threads,
so it runs on asyncio and trio. See ``docs/stores.md``.
"""

from __future__ import annotations

from ._sqlite._bundle import SqliteStores as SqliteStores
from ._sqlite._runs import SqliteRunStore as SqliteRunStore
from ._sqlite._schema import SCHEMA_VERSION as SCHEMA_VERSION
from ._sqlite._stores import SqliteArchive as SqliteArchive
from ._sqlite._stores import SqliteChatStore as SqliteChatStore
from ._sqlite._stores import SqliteProfileStore as SqliteProfileStore
from ._sqlite._stores import SqliteSessionStore as SqliteSessionStore

__all__ = [
    "SCHEMA_VERSION",
    "SqliteArchive",
    "SqliteChatStore",
    "SqliteProfileStore",
    "SqliteRunStore",
    "SqliteSessionStore",
    "SqliteStores",
]
