"""What ``opsrun plan check`` and ``opsrun plan apply`` share: the root check, the one
format of a problem line, and the JSON shape of a result."""

from __future__ import annotations

import os
from typing import Any

from opsrun.errors import OpsrunError

from ._limits import Violation
from ._patch_place import HunkPlacement

__all__ = ["error_violations", "relocation_line", "result_json", "root_problem", "violation_line"]


def root_problem(root: str) -> str | None:
    """Why ``--root`` cannot be used, or None when it is a directory."""
    if not os.path.exists(root):
        return f"--root {root!r} does not exist"
    if not os.path.isdir(root):
        return f"--root {root!r} is not a directory"
    return None


def error_violations(exc: OpsrunError) -> list[Violation]:
    """Every problem an error carries, as violations (its own code first)."""
    found: list[Violation] = []
    for item in exc.details.get("violations") or ():
        try:
            found.append(Violation.model_validate(item))
        except ValueError:
            continue
    if not found:
        path = exc.details.get("path")
        index = exc.details.get("action_index")
        found.append(
            Violation(
                code=exc.code,
                message=exc.message,
                path=path if isinstance(path, str) else None,
                action_index=index if isinstance(index, int) else None,
            )
        )
    return found


def violation_line(v: Violation) -> str:
    """``error: CODE [action 2, 'src/app.py'] message`` — one line per problem."""
    where = []
    if v.action_index is not None:
        where.append(f"action {v.action_index}")
    if v.context_index is not None:
        where.append(f"context request {v.context_index}")
    if v.path is not None:
        where.append(repr(v.path))
    prefix = f"{v.severity}: {v.code}"
    return f"{prefix} [{', '.join(where)}] {v.message}" if where else f"{prefix} {v.message}"


def result_json(ok: bool, violations: list[Violation], **extra: Any) -> dict[str, Any]:
    """The ``--json`` document of check and apply."""
    return {"ok": ok, **extra, "violations": [v.model_dump() for v in violations]}


def relocation_line(path: str, hunk: HunkPlacement) -> str:
    """``note: app.py hunk 2 applied at line 40 (stated 37, offset +3, level exact)``."""
    stated = f"stated {hunk.stated_line}" if hunk.stated_line is not None else "no line stated"
    return (
        f"note: {path} hunk {hunk.hunk} applied at line {hunk.line} "
        f"({stated}, offset {hunk.offset:+d}, level {hunk.level}, {hunk.rule})"
    )
