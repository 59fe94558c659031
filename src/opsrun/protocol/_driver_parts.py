"""The plan driver's small parts: the outcome of one answer, what a round shows the
model, and the functions that turn errors and blocks into trace records."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from opsrun.errors import OpsrunError

from ._context import ContextBlock, EnvBlock, FileBlock, LogsBlock, SearchBlock
from ._driver_config import DriverMode
from ._limits import Violation
from ._plan import Plan
from ._preview import DiffItem

__all__ = [
    "ANSWERED_BY_REFUSAL",
    "FALLBACK_AFTER_REPAIR",
    "FALLBACK_AT_ONCE",
    "Accepted",
    "Rejected",
    "Round",
    "block_summary",
    "shown_files",
    "summarize",
    "violation",
    "violations_of",
]

FALLBACK_AFTER_REPAIR = frozenset({"ERR_PATCH_APPLY_FAILED", "ERR_V2_UPDATE_EXISTING_FORBIDDEN"})
"""v2 failures that get one v2 repair, then a v1 attempt."""
FALLBACK_AT_ONCE = frozenset({"ERR_NON_UTF8_FILE"})
"""v2 failures that go to v1 without a repair (v2 cannot patch such a file)."""
ANSWERED_BY_REFUSAL = frozenset({"ERR_CONTEXT_REQUEST_INVALID"})
"""Violations answered with a REFUSED line in the next round, not a repair."""


@dataclass(slots=True)
class Accepted:
    """An answer that passed every check."""

    plan: Plan
    preview: tuple[DiffItem, ...] = ()
    more_context: bool = False  # an APPLY answer that asks for context instead of acting


@dataclass(slots=True)
class Rejected:
    """Why an answer (or a call) failed, and what the driver does next."""

    code: str
    message: str
    stage: str
    violations: tuple[Violation, ...] = ()
    fallback: bool = False
    back_to_plan: bool = False


@dataclass(slots=True)
class Round:
    """What one protocol attempt shows the model."""

    mode: DriverMode
    goal: str
    blocks: Sequence[ContextBlock] = ()
    saved_summary: str | None = None
    shown: dict[str, str] = field(default_factory=dict)  # path -> sha256 shown
    rounds_left: int = 0
    partial: dict[str, int] = field(default_factory=dict)  # path -> size, shown only in part


def shown_files(blocks: Sequence[ContextBlock]) -> tuple[dict[str, str], dict[str, int]]:
    """The files ``blocks`` show (path → sha256) and those shown only in part (path → size).

    A file shown whole by any block is not partial, even when another block shows a
    range of it.
    """
    files = [b for b in blocks if isinstance(b, FileBlock)]
    whole = {b.path for b in files if b.whole}
    partial = {b.path: b.size for b in files if b.path not in whole}
    return {b.path: b.sha256 for b in files}, partial


def violation(code: str, message: str) -> Violation:
    return Violation(code=code, message=message)


def violations_of(exc: OpsrunError) -> tuple[Violation, ...]:
    raw = exc.details.get("violations")
    if not isinstance(raw, list):
        return ()
    found: list[Violation] = []
    for item in raw:
        try:
            found.append(Violation.model_validate(item))
        except ValueError:
            continue
    return tuple(found)


def block_summary(block: ContextBlock) -> dict[str, Any]:
    """A block as the trace records it: what it was, never its content."""
    if isinstance(block, FileBlock):
        return {
            "type": "file",
            "path": block.path,
            "sha256": block.sha256,
            "chars": len(block.text or ""),
            "utf8": block.text is not None,
            "priority": block.priority,
            "truncated": block.truncated,
        }
    if isinstance(block, SearchBlock):
        return {"type": "search", "query": block.query, "glob": block.glob, "hits": len(block.hits)}
    if isinstance(block, LogsBlock):
        return {"type": "logs", "source": block.source, "chars": len(block.text)}
    if isinstance(block, EnvBlock):
        return {"type": "env", "chars": len(block.text)}
    return {"type": "refused", "request": block.request, "reason": block.reason}


def summarize(plan: Plan) -> str:
    """A summary written from the actions, for a plan that came without one."""
    parts = [f"{a.kind.value} {a.path}" for a in plan.actions[:10]]
    more = f" and {len(plan.actions) - 10} more" if len(plan.actions) > 10 else ""
    return "Changes: " + "; ".join(parts) + more
