"""Store implementations. ``memory`` is the default for tests and demos."""

from __future__ import annotations

from .memory import ArchivedVersion as ArchivedVersion
from .memory import InMemoryArchive as InMemoryArchive
from .memory import InMemoryChatStore as InMemoryChatStore
from .memory import InMemoryProfileStore as InMemoryProfileStore
from .memory import InMemoryRunStore as InMemoryRunStore
from .memory import InMemorySessionStore as InMemorySessionStore
from .memory import InMemoryStores as InMemoryStores

__all__ = [
    "ArchivedVersion",
    "InMemoryArchive",
    "InMemoryChatStore",
    "InMemoryProfileStore",
    "InMemoryRunStore",
    "InMemorySessionStore",
    "InMemoryStores",
]
