"""Schemas for the PostgreSQL tests, made before the tests take them and dropped after.

Creating the tables of a schema, and dropping them, take the server about a tenth of a
second each (mostly file work), more than most tests take themselves. So each test still
gets a migrated schema of its own, but a background thread makes a few ahead of the tests
and another drops the ones the tests are done with, while the next tests run. Whatever
is left is dropped when the process exits.
"""

from __future__ import annotations

import atexit
import queue
import threading
import uuid

import psycopg
from psycopg import sql

from opsrun.stores._postgres._schema import migrate

__all__ = ["SchemaSupply", "new_schema"]

_WAIT = 60.0
"""Seconds a test waits for a schema before it fails (a safety net, not a measurement)."""


def new_schema() -> str:
    """A schema name no other test uses."""
    return f"opsrun_test_{uuid.uuid4().hex[:12]}"


def _drop(conn: psycopg.Connection[tuple[object, ...]], schemas: list[str]) -> None:
    names = sql.SQL(", ").join(sql.Identifier(schema) for schema in schemas)
    conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(names))


class SchemaSupply:
    """Migrated schemas of the server at ``dsn``: :meth:`take` one, :meth:`give_back` it."""

    def __init__(self, dsn: str, *, ahead: int = 2) -> None:
        self._dsn = dsn
        self._ready: queue.Queue[str] = queue.Queue(maxsize=ahead)
        self._done: queue.Queue[str | None] = queue.Queue()
        self._made: set[str] = set()
        """Every schema made and not yet dropped."""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._maker = threading.Thread(target=self._make, name="schema maker", daemon=True)
        self._dropper = threading.Thread(target=self._drop, name="schema dropper", daemon=True)
        self._maker.start()
        self._dropper.start()
        atexit.register(self.close)

    def take(self) -> str:
        """A migrated schema no other test uses; give it back when done.

        Raises:
            RuntimeError: the schemas cannot be made (the error is the cause).
        """
        try:
            return self._ready.get(timeout=_WAIT)
        except queue.Empty:
            raise RuntimeError("no schema came from the schema maker") from self._error

    def give_back(self, schema: str) -> None:
        """Drop ``schema`` (in the background)."""
        self._done.put(schema)

    def close(self) -> None:
        """Stop making schemas; drop every schema made (waits for the threads)."""
        self._stop.set()
        self._done.put(None)
        self._maker.join(_WAIT)
        self._dropper.join(_WAIT)
        with self._lock:
            left, self._made = sorted(self._made), set()
        if left:
            with psycopg.connect(self._dsn, autocommit=True) as conn:
                _drop(conn, left)

    def _make(self) -> None:
        try:
            with psycopg.connect(self._dsn, autocommit=True) as conn:
                while not self._stop.is_set():
                    schema = new_schema()
                    migrate(conn, schema)
                    with self._lock:
                        self._made.add(schema)
                    while not self._stop.is_set():
                        try:
                            self._ready.put(schema, timeout=0.1)
                            break
                        except queue.Full:
                            continue
        except BaseException as exc:  # take() reports it
            self._error = exc

    def _drop(self) -> None:
        with psycopg.connect(self._dsn, autocommit=True) as conn:
            while (schema := self._done.get()) is not None:
                batch = [schema]
                while True:
                    try:
                        more = self._done.get_nowait()
                    except queue.Empty:
                        break
                    if more is None:
                        self._done.put(None)
                        break
                    batch.append(more)
                _drop(conn, batch)
                with self._lock:
                    self._made.difference_update(batch)
