"""Small JSON files of the driver: read into a model, replaced atomically (a temporary
file beside it, fsync, rename)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from opsrun.errors import ConfigError

__all__ = ["read_model", "write_atomic"]

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

    The directory is created when missing. With ``durable`` the data is fsynced before the
    rename. Raises ``OSError`` (the temporary file is removed).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
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
