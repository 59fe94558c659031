"""``aclose()`` and ``async with`` for the test doubles, as the real adapters have them,
so code that closes its provider can be tested with a double in its place."""

from __future__ import annotations

from .._closing import AsyncClosing
from ..errors import ProviderError

__all__ = ["Closable"]


class Closable(AsyncClosing):
    """Once closed, every call raises ``ProviderError`` (``provider_closed``), like the
    real adapters; a test can assert its code closed the double with :attr:`closed`."""

    closed: bool = False
    """True after :meth:`aclose` (or leaving ``async with``)."""

    async def aclose(self) -> None:
        """Mark the double closed; closing twice is harmless."""
        self.closed = True

    def _closed_error(self) -> ProviderError | None:
        if not self.closed:
            return None
        name = type(self).__name__
        return ProviderError(f"this {name} was closed (aclose())", code="provider_closed")

    def _check_open(self) -> None:
        error = self._closed_error()
        if error is not None:
            raise error
