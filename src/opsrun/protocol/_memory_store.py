"""Engineering memory: the user's and the project's preferences, stored and shown to the model.

:class:`MemoryStore` is the port. :class:`FileMemory` keeps the user's preferences in a
user-level JSON file (``$OPSRUN_USER_PREFS``, else ``$XDG_CONFIG_HOME/opsrun/preferences.json``,
else ``~/.config/opsrun/preferences.json``) and the project's in
``<root>/.opsrun/project.json`` (commit it to share it). :class:`InMemoryMemory` serves tests.

The model sees the non-empty preferences as one compact JSON line in an
``ENGINEERING_MEMORY`` block after the system prompt (at most ~2 KB).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol, TypeVar, runtime_checkable

import anyio
from pydantic import BaseModel

from ._atomic import prepare_parent, read_model, write_atomic
from ._memory import MEMORY_PATCH_KEYS, ProjectPrefs, UserPrefs, apply_memory_patch

__all__ = [
    "MEMORY_MAX_CHARS",
    "FileMemory",
    "InMemoryMemory",
    "MemoryStore",
    "MemoryUpdater",
    "default_user_prefs_path",
    "memory_block",
]

M = TypeVar("M", bound=BaseModel)

MEMORY_MAX_CHARS = 2048
"""The longest ENGINEERING_MEMORY JSON; longer values are left out, the longest first."""


class MemoryStore(Protocol):
    """Where the preferences live."""

    async def load(self) -> tuple[UserPrefs, ProjectPrefs]:
        """The current preferences (empty ones when none are stored)."""
        ...

    async def save(self, user: UserPrefs, project: ProjectPrefs) -> None:
        """Store both."""
        ...


@runtime_checkable
class MemoryUpdater(Protocol):
    """A :class:`MemoryStore` that applies a memory_patch itself (the driver prefers it).

    ``update`` sets only the patched keys on what is stored now, so two drivers saving
    different keys keep both, and a scope the patch does not touch is not written.
    """

    async def update(self, patch: Mapping[str, Any]) -> tuple[UserPrefs, ProjectPrefs]:
        """Apply a checked patch (dotted keys) to the stored preferences; return them."""
        ...


class InMemoryMemory:
    """Preferences held in memory."""

    def __init__(self, user: UserPrefs | None = None, project: ProjectPrefs | None = None) -> None:
        self.user = user or UserPrefs()
        self.project = project or ProjectPrefs()

    async def load(self) -> tuple[UserPrefs, ProjectPrefs]:
        """The current preferences."""
        return self.user, self.project

    async def save(self, user: UserPrefs, project: ProjectPrefs) -> None:
        """Replace both."""
        self.user, self.project = user, project

    async def update(self, patch: Mapping[str, Any]) -> tuple[UserPrefs, ProjectPrefs]:
        """Apply a memory_patch to the preferences held; return them."""
        self.user, self.project = apply_memory_patch(patch, self.user, self.project)
        return self.user, self.project


def default_user_prefs_path() -> Path:
    """The user-level preferences file (see the module docstring)."""
    explicit = os.environ.get("OPSRUN_USER_PREFS")
    if explicit:
        return Path(explicit)
    config = os.environ.get("XDG_CONFIG_HOME") or os.path.join(Path.home(), ".config")
    return Path(config) / "opsrun" / "preferences.json"


class FileMemory:
    """Preferences in two JSON files, each replaced atomically.

    Args:
        user_path: The user's preferences file.
        project_path: The project's preferences file.

    ``load`` raises ``ConfigError`` (code ``memory_invalid``) for a file that is not valid
    preferences JSON; a missing file means empty preferences. ``update`` holds a lock file
    beside each file it writes (``<name>.lock``) while it re-reads and replaces it.
    """

    def __init__(self, user_path: str | os.PathLike[str], project_path: str | os.PathLike[str]):
        self.user_path = Path(user_path)
        self.project_path = Path(project_path)

    @classmethod
    def for_project(cls, root: str | os.PathLike[str]) -> FileMemory:
        """The default: the user-level file and ``<root>/.opsrun/project.json``."""
        return cls(default_user_prefs_path(), Path(root) / ".opsrun" / "project.json")

    async def load(self) -> tuple[UserPrefs, ProjectPrefs]:
        """Both files' preferences."""
        return await anyio.to_thread.run_sync(self._load)

    async def save(self, user: UserPrefs, project: ProjectPrefs) -> None:
        """Write both files."""
        await anyio.to_thread.run_sync(self._save, user, project)

    async def update(self, patch: Mapping[str, Any]) -> tuple[UserPrefs, ProjectPrefs]:
        """Set the patched keys in the files, each under its lock; return both preferences.

        Each file the patch touches is locked, read again and written with only the
        patched keys changed, so a concurrent update of other keys is kept. A file the
        patch does not touch is only read.

        Raises:
            ConfigError: a file does not hold valid preferences (``memory_invalid``).
            OSError: a file or its lock cannot be read or written (the lock waits at
                most 10 s).
        """
        return await anyio.to_thread.run_sync(self._update, dict(patch))

    def _load(self) -> tuple[UserPrefs, ProjectPrefs]:
        return _read(self.user_path, UserPrefs), _read(self.project_path, ProjectPrefs)

    def _update(self, patch: dict[str, Any]) -> tuple[UserPrefs, ProjectPrefs]:
        user = _patch_file(self.user_path, UserPrefs, _scope(patch, "user"))
        project = _patch_file(self.project_path, ProjectPrefs, _scope(patch, "project"))
        return user, project

    def _save(self, user: UserPrefs, project: ProjectPrefs) -> None:
        _write(self.user_path, user)
        _write(self.project_path, project)


