"""A file system for apply / undo / recover tests that fails the k-th system call."""

from __future__ import annotations

import errno

from opsrun.protocol import FileSystem

__all__ = ["FaultyFileSystem"]


class FaultyFileSystem(FileSystem):
    """A file system whose ``fail_at``-th call (1-based) raises ``OSError(EIO)``.

    With ``persistent=True`` every later call fails too, like a disk that went away.
    ``calls`` counts the calls made so far, so a clean run tells how many there are.

    ``fsync`` is counted and can fail like any other call, but it never reaches the
    disk: these tests check what the tree holds afterwards, which an fsync does not
    change while the machine stays up, and skipping it keeps hundreds of applies fast.
    Use the real :class:`~opsrun.protocol.FileSystem` to test durability itself.
    """

    def __init__(self, fail_at: int | None = None, *, persistent: bool = False) -> None:
        self.fail_at = fail_at
        self.persistent = persistent
        self.calls = 0

    def before(self, op: str) -> None:
        """Count the call and fail it when its turn has come."""
        self.calls += 1
        if self.fail_at is None:
            return
        if self.calls == self.fail_at or (self.persistent and self.calls > self.fail_at):
            raise OSError(errno.EIO, f"injected fault in {op} (call {self.calls})")

    def fsync(self, fd: int) -> None:
        """Count (and possibly fail) the call like ``FileSystem.fsync``, without syncing."""
        self.before("fsync")
