"""Validation rules that look at the project directory (only when a root is given).

Nothing here follows a symlink out of the root: every target is resolved with
``os.path.realpath`` and must stay inside the resolved root, and directory walks
use ``lstat`` semantics. No ``OSError`` escapes; problems become violations.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from ._content import is_sha256_hex
from ._limits import PathPolicy, Violation
from ._paths import path_segments, protected_match
from ._plan import Action, ActionKind

__all__ = ["check_action_on_disk"]

_MAX_READ_BYTES = 64 * 1024 * 1024
_MAX_WALK_ENTRIES = 10_000

_Add = Callable[[str, str], None]


@dataclass(frozen=True)
class _Target:
    real: str
    st: os.stat_result | None  # None: nothing exists there


def _resolve(root: str, path: str) -> _Target | None:
    """Return the resolved target, or ``None`` if it escapes the root."""
    real_root = os.path.realpath(root)
    joined = os.path.join(real_root, *[s for s in path_segments(path) if s])
    real = os.path.realpath(joined)
    if os.path.commonpath([real_root, real]) != real_root:
        return None
    try:
        st: os.stat_result | None = os.stat(real)
    except (FileNotFoundError, NotADirectoryError):
        st = None
    return _Target(real, st)


def _walk_names(top: str) -> Iterator[str]:
    """Yield paths (relative to ``top``) under a directory without following symlinks."""
    stack = [("", top)]
    seen = 0
    while stack and seen < _MAX_WALK_ENTRIES:
        rel, here = stack.pop()
        with os.scandir(here) as entries:
            for entry in entries:
                seen += 1
                child = f"{rel}/{entry.name}" if rel else entry.name
                yield child
                if entry.is_dir(follow_symlinks=False):
                    stack.append((child, entry.path))


def check_action_on_disk(
    index: int,
    action: Action,
    *,
    version: int,
    root: str,
    policy: PathPolicy,
) -> list[Violation]:
    """Check one lexically valid action against the directory ``root``.

    Reports ERR_PATH_ESCAPES_ROOT, ERR_CREATE_EXISTS, ERR_V2_UPDATE_EXISTING_FORBIDDEN,
    ERR_TARGET_MISSING, ERR_TARGET_TYPE, ERR_BASE_MISMATCH, ERR_NON_UTF8_FILE,
    ERR_RANGE_INVALID (range past the end), ERR_PROTECTED_PATH (creating over a
    protected file, deleting a directory holding one) and ERR_FS_UNREADABLE.
    Never raises.
    """
    out: list[Violation] = []

    def add(code: str, message: str) -> None:
        out.append(Violation(code=code, message=message, path=action.path, action_index=index))

    try:
        target = _resolve(root, action.path)
        if target is None:
            add("ERR_PATH_ESCAPES_ROOT", "path resolves outside the root through a symlink")
            return out
        _check(target, action, version, policy, add)
    except OSError as exc:
        add("ERR_FS_UNREADABLE", f"could not inspect the path: {exc.strerror or exc}")
    return out


def _check(
    target: _Target,
    action: Action,
    version: int,
    policy: PathPolicy,
    add: _Add,
) -> None:
    kind = action.kind
    if kind is ActionKind.CREATE_FILE:
        _check_create_file(target, action, policy, add)
    elif kind is ActionKind.CREATE_DIR:
        _check_create_dir(target, add)
    elif kind is ActionKind.DELETE_DIR:
        _check_delete_dir(target, policy, add)
    elif kind is ActionKind.UPDATE_FILE and version == 2 and target.st is not None:
        add(
            "ERR_V2_UPDATE_EXISTING_FORBIDDEN",
            "v2 forbids UPDATE_FILE on an existing file; use PATCH_FILE",
        )
    elif not (kind is ActionKind.UPDATE_FILE and version == 2 and action.base_sha256 is None):
        # DELETE_FILE, UPDATE_FILE (v1, or v2 with a base), PATCH_FILE, REPLACE_RANGE.
        _check_existing_file(target, action, add)


def _is_dir(st: os.stat_result | None) -> bool:
    return st is not None and stat.S_ISDIR(st.st_mode)


def _check_create_file(target: _Target, action: Action, policy: PathPolicy, add: _Add) -> None:
    if target.st is not None:
        add("ERR_CREATE_EXISTS", "CREATE_FILE over something that already exists")
        if protected_match(action.path, policy.protected) is not None:
            add("ERR_PROTECTED_PATH", "CREATE_FILE would overwrite a protected file")


def _check_create_dir(target: _Target, add: _Add) -> None:
    if target.st is not None and not _is_dir(target.st):
        add("ERR_CREATE_EXISTS", "CREATE_DIR where a file already exists")


def _check_delete_dir(target: _Target, policy: PathPolicy, add: _Add) -> None:
    if target.st is None:
        add("ERR_TARGET_MISSING", "DELETE_DIR of a directory that does not exist")
    elif not _is_dir(target.st):
        add("ERR_TARGET_TYPE", "DELETE_DIR of something that is not a directory")
    else:
        for name in _walk_names(target.real):
            if protected_match(name, policy.protected) is not None:
                add("ERR_PROTECTED_PATH", f"DELETE_DIR would delete protected {name!r}")
                break


def _check_existing_file(target: _Target, action: Action, add: _Add) -> None:
    """The action needs a regular file there; read it when its hash or text matters."""
    kind = action.kind
    st = target.st
    if st is None:
        add("ERR_TARGET_MISSING", f"{kind.value} of a file that does not exist")
        return
    if not stat.S_ISREG(st.st_mode):
        add("ERR_TARGET_TYPE", f"{kind.value} of something that is not a regular file")
        return
    if kind is ActionKind.DELETE_FILE:
        return
    needs_text = kind in (ActionKind.PATCH_FILE, ActionKind.REPLACE_RANGE)
    base = action.base_sha256 if action.base_sha256 and is_sha256_hex(action.base_sha256) else None
    if not needs_text and base is None:
        return
    if st.st_size > _MAX_READ_BYTES:
        add("ERR_FS_UNREADABLE", "file is too large to check")
        return
    with open(target.real, "rb") as handle:
        data = handle.read()
    if base is not None:
        actual = hashlib.sha256(data).hexdigest()
        if actual != base.lower():
            add(
                "ERR_BASE_MISMATCH",
                f"base_sha256 does not match the file (it is {actual}){_eol_hint(data, base)}",
            )
    if needs_text:
        _check_text(data, action, add)


def _eol_hint(data: bytes, base: str) -> str:
    """Why a hash may differ: it was taken of the text with other line endings."""
    if b"\r\n" in data and hashlib.sha256(data.replace(b"\r\n", b"\n")).hexdigest() == base.lower():
        return (
            "; base_sha256 is the hash of this file with its CRLF line endings turned into LF:"
            " hash the file's bytes as they are"
        )
    return ""


def _check_text(data: bytes, action: Action, add: _Add) -> None:
    """PATCH_FILE and REPLACE_RANGE edit UTF-8 text; a range must end inside the file."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        add("ERR_NON_UTF8_FILE", f"{action.kind.value} needs a UTF-8 text file")
        return
    if action.kind is ActionKind.REPLACE_RANGE and action.end_line is not None:
        lines = data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
        if action.end_line > lines:
            add("ERR_RANGE_INVALID", f"end_line {action.end_line} is past the end ({lines} lines)")
