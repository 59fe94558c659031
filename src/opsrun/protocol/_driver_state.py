"""Where the driver keeps the plan between a PLAN turn and the APPLY turn that follows.

:class:`PlanState` is the port; :class:`InMemoryPlanState` serves tests and one process,
:class:`FilePlanState` keeps the plan in a JSON file so a CLI or a restarted host can
answer ``ok`` to a plan made earlier.
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path
from typing import Protocol

import anyio
from pydantic import BaseModel, ConfigDict, Field

from ._atomic import read_model, write_atomic
from ._plan import ContextRequest, Plan

__all__ = ["FilePlanState", "InMemoryPlanState", "PlanState", "SavedPlan"]


class SavedPlan(BaseModel):
    """A validated PLAN answer and what the model saw when it wrote it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    goal: str = Field(description="The user's request the plan answers.")
    plan: Plan = Field(description="The validated plan (no actions).")
    protocol_version: int = Field(description="Protocol version the plan was written in.")
    trace_id: str = Field(description="The propose cycle that produced it.")
    read_paths: tuple[str, ...] = Field(
        default=(), description="Files whose contents the model was shown."
    )
    context_requests: tuple[ContextRequest, ...] = Field(
        default=(),
        description="Everything fetched for the model while planning (read afresh to apply).",
    )
    saved_at: datetime = Field(description="When the plan was saved (UTC).")


class PlanState(Protocol):
    """Holds at most one saved plan per driver."""

    async def load(self) -> SavedPlan | None:
        """The saved plan, or None."""
        ...

    async def save(self, saved: SavedPlan) -> None:
        """Replace the saved plan."""
        ...

    async def clear(self) -> None:
        """Forget the saved plan (after it was applied)."""
        ...


class InMemoryPlanState:
    """A saved plan held in memory (tests, one process)."""

    def __init__(self) -> None:
        self._saved: SavedPlan | None = None

    async def load(self) -> SavedPlan | None:
        """The saved plan, or None."""
        return self._saved

    async def save(self, saved: SavedPlan) -> None:
        """Replace the saved plan."""
        self._saved = saved

    async def clear(self) -> None:
        """Forget the saved plan."""
        self._saved = None


class FilePlanState:
    """A saved plan in one JSON file, replaced atomically.

    Args:
        path: The file (its directory is created on first save).

    Methods raise ``ConfigError`` (code ``plan_state_invalid``) when the file holds
    something that is not a saved plan, and ``OSError`` when it cannot be read or written.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    async def load(self) -> SavedPlan | None:
        """The saved plan, or None when the file does not exist."""
        return await anyio.to_thread.run_sync(self._load)

    async def save(self, saved: SavedPlan) -> None:
        """Write the plan (temporary file, fsync, rename)."""
        await anyio.to_thread.run_sync(self._save, saved)

    async def clear(self) -> None:
        """Delete the file, if any."""
        await anyio.to_thread.run_sync(lambda: self.path.unlink(missing_ok=True))

    def _load(self) -> SavedPlan | None:
        return read_model(self.path, SavedPlan, code="plan_state_invalid", what="a saved plan")

    def _save(self, saved: SavedPlan) -> None:
        write_atomic(self.path, saved.model_dump_json(indent=2).encode("utf-8"))