def _read(path: Path, model: type[M]) -> M:
    found = read_model(path, model, code="memory_invalid", what="valid preferences")
    return model() if found is None else found


def _scope(patch: Mapping[str, Any], scope: str) -> dict[str, Any]:
    """The fields a checked patch sets in one scope (``user`` or ``project``)."""
    fields: dict[str, Any] = {}
    for name, value in patch.items():
        key = MEMORY_PATCH_KEYS.get(name)
        if key is not None and key.scope == scope and value is not None:
            fields[key.field] = tuple(value) if isinstance(value, list) else value
    return fields


def _patch_file(path: Path, model: type[M], fields: dict[str, Any]) -> M:
    """The preferences in ``path`` with ``fields`` set, written under the file's lock
    (just read when ``fields`` is empty)."""
    if not fields:
        return _read(path, model)
    with _locked(path):
        current = _read(path, model)
        updated = model.model_validate({**current.model_dump(), **fields})
        _write(path, updated)
    return updated


_LOCK_WAIT = 10.0


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``<path>.lock`` (created when missing, never through a link).

    Raises:
        OSError: the lock file cannot be opened, or another process held the lock for
            more than 10 s (``EWOULDBLOCK``).
    """
    lock_path = path.with_name(path.name + ".lock")
    prepare_parent(lock_path)
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        deadline = time.monotonic() + _LOCK_WAIT
        while not _try_lock(fd):
            if time.monotonic() > deadline:
                raise OSError(errno.EWOULDBLOCK, f"{lock_path} stayed locked", str(lock_path))
            time.sleep(0.02)
        yield
    finally:
        os.close(fd)  # releases the lock


def _try_lock(fd: int) -> bool:
    """Take an exclusive lock on ``fd`` without waiting; False when another holds it."""
    if sys.platform == "win32":  # pragma: no cover - Windows
        import msvcrt

        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _write(path: Path, prefs: BaseModel) -> None:
    write_atomic(path, (json.dumps(_compact(prefs), indent=2) + "\n").encode("utf-8"))


def _compact(prefs: BaseModel) -> dict[str, Any]:
    """The preferences that are set (no None, no empty lists)."""
    return {k: v for k, v in prefs.model_dump(mode="json").items() if v is not None and v != []}


def memory_block(user: UserPrefs, project: ProjectPrefs) -> str:
    """The ``ENGINEERING_MEMORY`` block ("" when there is nothing to say)."""
    doc: dict[str, dict[str, Any]] = {"user": _compact(user), "project": _compact(project)}
    doc = {k: v for k, v in doc.items() if v}
    text = json.dumps(doc, ensure_ascii=False, separators=(",", ":"))
    while len(text) > MEMORY_MAX_CHARS and doc:
        scope, key = max(
            ((s, k) for s, values in doc.items() for k in values),
            key=lambda sk: len(json.dumps(doc[sk[0]][sk[1]], ensure_ascii=False)),
        )
        del doc[scope][key]
        doc = {k: v for k, v in doc.items() if v}
        text = json.dumps(doc, ensure_ascii=False, separators=(",", ":"))
    if not doc:
        return ""
    return (
        "ENGINEERING_MEMORY (trusted by user; update only when user requests):\n"
        f"{text}\n\n"
        "Use ENGINEERING_MEMORY as defaults. If the user explicitly asks to change it, "
        'return the change in "memory_patch" with dotted keys (e.g. '
        '"project.default_test_command").'
    )
