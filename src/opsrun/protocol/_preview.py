"""What a plan would do to a directory: the planned changes, and their diffs for a UI.

:func:`plan_changes` reads the touched paths through a :class:`Tree` (never
following a link), checks base hashes and that every patch and range applies,
and returns the new state of each path. :func:`preview_plan` turns that into one
unified diff per path and writes nothing; :func:`opsrun.protocol.apply_plan`
applies the same changes.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Collection
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from opsrun.errors import OpsrunError, PlanError

from ._events import PlanEventSink, emit
from ._fs import FileSystem, PathState, Tree, process_umask
from ._limits import PathPolicy, PlanLimits, Violation
from ._patch import apply_patch_detailed, check_base_sha256, decode_text, replace_range
from ._patch_place import HunkPlacement, PatchTolerance, check_tolerance
from ._plan import Action, ActionKind, Plan, canonical_order
from ._validate import validate_plan

__all__ = ["DiffItem", "plan_changes", "preview_plan"]

_K = ActionKind


class DiffItem(BaseModel):
    """One touched path and what would change there, as a unified diff."""

    model_config = ConfigDict(frozen=True)

    path: str = Field(description="The path, relative to the root.")
    kind: ActionKind = Field(description="The action that touches it.")
    diff: str = Field(
        description="Unified diff from the current to the new text ('' for directories)."
    )
    hunks: tuple[HunkPlacement, ...] = Field(
        default=(),
        description="PATCH_FILE: where each hunk of the patch applied, the level that "
        "matched it and its offset from the stated line.",
    )

    @property
    def relocated(self) -> tuple[HunkPlacement, ...]:
        """The hunks that moved from their stated line or needed more than an exact match."""
        return tuple(h for h in self.hunks if h.relocated)


@dataclass(frozen=True, slots=True)
class Change:
    """One action resolved against the tree: the old and new state of its path."""

    index: int
    action: Action
    before: PathState
    after: PathState
    removed: tuple[tuple[str, PathState], ...] = ()  # DELETE_DIR: the subtree, parents first
    hunks: tuple[HunkPlacement, ...] = ()  # PATCH_FILE: where each hunk applied


def _fail(code: str, message: str, index: int, action: Action) -> PlanError:
    return PlanError(
        f"action #{index} {action.kind.value} {action.path!r}: {message}",
        code=code,
        details={"path": action.path, "action_index": index},
    )


def _text_edit(
    index: int, action: Action, before: PathState, tolerance: PatchTolerance
) -> tuple[bytes, tuple[HunkPlacement, ...]]:
    if before.kind != "file":
        raise _fail("ERR_TARGET_MISSING", "the file does not exist", index, action)
    data = before.data or b""
    hunks: tuple[HunkPlacement, ...] = ()
    try:
        check_base_sha256(data, action.base_sha256, path=action.path)
        if action.kind is _K.UPDATE_FILE:
            return (action.content or "").encode("utf-8"), ()
        text = decode_text(data, path=action.path)
        if action.kind is _K.PATCH_FILE:
            patched = apply_patch_detailed(
                text, action.patch or "", path=action.path, tolerance=tolerance
            )
            new, hunks = patched.text, patched.hunks
        else:
            if action.start_line is None or action.end_line is None:
                raise _fail(
                    "ERR_RANGE_INVALID", "start_line and end_line are required", index, action
                )
            new = replace_range(
                text, action.start_line, action.end_line, action.content or "", path=action.path
            )
    except OpsrunError as exc:
        raise type(exc)(
            f"action #{index}: {exc.message}",
            code=exc.code,
            details={**exc.details, "action_index": index, "path": action.path},
        ) from exc
    return new.encode("utf-8"), hunks


def plan_changes(tree: Tree, plan: Plan, *, tolerance: PatchTolerance = "exact") -> list[Change]:
    """Resolve every action of ``plan`` against ``tree`` in canonical order.

    ``tolerance`` is how sloppy a PATCH_FILE hunk may be (see ``apply_patch``).

    Raises:
        PlanError: ``ERR_TARGET_MISSING``, ``ERR_TARGET_TYPE``, ``ERR_CREATE_EXISTS``,
            ``ERR_CONTENT_REQUIRED`` and, as :class:`~opsrun.errors.PatchError`,
            ``ERR_BASE_MISMATCH``, ``ERR_BASE_SHA256_INVALID``, ``ERR_PATCH_*``,
            ``ERR_RANGE_INVALID``, ``ERR_NON_UTF8_FILE``.
        ApplyError: ``ERR_PATH_SYMLINK``, ``ERR_PATH_ESCAPES_ROOT``, ``ERR_PATH_PROTECTED``.
    """
    current: dict[str, PathState] = {}
    changes: list[Change] = []
    umask = process_umask()  # new files and directories get the modes the process would
    for index, action in canonical_order(plan):
        before = current.get(action.path) or tree.state(action.path)
        if action.kind in (_K.UPDATE_FILE, _K.PATCH_FILE, _K.REPLACE_RANGE):
            after, hunks = _edit(index, action, before, tolerance)
            changes.append(Change(index, action, before, after, (), hunks))
        else:
            after, removed = _resolve(tree, index, action, before, umask)
            changes.append(Change(index, action, before, after, removed))
        current[action.path] = after
    return changes


def _edit(
    index: int, action: Action, before: PathState, tolerance: PatchTolerance
) -> tuple[PathState, tuple[HunkPlacement, ...]]:
    """Return the new state of a file an UPDATE_FILE, PATCH_FILE or REPLACE_RANGE edits."""
    if action.kind is _K.UPDATE_FILE and action.content is None:
        raise _fail("ERR_CONTENT_REQUIRED", "UPDATE_FILE needs content", index, action)
    data, hunks = _text_edit(index, action, before, tolerance)
    return PathState("file", before.mode, data), hunks


def _resolve(
    tree: Tree, index: int, action: Action, before: PathState, umask: int
) -> tuple[PathState, tuple[tuple[str, PathState], ...]]:
    """Return the new state of the action's path and, for DELETE_DIR, the removed subtree.

    Edits of a file's text are :func:`_edit`'s.
    """
    kind = action.kind
    if kind is _K.CREATE_DIR:
        if before.kind == "file":
            raise _fail("ERR_TARGET_TYPE", "a file is in the way", index, action)
        return (before if before.kind == "dir" else PathState("dir", 0o777 & ~umask)), ()
    if kind is _K.CREATE_FILE:
        if action.content is None:
            raise _fail("ERR_CONTENT_REQUIRED", "CREATE_FILE needs content", index, action)
        if before.kind != "none":
            raise _fail("ERR_CREATE_EXISTS", f"a {before.kind} already exists", index, action)
        return PathState("file", 0o666 & ~umask, action.content.encode("utf-8")), ()
    if kind is _K.DELETE_FILE:
        if before.kind == "dir":
            raise _fail("ERR_TARGET_TYPE", "it is a directory", index, action)
        return PathState("none"), ()
    # DELETE_DIR
    if before.kind == "file":
        raise _fail("ERR_TARGET_TYPE", "it is a file", index, action)
    removed = tuple(tree.walk(action.path)) if before.kind == "dir" else ()
    return PathState("none"), removed


def _lines(state: PathState) -> list[str] | None:
    if state.kind != "file":
        return []
    if b"\0" in (state.data or b""):
        return None
    try:
        return decode_text(state.data or b"").splitlines(keepends=True)
    except OpsrunError:
        return None


def _diff(path: str, before: PathState, after: PathState) -> str:
    if before.kind == "dir" or after.kind == "dir":
        return ""
    old, new = _lines(before), _lines(after)
    source = f"a/{path}" if before.kind == "file" else "/dev/null"
    target = f"b/{path}" if after.kind == "file" else "/dev/null"
    if old is None or new is None:
        return f"Binary files {source} and {target} differ\n"
    return "".join(
        line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
        for line in difflib.unified_diff(old, new, source, target)
    )


def validation_errors(
    plan: Plan,
    root: str | os.PathLike[str],
    read_paths: Collection[str] | None,
    limits: PlanLimits | None,
    policy: PathPolicy | None,
) -> list[Violation]:
    """Return the blocking violations of ``plan`` in APPLY mode against ``root``."""
    found = validate_plan(
        plan, mode="apply", root=root, read_paths=read_paths, limits=limits, policy=policy
    )
    return [v for v in found if v.blocking]


def violations_error(cls: type[PlanError], violations: list[Violation]) -> PlanError:
    """Build the error for a plan that failed validation (the first violation's code)."""
    first = violations[0]
    return cls(
        f"the plan is invalid: {first.message}"
        + (f" (and {len(violations) - 1} more)" if len(violations) > 1 else ""),
        code=first.code,
        details={"violations": [v.model_dump() for v in violations]},
    )


def preview_plan(
    plan: Plan,
    root: str | os.PathLike[str],
    *,
    read_paths: Collection[str] | None = None,
    limits: PlanLimits | None = None,
    policy: PathPolicy | None = None,
    fs: FileSystem | None = None,
    events: PlanEventSink | None = None,
    tolerance: PatchTolerance = "exact",
) -> list[DiffItem]:
    """Return one unified diff per path the plan touches, in apply order; write nothing.

    Emits ``PREVIEW_READY`` (paths and diff size) to ``events`` (default: stdlib
    ``logging``) when the preview is complete. ``tolerance`` is how sloppy a PATCH_FILE
    hunk may be (``"exact"``, ``"whitespace"``, ``"loose"``; see ``apply_patch``); each
    item's ``hunks`` say where the hunks applied.

    Raises:
        PlanError: the first violation's code (all in ``details["violations"]``) when
            the plan is invalid, or the codes of :func:`plan_changes`.
        PatchError: ``ERR_BASE_MISMATCH`` and the other patch codes.
        ApplyError: a path that crosses a link or leaves the root.
        ConfigError: ``tolerance`` is not a level.
    """
    check_tolerance(tolerance)
    blocking = validation_errors(plan, root, read_paths, limits, policy)
    if blocking:
        raise violations_error(PlanError, blocking)
    tree = Tree(fs or FileSystem(), root)
    try:
        changes = plan_changes(tree, plan, tolerance=tolerance)
    finally:
        tree.close()
    items: list[DiffItem] = []
    for change in changes:
        if change.removed:
            for sub, state in reversed(change.removed):
                items.append(
                    DiffItem(
                        path=sub, kind=change.action.kind, diff=_diff(sub, state, PathState("none"))
                    )
                )
            continue
        items.append(
            DiffItem(
                path=change.action.path,
                kind=change.action.kind,
                diff=_diff(change.action.path, change.before, change.after),
                hunks=change.hunks,
            )
        )
    emit(events, "PREVIEW_READY", paths=len(items), diff_chars=sum(len(i.diff) for i in items))
    return items
