"""Validation rules that look at the project directory (only when a root is given).

Every look goes through the same door as the writes of :func:`apply_plan`: a directory
descriptor walk from the root that never follows a link (:class:`Tree`). So validation
refuses what apply refuses (a link anywhere on the path, a special file, ``.git`` or
``.opsrun`` inside a directory to delete) with the same codes, and a link swapped in
during the check cannot make it read outside the root. No ``OSError`` escapes; problems
become violations.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from opsrun.errors import OpsrunError

from ._content import is_sha256_hex
from ._fs import FileSystem, Tree
from ._limits import PathPolicy, Violation
from ._paths import protected_match
from ._plan import Action, ActionKind

__all__ = ["check_tree"]

_MAX_READ_BYTES = 64 * 1024 * 1024
_MAX_WALK_ENTRIES = 10_000

_Add = Callable[[str, str], None]


@dataclass(frozen=True)
class _Target:
    tree: Tree
    path: str
    kind: Literal["none", "dir", "file"]

    @property
    def exists(self) -> bool:
        return self.kind != "none"


def check_tree(
    actions: Sequence[tuple[int, Action]],
    *,
    version: int,
    root: str,
    policy: PathPolicy,
) -> list[Violation]:
    """Check lexically valid ``(index, action)`` pairs against the directory ``root``,
    through one descriptor of the root, and the journal folder when there are actions.

    Reports ERR_PATH_SYMLINK (a link on the path, or inside a directory to delete, or a
    linked ``.opsrun``), ERR_PATH_PROTECTED (``.git`` / ``.opsrun`` on the path or inside
    a directory to delete), ERR_CREATE_EXISTS, ERR_V2_UPDATE_EXISTING_FORBIDDEN,
    ERR_TARGET_MISSING, ERR_TARGET_TYPE (also a special file), ERR_BASE_MISMATCH,
    ERR_NON_UTF8_FILE, ERR_RANGE_INVALID (range past the end), ERR_PROTECTED_PATH
    (creating over a protected file, deleting a directory holding one) and
    ERR_FS_UNREADABLE. Never raises.
    """
    if not actions:
        return []
    out = _check_journal_dir(root)
    try:
        tree = Tree(FileSystem(), root)
    except OSError as exc:
        message = f"could not open the root: {exc.strerror or exc}"
        return out + [
            Violation(code="ERR_FS_UNREADABLE", message=message, path=a.path, action_index=i)
            for i, a in actions
        ]
    try:
        for index, action in actions:
            out.extend(_check_on_disk(tree, index, action, version, policy))
    finally:
        tree.close()
    return out


def _check_on_disk(
    tree: Tree, index: int, action: Action, version: int, policy: PathPolicy
) -> list[Violation]:
    out: list[Violation] = []

    def add(code: str, message: str) -> None:
        out.append(Violation(code=code, message=message, path=action.path, action_index=index))

    try:
        state = tree.state(action.path, read=False)
        _check(_Target(tree, action.path, state.kind), action, version, policy, add)
    except OpsrunError as exc:
        add(exc.code, exc.message)
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
    elif kind is ActionKind.UPDATE_FILE and version == 2 and target.exists:
        add(
            "ERR_V2_UPDATE_EXISTING_FORBIDDEN",
            "v2 forbids UPDATE_FILE on an existing file; use PATCH_FILE",
        )
    elif not (kind is ActionKind.UPDATE_FILE and version == 2 and action.base_sha256 is None):
        # DELETE_FILE, UPDATE_FILE (v1, or v2 with a base), PATCH_FILE, REPLACE_RANGE.
        _check_existing_file(target, action, add)


def _check_create_file(target: _Target, action: Action, policy: PathPolicy, add: _Add) -> None:
    if target.exists:
        add("ERR_CREATE_EXISTS", "CREATE_FILE over something that already exists")
        if protected_match(action.path, policy.protected) is not None:
            add("ERR_PROTECTED_PATH", "CREATE_FILE would overwrite a protected file")


def _check_create_dir(target: _Target, add: _Add) -> None:
    if target.kind == "file":
        add("ERR_CREATE_EXISTS", "CREATE_DIR where a file already exists")


def _check_delete_dir(target: _Target, policy: PathPolicy, add: _Add) -> None:
    if not target.exists:
        add("ERR_TARGET_MISSING", "DELETE_DIR of a directory that does not exist")
        return
    if target.kind != "dir":
        add("ERR_TARGET_TYPE", "DELETE_DIR of something that is not a directory")
        return
    # What apply's snapshot walk meets: links, special files and .git/.opsrun raise.
    pending = [target.path]
    seen = 0
    while pending and seen < _MAX_WALK_ENTRIES:
        here = pending.pop()
        for name in target.tree.listdir(here):
            seen += 1
            child = f"{here}/{name}"
            relative = child[len(target.path) + 1 :]
            if protected_match(relative, policy.protected) is not None:
                add("ERR_PROTECTED_PATH", f"DELETE_DIR would delete protected {relative!r}")
                return
            if target.tree.state(child, read=False).kind == "dir":
                pending.append(child)


def _check_existing_file(target: _Target, action: Action, add: _Add) -> None:
    """The action needs a regular file there; read it when its hash or text matters."""
    kind = action.kind
    if not target.exists:
        add("ERR_TARGET_MISSING", f"{kind.value} of a file that does not exist")
        return
    if target.kind != "file":
        add("ERR_TARGET_TYPE", f"{kind.value} of something that is not a regular file")
        return
    if kind is ActionKind.DELETE_FILE:
        return
    needs_text = kind in (ActionKind.PATCH_FILE, ActionKind.REPLACE_RANGE)
    base = action.base_sha256 if action.base_sha256 and is_sha256_hex(action.base_sha256) else None
    if not needs_text and base is None:
        return
    if _size(target) > _MAX_READ_BYTES:
        add("ERR_FS_UNREADABLE", "file is too large to check")
        return
    data = target.tree.state(target.path).data or b""
    if base is not None:
        actual = hashlib.sha256(data).hexdigest()
        if actual != base.lower():
            add(
                "ERR_BASE_MISMATCH",
                f"base_sha256 does not match the file (it is {actual}){_eol_hint(data, base)}",
            )
    if needs_text:
        _check_text(data, action, add)


def _size(target: _Target) -> int:
    """The file's size, looked up without following links."""
    found = target.tree.parent(target.path)
    if found is None:
        return 0
    fd, leaf = found
    try:
        st = target.tree.fs.lstat(leaf, dir_fd=fd)
    finally:
        target.tree.fs.close(fd)
    return st.st_size if st is not None and stat.S_ISREG(st.st_mode) else 0


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


def _check_journal_dir(root: str) -> list[Violation]:
    """``.opsrun`` and its lock must not be links (apply would refuse to use them)."""
    found: list[Violation] = []
    for path in (".opsrun", ".opsrun/lock", ".opsrun/.gitignore"):
        try:
            st = os.lstat(os.path.join(root, path))
        except OSError:
            continue
        if stat.S_ISLNK(st.st_mode):
            found.append(
                Violation(
                    code="ERR_PATH_SYMLINK",
                    message=f"{path!r} is a symbolic link; the apply journal never follows links",
                    path=path,
                )
            )
            break
    return found
