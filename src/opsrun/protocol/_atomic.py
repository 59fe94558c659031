"""Small JSON files of the driver: read into a model, replaced atomically (a temporary
file beside it, fsync, rename)."""

from __future__ import annotations

import errno
import json
import os
import tempfile
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from opsrun.errors import ApplyError, ConfigError

from ._fs import FileSystem, Tree
from ._journal import JOURNAL_DIR, ensure_dir

__all__ = ["prepare_parent", "read_model", "write_atomic"]

M = TypeVar("M", bound=BaseModel)


def read_model(path: Path, model: type[M], *, code: str, what: str) -> M | None:
    """The model stored in ``path``, or None when the file does not exist.

    Raises:
        ConfigError: ``code``, when the file does not hold ``what``.
        OSError: the file cannot be read.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        return model.model_validate(json.loads(text))
    except (ValueError, ValidationError) as exc:
        raise ConfigError(
            f"{path} does not hold {what}: {exc}", code=code, details={"path": str(path)}
        ) from exc


def write_atomic(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Replace ``path`` with ``data``; a reader sees the old bytes or the new, never a mix.

    The directory is created when missing (see :func:`prepare_parent`). With ``durable``
    the data is fsynced before the rename. Raises ``OSError`` (the temporary file is
    removed).
    """
    prepare_parent(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
            if durable:
                file.flush()
                os.fsync(file.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def prepare_parent(path: Path) -> None:
    """Create the directory of ``path``. Inside a project's ``.opsrun``, through
    :func:`ensure_dir`: ``.opsrun`` gets its ``.gitignore``, and no directory from
    ``.opsrun`` down may be a link.

    Raises:
        OSError: a directory cannot be created; ``ELOOP`` when ``.opsrun`` or a
            directory inside it is a link, ``ENOTDIR`` when one is not a directory.
    """
    parts = path.parent.parts
    at = next((i for i, part in enumerate(parts) if part.casefold() == JOURNAL_DIR), None)
    if at is None:
        path.parent.mkdir(parents=True, exist_ok=True)
        return
    tree = Tree(FileSystem(), Path(*parts[:at]) if at else Path("."))
    try:
        ensure_dir(tree, "/".join((JOURNAL_DIR, *parts[at + 1 :])))
    except ApplyError as exc:
        code = errno.ELOOP if exc.code == "ERR_PATH_SYMLINK" else errno.ENOTDIR
        raise OSError(code, exc.message, str(path)) from exc
    finally:
        tree.close()
