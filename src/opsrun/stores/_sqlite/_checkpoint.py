"""WAL checkpoints in a thread of their own, off the writer's path.

In WAL mode a commit appends to the ``-wal`` file; a checkpoint copies those pages back
into the database file and, with ``synchronous=NORMAL``, is the one step that syncs to
disk. SQLite runs one inside the commit that takes the WAL past 1,000 pages, so every so
often a store call waits for a sync (measured: 1% of commits took 70% of the commit
time). Here the writer connection checkpoints only far later (:data:`BACKSTOP_PAGES`, in
case this thread falls behind) and this thread runs a ``PASSIVE`` checkpoint, which
never blocks a writer or a reader, every :data:`EVERY_COMMITS` commits.
"""

from __future__ import annotations

import sqlite3
import threading
from contextlib import suppress

__all__ = ["BACKSTOP_PAGES", "EVERY_COMMITS", "Checkpointer"]

EVERY_COMMITS = 64
"""Commits of this process between two background checkpoints."""

BACKSTOP_PAGES = 16_000
"""WAL pages past which the writer connection checkpoints by itself (``wal_autocheckpoint``)."""


class Checkpointer:
    """A daemon thread that checkpoints the WAL over its own connection when told to.

    :meth:`committed` is called by the writer's thread after each commit; every
    :data:`EVERY_COMMITS` calls it wakes this thread. A checkpoint that fails (the
    database is busy, say) is left to the next one. The thread holds no store.
    """

    def __init__(self, conn: sqlite3.Connection, *, name: str) -> None:
        self._wake = threading.Event()
        self._stopping = False
        self._commits = 0
        self.checkpoints = 0
        """How many checkpoints ran (for tests)."""
        self._thread = threading.Thread(target=self._serve, args=(conn,), name=name, daemon=True)
        self._thread.start()

    def committed(self) -> None:
        """A transaction committed (called from the writer's thread)."""
        self._commits += 1
        if self._commits >= EVERY_COMMITS:
            self._commits = 0
            self._wake.set()

    def stop(self) -> None:
        """Finish the checkpoint in progress, close the connection, wait for the thread."""
        self._stopping = True
        self._wake.set()
        if threading.current_thread() is not self._thread:
            self._thread.join()

    def _serve(self, conn: sqlite3.Connection) -> None:
        try:
            while True:
                self._wake.wait()
                self._wake.clear()
                if self._stopping:
                    return
                with suppress(sqlite3.Error):  # busy or locked: the next one goes on
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                    self.checkpoints += 1
        finally:
            conn.close()
