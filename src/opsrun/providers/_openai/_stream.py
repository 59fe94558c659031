"""Reading a Chat Completions event stream off the HTTP response.

The adapter reads the server-sent events itself rather than through the SDK's stream
object: that one stops at ``data: [DONE]`` and leaves its async generators (and
httpx's under them) suspended for the garbage collector, which trio reports as a
``ResourceWarning``. Here every generator of the response body is run to its end:
after ``[DONE]`` the rest of the body is read (briefly), and on an early stop the
response is closed first, so the remaining reads fail at once and finish them.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio

from ...errors import ProviderError, ProviderTimeout, ProviderUnavailable
from ...model import Usage
from ...ports import MainLlmDone
from ._errors import event_error
from ._reply import REFUSAL, finish_reason, usage_of

__all__ = ["ChunkReader", "StreamedReply", "transport_error"]

DRAIN_SECONDS = 0.1
"""How long the rest of a finished body may take to read (so the connection is reused)."""


class Body(Protocol):
    """The part of an ``httpx`` response the reader uses."""

    def aiter_lines(self) -> AsyncIterator[str]:
        """The body's lines."""
        ...

    async def aclose(self) -> None:
        """Close the response."""
        ...


def transport_error(exc: Exception) -> ProviderError:
    """The provider error of an HTTP client failure while the body was read."""
    names = {cls.__name__ for cls in type(exc).__mro__}
    if "TimeoutException" in names or isinstance(exc, TimeoutError):
        return ProviderTimeout("the provider stopped sending within the client's timeout")
    return ProviderUnavailable(
        f"the connection to the provider broke during the stream ({type(exc).__name__})"
    )


@dataclass(slots=True)
class _Events:
    """Server-sent events from lines: ``data:`` fields joined until a blank line."""

    data: list[str] = field(default_factory=list)
    name: str | None = None

    def feed(self, line: str) -> tuple[str | None, str] | None:
        """Take one line; the ``(event, data)`` it completes, if any."""
        if not line:
            return self.flush()
        if line.startswith(":"):
            return None  # a comment (keep-alive)
        key, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if key == "data":
            self.data.append(value)
        elif key == "event":
            self.name = value
        return None

    def flush(self) -> tuple[str | None, str] | None:
        """The event in progress, if any (at a blank line or the end of the body)."""
        if not self.data:
            self.name = None
            return None
        event = (self.name, "\n".join(self.data))
        self.data, self.name = [], None
        return event


@dataclass(slots=True)
class StreamedReply:
    """Collects a streamed completion, chunk by chunk."""

    parts: list[str] = field(default_factory=list)
    raw_finish: str | None = None
    refused: bool = False
    usage: Usage | None = None

    def add(self, chunk: dict[str, Any]) -> str:
        """Take one chunk in; return the text it adds (may be empty)."""
        if chunk.get("usage") is not None:
            self.usage = usage_of(chunk["usage"])
        piece = ""
        choices = chunk.get("choices")
        for choice in choices if isinstance(choices, list) else ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta")
            delta = delta if isinstance(delta, dict) else {}
            content, refusal = delta.get("content"), delta.get("refusal")
            if isinstance(content, str):
                piece += content
            if isinstance(refusal, str) and refusal:
                self.refused = True
                piece += refusal
            if isinstance(choice.get("finish_reason"), str):
                self.raw_finish = choice["finish_reason"]
        if piece:
            self.parts.append(piece)
        return piece

    def done(self) -> MainLlmDone:
        """The stream's last item.

        Raises:
            ProviderUnavailable: the stream ended without a finish reason: the
                connection closed before the reply was complete.
        """
        if self.raw_finish is None:
            raise ProviderUnavailable(
                "the stream ended before the provider finished the reply",
                details={"receivedChars": sum(len(p) for p in self.parts)},
            )
        reason, raw = finish_reason(self.raw_finish), self.raw_finish
        if self.refused:
            reason, raw = "content_filter", REFUSAL
        return MainLlmDone(
            text="".join(self.parts), finish_reason=reason, raw_finish_reason=raw, usage=self.usage
        )


class ChunkReader:
    """Reads a Chat Completions stream: call :meth:`next_piece` until it returns None,
    then :meth:`close` (always, also after an error or a cancellation).

    ``secrets`` are masked in the messages of error events.
    """

    def __init__(self, body: Body, secrets: Iterable[str | None] = ()) -> None:
        self._body = body
        self._lines = body.aiter_lines()
        self._events = _Events()
        self._secrets = tuple(secrets)
        self._complete = False
        self.reply = StreamedReply()

    async def next_piece(self) -> str | None:
        """The next non-empty text piece, or None once the stream is complete.

        Raises:
            ProviderTimeout: the client's read timeout passed.
            ProviderUnavailable: the connection broke, or the server sent an error event
                (other error events: see :func:`event_error`).
            ProviderError: an event is not JSON (code ``provider_error``).
        """
        while not self._complete:
            try:
                line = await anext(self._lines)
            except StopAsyncIteration:
                event = self._events.flush()
                self._complete = True
            except Exception as exc:  # the HTTP client's own errors, translated here
                raise transport_error(exc) from exc
            else:
                event = self._events.feed(line)
            if event is None:
                continue
            name, data = event
            if data.strip() == "[DONE]":
                self._complete = True
                break
            piece = self._take(name, data)
            if piece:
                return piece
        return None

    def _take(self, name: str | None, data: str) -> str:
        try:
            payload = json.loads(data)
        except ValueError as exc:
            raise ProviderError("the provider sent a stream event that is not JSON") from exc
        if not isinstance(payload, dict):
            raise ProviderError("the provider sent a stream event that is not a JSON object")
        if payload.get("error") is not None or name == "error":
            raise event_error(payload.get("error", payload), secrets=self._secrets)
        return self.reply.add(payload)

    async def close(self) -> None:
        """Finish reading: the rest of a complete body, briefly; then close the response
        and run the body's readers to their end. Shielded from cancellation."""
        with anyio.CancelScope(shield=True):
            if self._complete:
                with anyio.move_on_after(DRAIN_SECONDS), suppress(Exception):
                    async for _ in self._lines:
                        pass
            with suppress(Exception):
                await self._body.aclose()
            with suppress(Exception):  # reads on a closed response fail at once
                async for _ in self._lines:
                    pass
