"""Every store port over one PostgreSQL schema: for several processes and machines.

``async with PostgresStores(dsn) as stores:`` connects, creates or migrates the schema and
is ready for ``Runner(stores=stores)``. Needs the ``postgres`` extra (psycopg 3 with its
pool: ``pip install 'opsrun[postgres]'``); runs psycopg's blocking API in worker threads,
so it works on asyncio and trio. See ``docs/postgres.md``.
"""

from __future__ import annotations

try:
    import psycopg as _psycopg  # noqa: F401  (checked here for a clear message)
    import psycopg_pool as _psycopg_pool  # noqa: F401
except ImportError as exc:  # pragma: no cover - the dev environment has the extra
    raise ImportError(
        "opsrun.stores.postgres needs psycopg 3 with its pool: pip install 'opsrun[postgres]'"
    ) from exc

from ._postgres._bundle import PostgresStores as PostgresStores
from ._postgres._runs import PostgresRunStore as PostgresRunStore
from ._postgres._schema import SCHEMA_VERSION as SCHEMA_VERSION
from ._postgres._stores import PostgresArchive as PostgresArchive
from ._postgres._stores import PostgresChatStore as PostgresChatStore
from ._postgres._stores import PostgresProfileStore as PostgresProfileStore
from ._postgres._stores import PostgresSessionStore as PostgresSessionStore

__all__ = [
    "SCHEMA_VERSION",
    "PostgresArchive",
    "PostgresChatStore",
    "PostgresProfileStore",
    "PostgresRunStore",
    "PostgresSessionStore",
    "PostgresStores",
]
