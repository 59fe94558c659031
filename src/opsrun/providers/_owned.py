"""Closing an adapter's SDK client: only one the adapter built, by ``aclose`` or ``async with``."""

from __future__ import annotations

from types import TracebackType
from typing import Protocol, Self

__all__ = ["OwnsClient"]


class _Closable(Protocol):
    async def close(self) -> None: ...


class OwnsClient:
    """``aclose()`` and ``async with`` for an adapter whose SDK client is ``_client``;
    ``_owns_client`` is False for a client the caller passed in, which stays open."""

    _client: _Closable
    _owns_client: bool

    async def aclose(self) -> None:
        """Close the HTTP connections of a client the adapter built (not one given)."""
        if self._owns_client:
            await self._client.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
