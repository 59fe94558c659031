"""``async with`` for objects closed by ``aclose()``."""

from __future__ import annotations

from types import TracebackType
from typing import Self

__all__ = ["AsyncClosing"]


class AsyncClosing:
    """``async with obj:`` returns ``obj`` and awaits ``obj.aclose()`` on the way out."""

    async def aclose(self) -> None:
        """Release what the object holds (subclasses say what)."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
