"""The context of one driver turn: auto-collected, then fulfilled round by round, then dieted."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any

from ._autocollect import collect
from ._context import ContextBlock, ContextCache, FileBlock, ProjectContext, Refusal
from ._diet import ContextLimits, Diet, apply_diet
from ._plan import ContextRequest, ContextRequestType

__all__ = ["DEFAULT_LOG_LINES", "Gatherer", "request_key"]

DEFAULT_LOG_LINES = 200
"""``last_n`` of a logs request that names none."""

RequestKey = tuple[Any, ...]


def request_key(request: ContextRequest) -> RequestKey:
    """What makes two context requests the same request."""
    return (
        request.type,
        request.path,
        request.start_line,
        request.end_line,
        request.query,
        request.glob,
        request.source,
        request.last_n,
    )


class Gatherer:
    """Collects a turn's context blocks, each request fetched once (through the cache).

    Args:
        context: Where blocks come from.
        limits: The diet's budget.
        root: The project directory (for auto-collect).
        emit: ``emit(event_name, **fields)`` for cache and diet events.
    """

    def __init__(
        self,
        context: ProjectContext,
        limits: ContextLimits,
        root: str | os.PathLike[str],
        emit: Callable[..., None],
    ) -> None:
        self.limits = limits
        self.root = root
        self.emit = emit
        self.cache = ContextCache(
            context,
            on_hit=lambda kind, key: emit("CONTEXT_CACHE_HIT", type=kind, key=key),
            on_miss=lambda kind, key: emit("CONTEXT_CACHE_MISS", type=kind, key=key),
        )
        self.blocks: list[ContextBlock] = []
        self.requests: list[ContextRequest] = []
        self._done: set[RequestKey] = set()
        self.rounds = 0

    async def auto(self, text: str) -> None:
        """Add what a traceback or an import error in ``text`` points at."""
        wanted, env = collect(text, self.root)
        for item in wanted:
            request = ContextRequest(
                type="read_file", path=item.path, start_line=item.start_line, end_line=item.end_line
            )
            await self._add(request, priority=item.priority)
        if env:
            await self._add(ContextRequest(type="env"))

    def new(self, requests: Iterable[ContextRequest]) -> list[ContextRequest]:
        """The requests not fulfilled yet, each once, in order."""
        seen: set[RequestKey] = set()
        fresh = []
        for request in requests:
            key = request_key(request)
            if key not in self._done and key not in seen:
                seen.add(key)
                fresh.append(request)
        return fresh

    async def fulfil(self, requests: Iterable[ContextRequest]) -> None:
        """Fetch each request not fulfilled yet and add its block."""
        for request in self.new(requests):
            await self._add(request)

    async def read_whole(self, paths: Iterable[str]) -> None:
        """Read each of ``paths`` whole; where that succeeds, drop the line ranges of it."""
        for path in paths:
            await self._add(ContextRequest(type="read_file", path=path))
            if any(
                isinstance(b, FileBlock) and b.path == path and b.whole and b.text is not None
                for b in self.blocks
            ):
                self.blocks = [
                    b
                    for b in self.blocks
                    if not (isinstance(b, FileBlock) and b.path == path and not b.whole)
                ]

    async def _add(self, request: ContextRequest, *, priority: int = 0) -> None:
        key = request_key(request)
        if key in self._done:
            return
        self._done.add(key)
        self.requests.append(request)
        self.blocks.append(await self._fetch(request, priority))

    async def _fetch(self, request: ContextRequest, priority: int) -> ContextBlock:
        kind = request.type
        if kind == ContextRequestType.READ_FILE:
            if not request.path:
                return Refusal("read_file", "no path given")
            return await self.cache.read_file(
                request.path, request.start_line, request.end_line, priority=priority
            )
        if kind == ContextRequestType.SEARCH:
            if not request.query:
                return Refusal("search", "no query given")
            return await self.cache.search(request.query, request.glob)
        if kind == ContextRequestType.LOGS:
            if not request.source:
                return Refusal("logs", "no source given")
            return await self.cache.logs(request.source, request.last_n or DEFAULT_LOG_LINES)
        if kind == ContextRequestType.ENV:
            return await self.cache.env()
        return Refusal(str(kind)[:40], "unknown context request type")

    def view(self) -> Diet:
        """The blocks to send now, after the diet (``CONTEXT_DIET_APPLIED`` when it acted)."""
        diet = apply_diet(self.blocks, self.limits)
        if diet.applied:
            stats = diet.stats()
            self.emit(
                "CONTEXT_DIET_APPLIED",
                files=stats["context_files_count"],
                dropped=stats["context_files_dropped_count"],
                truncated=stats["context_truncated_files_count"],
                total_chars=stats["context_total_chars"],
            )
        return diet
