"""What both adapters share about their SDK client: closing it (only one the adapter
built, by ``aclose`` or ``async with``), refusing calls once closed, and showing its
endpoint without credentials."""

from __future__ import annotations

from typing import Protocol
from urllib.parse import urlsplit, urlunsplit

from .._closing import AsyncClosing
from ..errors import ProviderError

__all__ = ["CLOSED", "OwnsClient", "shown_url"]

CLOSED = "provider_closed"
"""The code of the error a closed adapter raises for every call."""


class _Closable(Protocol):
    async def close(self) -> None: ...

    def is_closed(self) -> bool: ...


class OwnsClient(AsyncClosing):
    """``aclose()`` and ``async with`` for an adapter whose SDK client is ``_client``;
    ``_owns_client`` is False for a client the caller passed in, which stays open."""

    _client: _Closable
    _owns_client: bool
    _closed: bool = False

    async def aclose(self) -> None:
        """Close the HTTP connections of a client the adapter built, after which every
        call raises ``ProviderError`` (``provider_closed``). A client given to the
        adapter stays open, and so usable, until its owner closes it."""
        if self._owns_client:
            self._closed = True
            await self._client.close()

    def _check_open(self) -> None:
        """Raises:
        ProviderError: the adapter, or the client it was given, was closed (code
            ``provider_closed``, not retryable).
        """
        name = type(self).__name__
        if self._closed:
            raise ProviderError(f"this {name} was closed (aclose()); make a new one", code=CLOSED)
        if self._client.is_closed():
            raise ProviderError(f"the client given to this {name} was closed", code=CLOSED)


def shown_url(url: str) -> str:
    """``url`` without what may hold a credential: user info, query and fragment."""
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, host, parts.path, "", ""))
