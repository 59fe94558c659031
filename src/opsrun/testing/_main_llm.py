"""Main LLM doubles: deterministic, offline, and recording every request."""

from __future__ import annotations

import inspect
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterable
from contextlib import aclosing
from typing import Any

import anyio

from ..ports import MainLlmDone, MainLlmRequest, ProviderCapabilities
from ._closable import Closable

__all__ = ["FunctionMainLlm", "OfflineMainLlm", "ScriptedMainLlm"]

Reply = str | MainLlmDone | BaseException


def _chunks(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


class _Streaming(Closable):
    """Shared streaming: split a reply into chunks, optionally sleeping between them."""

    def __init__(
        self,
        *,
        chunk_size: int = 16,
        delay: float = 0.0,
        capabilities: ProviderCapabilities | None = None,
    ) -> None:
        self.capabilities = capabilities or ProviderCapabilities()
        """What the double declares (``developer_role`` False by default)."""
        self.chunk_size = chunk_size
        self.delay = delay
        self.requests: list[MainLlmRequest] = []

    @property
    def last_request(self) -> MainLlmRequest | None:
        """The most recent request, or None."""
        return self.requests[-1] if self.requests else None

    async def _stream_reply(self, reply: Reply) -> AsyncGenerator[str | MainLlmDone, None]:
        if isinstance(reply, BaseException):
            if self.delay:
                await anyio.sleep(self.delay)
            raise reply
        if not isinstance(reply, str | MainLlmDone):
            raise TypeError(
                f"a main LLM reply must be str, MainLlmDone or an exception, not {type(reply)}"
            )
        done = reply if isinstance(reply, MainLlmDone) else MainLlmDone(text=reply)
        for chunk in _chunks(done.text, self.chunk_size):
            if self.delay:
                await anyio.sleep(self.delay)
            yield chunk
        yield done


class ScriptedMainLlm(_Streaming):
    """Replies from a queue: strings, :class:`MainLlmDone` values or exceptions to raise.

    When the queue is empty it answers ``default`` (or raises ``AssertionError`` when
    ``default`` is None, so a test notices an unexpected call). ``delay`` seconds pass
    before each chunk, which makes aborts and deadlines testable.
    """

    def __init__(
        self,
        replies: Iterable[Reply] = (),
        *,
        default: str | None = "OK",
        chunk_size: int = 16,
        delay: float = 0.0,
        capabilities: ProviderCapabilities | None = None,
    ) -> None:
        super().__init__(chunk_size=chunk_size, delay=delay, capabilities=capabilities)
        if isinstance(replies, str):
            raise TypeError(f"replies is a list of replies, not one string: use [{replies!r}]")
        self.replies: deque[Reply] = deque(replies)
        self.default = default
        self.unexpected: list[MainLlmRequest] = []
        """The requests that found the queue empty with ``default`` None (the runner
        records the ``AssertionError`` they raised as the call's error: assert on this)."""

    def stream(self, request: MainLlmRequest) -> AsyncIterator[str | MainLlmDone]:
        """Record the request and stream the next reply.

        Raises:
            ProviderError: while iterating, when the double was closed
                (``provider_closed``; the request is not recorded).
        """
        if (closed := self._closed_error()) is not None:
            return self._stream_reply(closed)
        self.requests.append(request)
        if self.replies:
            return self._stream_reply(self.replies.popleft())
        if self.default is None:
            self.unexpected.append(request)
            return self._stream_reply(AssertionError("unexpected main LLM call"))
        return self._stream_reply(self.default)


class FunctionMainLlm(_Streaming):
    """Computes each reply with ``fn(request)`` (sync or async), like a fake model."""

    def __init__(
        self,
        fn: Callable[[MainLlmRequest], str | MainLlmDone | Awaitable[str | MainLlmDone]],
        *,
        chunk_size: int = 16,
        delay: float = 0.0,
        capabilities: ProviderCapabilities | None = None,
    ) -> None:
        super().__init__(chunk_size=chunk_size, delay=delay, capabilities=capabilities)
        self.fn = fn

    async def _compute(self, request: MainLlmRequest) -> AsyncIterator[str | MainLlmDone]:
        try:
            reply: Any = self.fn(request)
            if inspect.isawaitable(reply):
                reply = await reply
        except Exception as exc:
            reply = exc
        async with aclosing(self._stream_reply(reply)) as items:
            async for item in items:
                yield item

    def stream(self, request: MainLlmRequest) -> AsyncIterator[str | MainLlmDone]:
        """Record the request and stream the computed reply.

        Raises:
            ProviderError: while iterating, when the double was closed
                (``provider_closed``; the request is not recorded).
        """
        if (closed := self._closed_error()) is not None:
            return self._stream_reply(closed)
        self.requests.append(request)
        return self._compute(request)


def _offline_reply(request: MainLlmRequest) -> str:
    user = next((m.content for m in reversed(request.messages) if m.role == "user"), "")
    notes = [m.content for m in request.messages if m.role == "system"]
    extra = f" I kept {len(notes)} instruction block(s) in mind." if notes else ""
    seen = len(request.messages)
    again = ", told again" if request.trigger.value == "regenerate" else ""
    return f"({seen} messages in view{again}) You said: {user.strip()!r}.{extra}"


class OfflineMainLlm(FunctionMainLlm):
    """A deterministic offline main LLM for demos: its reply is a function of the prompt."""

    def __init__(
        self,
        *,
        chunk_size: int = 12,
        delay: float = 0.0,
        capabilities: ProviderCapabilities | None = None,
    ) -> None:
        super().__init__(
            _offline_reply, chunk_size=chunk_size, delay=delay, capabilities=capabilities
        )
