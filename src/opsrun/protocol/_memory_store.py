"""Engineering memory: the user's and the project's preferences, stored and shown to the model.

:class:`MemoryStore` is the port. :class:`FileMemory` keeps the user's preferences in a
user-level JSON file (``$OPSRUN_USER_PREFS``, else ``$XDG_CONFIG_HOME/opsrun/preferences.json``,
else ``~/.config/opsrun/preferences.json``) and the project's in
``<root>/.opsrun/project.json`` (commit it to share it). :class:`InMemoryMemory` serves tests.

The model sees the non-empty preferences as one compact JSON line in an
``ENGINEERING_MEMORY`` block after the system prompt (at most ~2 KB).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Protocol, TypeVar

import anyio
from pydantic import BaseModel

from ._atomic import read_model, write_atomic
from ._memory import ProjectPrefs, UserPrefs

__all__ = [
    "MEMORY_MAX_CHARS",
    "FileMemory",
    "InMemoryMemory",
    "MemoryStore",
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
    preferences JSON; a missing file means empty preferences.
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

    def _load(self) -> tuple[UserPrefs, ProjectPrefs]:
        return _read(self.user_path, UserPrefs), _read(self.project_path, ProjectPrefs)

    def _save(self, user: UserPrefs, project: ProjectPrefs) -> None:
        _write(self.user_path, user)
        _write(self.project_path, project)


def _read(path: Path, model: type[M]) -> M:
    found = read_model(path, model, code="memory_invalid", what="valid preferences")
    return model() if found is None else found


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
