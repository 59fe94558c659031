"""The PostgreSQL server of the tests: ``OPSRUN_TEST_POSTGRES_DSN``, or a local default.

:func:`postgres_for_module` (at a module's top) and :func:`require_postgres` (in a test or
fixture) return the DSN when the server answers. When it does not, the module or test is
skipped with one reason, or fails when ``CI=true`` (CI starts the server, so an
unreachable one there is a broken job, not a reason to skip).
"""

from __future__ import annotations

import functools
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg
import pytest
from _postgres_schemas import SchemaSupply, new_schema
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from opsrun.stores.postgres import PostgresStores

__all__ = [
    "drop_schema",
    "new_schema",
    "open_stores",
    "postgres_dsn",
    "postgres_for_module",
    "require_postgres",
    "with_params",
]

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"
"""The server ``.ci/run`` starts: trust authentication, database ``test``."""


def postgres_dsn() -> str:
    """The DSN the tests use (the server may not answer)."""
    return os.environ.get("OPSRUN_TEST_POSTGRES_DSN", DEFAULT_DSN)


@functools.cache
def _problem(dsn: str) -> str | None:
    """Why the server at ``dsn`` cannot be used (None when it can), asked once."""
    try:
        with psycopg.connect(dsn, connect_timeout=3, autocommit=True) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return " ".join(str(exc).split())
    return None


def with_params(dsn: str, **params: str) -> str:
    """``dsn`` with more connection parameters; ``options`` are added to its own."""
    if "options" in params:
        given = conninfo_to_dict(dsn).get("options")
        params["options"] = f"{given} {params['options']}" if given else params["options"]
    return make_conninfo(dsn, **params)


def _unreachable(dsn: str, problem: str) -> str:
    params = conninfo_to_dict(dsn)
    where = " ".join(f"{k}={params[k]}" for k in ("host", "port", "dbname") if params.get(k))
    return f"PostgreSQL is not reachable ({where}; set OPSRUN_TEST_POSTGRES_DSN): {problem}"


def _fast(dsn: str) -> str:
    # The tests do not outlive a crash of the server: their sessions commit without
    # waiting for the disk (synchronous_commit=off), which makes them several times faster.
    return with_params(dsn, options="-c synchronous_commit=off")


def require_postgres() -> str:
    """The DSN of a server that answers; skips the test (or, with ``CI=true``, fails it)
    otherwise."""
    dsn = postgres_dsn()
    problem = _problem(dsn)
    if problem is None:
        return _fast(dsn)
    if os.environ.get("CI") == "true":
        pytest.fail(_unreachable(dsn, problem), pytrace=False)
    pytest.skip(_unreachable(dsn, problem))


def postgres_for_module() -> str:
    """:func:`require_postgres` for a module whose every test needs the server: call it at
    module level. Without a server the whole module is skipped (one line in the summary),
    or, with ``CI=true``, fails to collect."""
    dsn = postgres_dsn()
    problem = _problem(dsn)
    if problem is None:
        return _fast(dsn)
    if os.environ.get("CI") == "true":
        pytest.fail(_unreachable(dsn, problem), pytrace=False)
    pytest.skip(_unreachable(dsn, problem), allow_module_level=True)


def drop_schema(dsn: str, schema: str) -> None:
    """Drop ``schema`` and everything in it (no error when missing)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@functools.cache
def _supply(dsn: str) -> SchemaSupply:
    return SchemaSupply(dsn)


@asynccontextmanager
async def open_stores(
    dsn: str, schema: str | None = None, **options: Any
) -> AsyncIterator[PostgresStores]:
    """Open stores in a schema of their own, dropped afterwards: ``schema``, or a migrated
    one from the schema supply (connections made with ``dsn``'s options are fine: every
    schema is the same)."""
    if schema is not None:
        try:
            async with PostgresStores(dsn, schema=schema, **options) as stores:
                yield stores
        finally:
            drop_schema(dsn, schema)
        return
    supply = _supply(_fast(postgres_dsn()))
    taken = supply.take()
    try:
        async with PostgresStores(dsn, schema=taken, **options) as stores:
            yield stores
    finally:
        supply.give_back(taken)
