"""What the store queries return: pages, chat summaries, archived artifact versions."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Generic, TypeVar

from pydantic import Field

from ._artifact import ArtifactVersion
from ._base import Model

T = TypeVar("T")


class Page(Model, Generic[T]):
    """One page of a listing, and where the next one starts.

    Pass ``next_cursor`` as ``cursor=`` to the same query to get the next page; it is
    None on the last page. Cursors are opaque strings: keep them as they are, and use
    them only with the query and store that made them.
    """

    items: tuple[T, ...] = ()
    """The items of this page, in the query's order."""
    next_cursor: str | None = None
    """Where the next page starts; None when this is the last page."""


class ChatSummary(Model):
    """One chat in the chat list: how many messages it has and when it last changed."""

    chat_id: str
    """The chat."""
    message_count: int = Field(ge=0)
    """Messages of the chat, over all its branches."""
    last_message_id: str | None = None
    """The chat's newest message: the one added last (editing a message does not make it
    the newest; deleting the newest makes the one added before it the newest)."""
    updated_at: datetime
    """When the store last saved or deleted a message of the chat, by the store's own
    clock (UTC). Down the chat list (newest first) it never increases: the store orders
    its writes itself and keeps their times in that order."""


class ArchivedVersion(Model):
    """One artifact version that retention pruned, and the run whose write pruned it.

    ``ArchivedVersion(version, run_id)`` also works with the two fields by position.
    """

    version: ArtifactVersion
    """The pruned version."""
    run_id: str
    """The run that pruned it."""

    def __init__(self, *args: Any, **data: Any) -> None:
        if len(args) > 2:
            raise TypeError(f"ArchivedVersion takes 2 positional arguments, got {len(args)}")
        data.update(zip(("version", "run_id"), args, strict=False))
        super().__init__(**data)
