"""The file-system door used by apply, undo and recover, and a root-confined tree on top.

:class:`FileSystem` is the only place that talks to the OS: every method is one
system call, so a test can make the k-th call fail
(:class:`opsrun.testing.FaultyFileSystem`) and check that the tree still ends up
byte-identical. :class:`Tree` walks paths
from an open root directory with ``dir_fd`` and ``O_NOFOLLOW``, one segment at a
time, so no string trick and no symbolic link can lead a write outside the root.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from dataclasses import dataclass
from typing import Literal

from opsrun.errors import ApplyError

__all__ = ["FileSystem", "Occupant", "PathState", "Tree"]

_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIR_FLAGS = os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW | _O_CLOEXEC
_RESERVED = frozenset({".git", ".opsrun"})
_SETID = stat.S_ISUID | stat.S_ISGID
_CHUNK = 1 << 20

#: What a path holds, looked at without following it: ``special`` is a FIFO, socket or device.
Occupant = Literal["none", "file", "dir", "link", "special"]


class FileSystem:
    """Thin wrappers over the system calls apply uses; subclass to inject faults.

    Every method except :meth:`close` first calls :meth:`before`, the hook a test
    overrides to fail a chosen call.
    """

    def before(self, op: str) -> None:
        """Called before every system call; raise ``OSError`` here to inject a fault."""

    def open(self, name: str, flags: int, *, mode: int = 0o600, dir_fd: int | None = None) -> int:
        """``os.open`` relative to ``dir_fd``."""
        self.before("open")
        return os.open(name, flags | _O_CLOEXEC, mode, dir_fd=dir_fd)

    def close(self, fd: int) -> None:
        """``os.close``; never a fault point, so cleanup cannot mask the first error."""
        os.close(fd)

    def read(self, fd: int) -> bytes:
        """Read an open file to its end."""
        self.before("read")
        parts: list[bytes] = []
        while chunk := os.read(fd, _CHUNK):
            parts.append(chunk)
        return b"".join(parts)

    def write(self, fd: int, data: bytes) -> None:
        """Write all of ``data``."""
        self.before("write")
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]

    def fsync(self, fd: int) -> None:
        """``os.fsync``."""
        self.before("fsync")
        os.fsync(fd)

    def fchmod(self, fd: int, mode: int) -> None:
        """``os.fchmod``."""
        self.before("fchmod")
        os.fchmod(fd, mode)

    def fchown(self, fd: int, uid: int, gid: int) -> None:
        """``os.fchown``."""
        self.before("fchown")
        os.fchown(fd, uid, gid)

    def lstat(self, name: str, *, dir_fd: int) -> os.stat_result | None:
        """``os.lstat`` relative to ``dir_fd``; ``None`` when nothing is there."""
        self.before("lstat")
        try:
            return os.lstat(name, dir_fd=dir_fd)
        except FileNotFoundError:
            return None

    def rename(self, src: str, dst: str, *, dir_fd: int) -> None:
        """``os.replace`` inside one directory."""
        self.before("rename")
        os.replace(src, dst, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)

    def unlink(self, name: str, *, dir_fd: int) -> None:
        """``os.unlink`` relative to ``dir_fd``."""
        self.before("unlink")
        os.unlink(name, dir_fd=dir_fd)

    def mkdir(self, name: str, mode: int, *, dir_fd: int) -> None:
        """``os.mkdir`` relative to ``dir_fd``."""
        self.before("mkdir")
        os.mkdir(name, mode, dir_fd=dir_fd)

    def rmdir(self, name: str, *, dir_fd: int) -> None:
        """``os.rmdir`` relative to ``dir_fd``."""
        self.before("rmdir")
        os.rmdir(name, dir_fd=dir_fd)

    def listdir(self, fd: int) -> list[str]:
        """Names in an open directory."""
        self.before("listdir")
        return os.listdir(fd)

    def lock(self, fd: int) -> bool:
        """Take an exclusive advisory lock without waiting; ``False`` if it is held."""
        self.before("lock")
        try:
            import fcntl  # POSIX only, hence imported here

            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        except ImportError:  # pragma: no cover - platforms without flock
            return True
        return True


@dataclass(frozen=True, slots=True)
class PathState:
    """What a path held: nothing, a directory or a regular file (with its bytes)."""

    kind: Literal["none", "dir", "file"]
    mode: int = 0
    data: bytes | None = None
    owner: tuple[int, int] | None = None
    """``(uid, gid)`` of what is there, when known."""


def process_umask() -> int:
    """The process's file mode creation mask, read without changing it where the system
    says it (Linux's ``/proc/self/status``); elsewhere set and restored at once."""
    with (
        contextlib.suppress(OSError, ValueError, IndexError),
        open("/proc/self/status", encoding="ascii", errors="replace") as status,
    ):
        for line in status:
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _split(path: str) -> list[str]:
    segments = path.replace("\\", "/").split("/")
    if path.startswith(("/", "\\")) or (len(path) > 1 and path[1] == ":"):
        raise ApplyError(
            f"{path!r} is not relative to the root",
            code="ERR_PATH_ESCAPES_ROOT",
            details={"path": path},
        )
    out = [s for s in segments if s]
    for segment in out:
        if segment in (".", "..") or "\0" in segment:
            raise ApplyError(
                f"{path!r} has a {segment!r} segment",
                code="ERR_PATH_ESCAPES_ROOT",
                details={"path": path},
            )
    if not out:
        raise ApplyError("empty path", code="ERR_PATH_ESCAPES_ROOT", details={"path": path})
    return out


def _symlink(path: str, where: str) -> ApplyError:
    return ApplyError(
        f"{path!r}: {where!r} is a symbolic link; plans never write through links",
        code="ERR_PATH_SYMLINK",
        details={"path": path, "link": where},
    )


class Tree:
    """A directory tree reached only through an open root descriptor.

    Args:
        fs: The system-call door.
        root: The project directory (it may itself be reached through a link).
        reserved: First segments no plan may touch (``.git``, ``.opsrun``); the
            journal passes ``False`` to reach ``.opsrun``.
    """

    def __init__(self, fs: FileSystem, root: str | os.PathLike[str]) -> None:
        self.fs = fs
        self.root = os.fspath(root)
        self.root_fd = fs.open(self.root, os.O_RDONLY | _O_DIRECTORY)

    def close(self) -> None:
        """Close the root descriptor."""
        self.fs.close(self.root_fd)

    def parent(
        self, path: str, *, create: bool = False, journal: bool = False
    ) -> tuple[int, str] | None:
        """Open the directory holding ``path``; return ``(fd, leaf)`` or ``None`` if absent.

        Raises:
            ApplyError: ``ERR_PATH_SYMLINK`` when a segment is a link,
                ``ERR_PATH_ESCAPES_ROOT`` for ``..``/absolute paths,
                ``ERR_PATH_PROTECTED`` for ``.git`` or ``.opsrun`` (unless ``journal``),
                ``ERR_TARGET_TYPE`` when a segment is not a directory.
        """
        segments = _split(path)
        if not journal and any(s.casefold() in _RESERVED for s in segments):
            raise ApplyError(
                f"{path!r} is inside .git or the .opsrun journal; plans never write there",
                code="ERR_PATH_PROTECTED",
                details={"path": path},
            )
        fd = self.fs.open(".", _DIR_FLAGS, dir_fd=self.root_fd)
        try:
            for index, segment in enumerate(segments[:-1]):
                where = "/".join(segments[: index + 1])
                st = self.fs.lstat(segment, dir_fd=fd)
                if st is None:
                    if not create:
                        self.fs.close(fd)
                        return None
                    with contextlib.suppress(FileExistsError):  # made meanwhile: opened below
                        self.fs.mkdir(segment, 0o777, dir_fd=fd)  # the umask applies
                elif stat.S_ISLNK(st.st_mode):
                    raise _symlink(path, where)
                elif not stat.S_ISDIR(st.st_mode):
                    raise ApplyError(
                        f"{path!r}: {where!r} is not a directory",
                        code="ERR_TARGET_TYPE",
                        details={"path": path, "segment": where},
                    )
                try:
                    child = self.fs.open(segment, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                        raise _symlink(path, where) from exc
                    raise
                self.fs.close(fd)
                fd = child
        except BaseException:
            self.fs.close(fd)
            raise
        return fd, segments[-1]

    def state(
        self, path: str, *, read: bool = True, journal: bool = False, max_bytes: int | None = None
    ) -> PathState:
        """Return what ``path`` holds now, reading a file's bytes when ``read``.

        Raises:
            ApplyError: as :meth:`parent`, and ``ERR_PATH_SYMLINK`` / ``ERR_TARGET_TYPE``
                for a link or a special file at ``path`` itself; ``ERR_FILE_TOO_LARGE``
                (``details["size"]``) when ``read`` and the file is larger than
                ``max_bytes``: it is refused before a byte is read.
        """
        found = self.parent(path, journal=journal)
        if found is None:
            return PathState("none")
        fd, leaf = found
        try:
            st = self.fs.lstat(leaf, dir_fd=fd)
            if st is None:
                return PathState("none")
            mode = stat.S_IMODE(st.st_mode)
            if stat.S_ISLNK(st.st_mode):
                raise _symlink(path, path)
            owner = (st.st_uid, st.st_gid)
            if stat.S_ISDIR(st.st_mode):
                return PathState("dir", mode, owner=owner)
            if not stat.S_ISREG(st.st_mode):
                raise ApplyError(
                    f"{path!r} is neither a regular file nor a directory",
                    code="ERR_TARGET_TYPE",
                    details={"path": path},
                )
            if not read:
                return PathState("file", mode, owner=owner)
            if max_bytes is not None and st.st_size > max_bytes:
                raise ApplyError(
                    f"{path!r} is larger than {max_bytes} bytes",
                    code="ERR_FILE_TOO_LARGE",
                    details={"path": path, "size": st.st_size},
                )
            file_fd = self.fs.open(leaf, os.O_RDONLY | _O_NOFOLLOW, dir_fd=fd)
            try:
                return PathState("file", mode, self.fs.read(file_fd), owner)
            finally:
                self.fs.close(file_fd)
        finally:
            self.fs.close(fd)

    def occupant(self, path: str, *, journal: bool = False) -> Occupant:
        """Return what ``path`` itself is, without following it or reading a file.

        Unlike :meth:`state`, a link or a special file at ``path`` is an answer, not an
        error.

        Raises:
            ApplyError: as :meth:`parent`, for what lies on the way to ``path``.
        """
        found = self.parent(path, journal=journal)
        if found is None:
            return "none"
        fd, leaf = found
        try:
            st = self.fs.lstat(leaf, dir_fd=fd)
        finally:
            self.fs.close(fd)
        if st is None:
            return "none"
        if stat.S_ISLNK(st.st_mode):
            return "link"
        if stat.S_ISDIR(st.st_mode):
            return "dir"
        return "file" if stat.S_ISREG(st.st_mode) else "special"

    def write(
        self,
        path: str,
        data: bytes,
        mode: int,
        *,
        temp: str,
        journal: bool = False,
        sync_dir: bool = True,
        keep_setid: bool = True,
        owner: tuple[int, int] | None = None,
        restore_owner: bool = False,
    ) -> None:
        """Replace ``path`` atomically: temp file in the same directory, fsync, rename, fsync.

        Missing parent directories are created. ``temp`` names the temporary file so
        that recovery can find and remove it after a crash. With ``sync_dir=False``
        the caller syncs the directory itself (see :meth:`sync_parent`).

        A replaced file keeps its owner when the process may give it (it runs as root);
        when it may not, the setuid and setgid bits are dropped, so a file never becomes
        a set-id program of another owner. ``keep_setid=False`` drops them in any case
        (modes restored from a journal). ``owner`` is the owner to give a file created
        where nothing is (a deleted file restored by a rollback); with ``restore_owner``
        it is given in any case (a rollback restoring a file exactly), and the set-id bits
        are kept only when the file could be given that owner.

        Raises:
            ApplyError: as :meth:`parent`, and ``ERR_PATH_SYMLINK`` / ``ERR_TARGET_TYPE``
                when ``path`` is a link or not a regular file.
            OSError: the file system failed (the temporary file may be left behind).
        """
        found = self.parent(path, create=True, journal=journal)
        assert found is not None  # create=True never reports a missing parent
        fd, leaf = found
        try:
            current = self.fs.lstat(leaf, dir_fd=fd)
            if current is not None and not stat.S_ISREG(current.st_mode):
                kind = "symbolic link" if stat.S_ISLNK(current.st_mode) else "not a file"
                raise ApplyError(
                    f"{path!r} is a {kind}; refusing to replace it",
                    code="ERR_PATH_SYMLINK" if stat.S_ISLNK(current.st_mode) else "ERR_TARGET_TYPE",
                    details={"path": path},
                )
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW
            file_fd = self.fs.open(temp, flags, mode=0o600, dir_fd=fd)
            try:
                self.fs.write(file_fd, data)
                given = self._keep_owner(file_fd, current, owner, exact=restore_owner)
                if not given or not keep_setid:
                    mode &= ~_SETID
                self.fs.fchmod(file_fd, mode)
                self.fs.fsync(file_fd)
            finally:
                self.fs.close(file_fd)
            self.fs.rename(temp, leaf, dir_fd=fd)
            if sync_dir:
                self.fs.fsync(fd)
        finally:
            self.fs.close(fd)

    def _keep_owner(
        self,
        fd: int,
        current: os.stat_result | None,
        owner: tuple[int, int] | None,
        *,
        exact: bool = False,
    ) -> bool:
        """Give the new file the replaced file's owner (with ``exact``, ``owner`` whatever
        is there); False when that is not allowed."""
        if exact and owner is not None:
            # Always chown: a new file's group may come from a set-group-id directory.
            wanted: tuple[int, int] | None = owner
        else:
            wanted = (current.st_uid, current.st_gid) if current is not None else owner
            if wanted is None or wanted == (os.geteuid(), os.getegid()):
                return True
        assert wanted is not None
        try:
            self.fs.fchown(fd, *wanted)
        except PermissionError:
            return False
        return True

    def sync_parent(self, path: str, *, journal: bool = False) -> None:
        """fsync the directory holding ``path``."""
        found = self.parent(path, journal=journal)
        if found is None:
            return
        fd, _ = found
        try:
            self.fs.fsync(fd)
        finally:
            self.fs.close(fd)

    def mkdir(self, path: str, mode: int = 0o755, *, journal: bool = False) -> None:
        """Create ``path`` (and missing parents) as a directory; no-op when it exists."""
        found = self.parent(path, create=True, journal=journal)
        assert found is not None
        fd, leaf = found
        try:
            st = self.fs.lstat(leaf, dir_fd=fd)
            if st is None:
                with contextlib.suppress(FileExistsError):  # made meanwhile: opened below
                    self.fs.mkdir(leaf, 0o700, dir_fd=fd)
            elif stat.S_ISLNK(st.st_mode):
                raise _symlink(path, path)
            elif not stat.S_ISDIR(st.st_mode):
                raise ApplyError(
                    f"{path!r} exists and is not a directory",
                    code="ERR_TARGET_TYPE",
                    details={"path": path},
                )
            dir_fd = self.fs.open(leaf, _DIR_FLAGS, dir_fd=fd)
            try:
                self.fs.fchmod(dir_fd, mode)
            finally:
                self.fs.close(dir_fd)
            self.fs.fsync(fd)
        finally:
            self.fs.close(fd)

    def remove(self, path: str, *, journal: bool = False) -> None:
        """Remove a file or an empty directory at ``path``; no-op when nothing is there."""
        found = self.parent(path, journal=journal)
        if found is None:
            return
        fd, leaf = found
        try:
            st = self.fs.lstat(leaf, dir_fd=fd)
            if st is None:
                return
            if stat.S_ISDIR(st.st_mode):
                self.fs.rmdir(leaf, dir_fd=fd)
            else:
                self.fs.unlink(leaf, dir_fd=fd)
            self.fs.fsync(fd)
        finally:
            self.fs.close(fd)

    def listdir(self, path: str, *, journal: bool = False) -> list[str]:
        """Names inside the directory ``path`` (``""`` is the root; empty when absent)."""
        if not path:
            root_fd = self.fs.open(".", _DIR_FLAGS, dir_fd=self.root_fd)
            try:
                return sorted(self.fs.listdir(root_fd))
            finally:
                self.fs.close(root_fd)
        found = self.parent(path, journal=journal)
        if found is None:
            return []
        fd, leaf = found
        try:
            st = self.fs.lstat(leaf, dir_fd=fd)
            if st is None or not stat.S_ISDIR(st.st_mode):
                return []
            dir_fd = self.fs.open(leaf, _DIR_FLAGS, dir_fd=fd)
            try:
                return sorted(self.fs.listdir(dir_fd))
            finally:
                self.fs.close(dir_fd)
        finally:
            self.fs.close(fd)

    def walk(self, path: str, *, journal: bool = False) -> list[tuple[str, PathState]]:
        """Return ``path`` and everything below it, parents first, files with their bytes.

        Raises:
            ApplyError: ``ERR_PATH_SYMLINK`` when the subtree holds a link (a
                directory delete never follows one and cannot restore one).
        """
        top = self.state(path, journal=journal)
        out = [(path, top)]
        if top.kind != "dir":
            return out
        for name in self.listdir(path, journal=journal):
            out.extend(self.walk(f"{path}/{name}", journal=journal))
        return out
