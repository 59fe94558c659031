"""The plan model shared by both protocol versions, and the canonical apply order.

A :class:`Plan` is what an LLM answer becomes after parsing: v1 arrays, v1
``proposed_changes.actions`` objects and v2 objects all normalise to it. The
models are frozen values; they do not validate paths or limits (that is
:func:`opsrun.protocol.validate_plan`'s job), so a parsed plan can carry
violations that are reported together later.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "Action",
    "ActionKind",
    "ContextRequest",
    "ContextRequestType",
    "Plan",
    "canonical_order",
    "path_depth",
]


class ActionKind(StrEnum):
    """What an action does to its path; values equal the names used on the wire."""

    CREATE_FILE = "CREATE_FILE"
    CREATE_DIR = "CREATE_DIR"
    UPDATE_FILE = "UPDATE_FILE"
    DELETE_FILE = "DELETE_FILE"
    DELETE_DIR = "DELETE_DIR"
    PATCH_FILE = "PATCH_FILE"
    REPLACE_RANGE = "REPLACE_RANGE"


#: Kinds that change an existing file's text.
EDIT_KINDS: frozenset[ActionKind] = frozenset(
    {ActionKind.UPDATE_FILE, ActionKind.PATCH_FILE, ActionKind.REPLACE_RANGE}
)
#: Kinds that only v2 accepts.
V2_ONLY_KINDS: frozenset[ActionKind] = frozenset({ActionKind.PATCH_FILE, ActionKind.REPLACE_RANGE})
#: Kinds that carry a ``content`` string.
CONTENT_KINDS: frozenset[ActionKind] = frozenset(
    {ActionKind.CREATE_FILE, ActionKind.UPDATE_FILE, ActionKind.REPLACE_RANGE}
)


class Action(BaseModel):
    """One change to one path, relative to the project root."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: ActionKind = Field(description="What the action does.")
    path: str = Field(description="Relative path with ``/`` separators.")
    content: str | None = Field(
        default=None,
        description="Full new text (CREATE_FILE, UPDATE_FILE) or the new block (REPLACE_RANGE).",
    )
    patch: str | None = Field(default=None, description="A unified diff (PATCH_FILE only).")
    base_sha256: str | None = Field(
        default=None,
        description="Lower-case hex sha256 of the file the edit was written against (v2).",
    )
    start_line: int | None = Field(
        default=None, description="First replaced line, 1-based (REPLACE_RANGE only)."
    )
    end_line: int | None = Field(
        default=None, description="Last replaced line, inclusive (REPLACE_RANGE only)."
    )


class ContextRequestType(StrEnum):
    """The kinds of extra context a plan may ask for before the next round."""

    READ_FILE = "read_file"
    SEARCH = "search"
    LOGS = "logs"
    ENV = "env"


class ContextRequest(BaseModel):
    """A request for more context, fulfilled before the next LLM round.

    ``type`` stays a plain string so that an unknown type parses and is then
    reported by validation (``ERR_CONTEXT_REQUEST_INVALID``) together with every
    other problem, instead of failing the whole parse.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    type: str = Field(description="One of read_file, search, logs, env.")
    path: str | None = Field(default=None, description="File to read (read_file).")
    start_line: int | None = Field(default=None, description="First line to read, 1-based.")
    end_line: int | None = Field(default=None, description="Last line to read, inclusive.")
    query: str | None = Field(default=None, description="Text to search for (search).")
    glob: str | None = Field(default=None, description="Optional file filter (search).")
    source: str | None = Field(default=None, description="Log source (logs).")
    last_n: int | None = Field(default=None, description="How many trailing log lines (logs).")


class Plan(BaseModel):
    """An LLM answer, normalised: the actions plus the accompanying fields."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: Literal[1, 2] = Field(description="Protocol version the plan was parsed as.")
    actions: tuple[Action, ...] = Field(default=(), description="Changes, in the LLM's order.")
    summary: str | None = Field(default=None, description="What was done or is proposed.")
    context_requests: tuple[ContextRequest, ...] = Field(
        default=(), description="Extra context wanted before the next round."
    )
    memory_patch: dict[str, Any] | None = Field(
        default=None, description="Dotted preference keys to update (see memory_patch rules)."
    )
    repairs: tuple[str, ...] = Field(
        default=(),
        description="Fixes best-effort parsing made to the answer's JSON before it matched "
        "the schema (raw control characters escaped inside strings); empty when the JSON "
        "was taken as written.",
    )


_GROUP: dict[ActionKind, int] = {
    ActionKind.CREATE_DIR: 0,
    ActionKind.CREATE_FILE: 1,
    ActionKind.UPDATE_FILE: 1,
    ActionKind.PATCH_FILE: 1,
    ActionKind.REPLACE_RANGE: 1,
    ActionKind.DELETE_FILE: 2,
    ActionKind.DELETE_DIR: 3,
}


def path_depth(path: str) -> int:
    """Return the number of non-empty segments of ``path`` (``/`` and ``\\`` both separate)."""
    return sum(1 for seg in path.replace("\\", "/").split("/") if seg)


def canonical_order(plan_or_actions: Plan | Iterable[Action]) -> list[tuple[int, Action]]:
    """Return the actions in the order they must be applied, with their plan indices.

    Groups run CREATE_DIR → CREATE_FILE / UPDATE_FILE / PATCH_FILE / REPLACE_RANGE →
    DELETE_FILE → DELETE_DIR. Inside a group the plan's order is kept, except that
    CREATE_DIR runs shallowest first (parents before children) and DELETE_DIR runs
    deepest first (children before parents); equal depths keep the plan's order.

    Args:
        plan_or_actions: A plan or any iterable of actions.

    Returns:
        ``(index_in_plan, action)`` pairs in apply order. Never raises.
    """
    actions = plan_or_actions.actions if isinstance(plan_or_actions, Plan) else plan_or_actions

    def key(item: tuple[int, Action]) -> tuple[int, int, int]:
        index, action = item
        group = _GROUP[action.kind]
        if action.kind is ActionKind.CREATE_DIR:
            depth = path_depth(action.path)
        elif action.kind is ActionKind.DELETE_DIR:
            depth = -path_depth(action.path)
        else:
            depth = 0
        return (group, depth, index)

    return sorted(enumerate(actions), key=key)
