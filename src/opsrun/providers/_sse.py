"""Server-sent events read off an HTTP response body, for both adapters.

The adapters read streamed replies themselves rather than through the SDKs' stream
objects: those leave their async generators (and the HTTP client's under them)
suspended for the garbage collector, which trio reports as a ``ResourceWarning``, and
they cannot stop at a reply's last event. Here every generator of the body is run to
its end: after the last event the rest of the body is read (briefly), and on an early
stop the response is closed first, so the remaining reads fail at once and finish them.

Lines end at CR, LF or CRLF only, as the SSE format says: the body is split as bytes,
so U+2028, U+2029 and U+0085, which JSON need not escape, stay inside their line.
"""

from __future__ import annotations

import json
import re
from collections import deque
from collections.abc import AsyncIterator, Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio

__all__ = [
    "DRAIN_SECONDS",
    "Body",
    "Event",
    "EventReader",
    "Lines",
    "is_event_stream",
    "json_of",
    "looks_like_events",
]

DRAIN_SECONDS = 0.1
"""How long the rest of a finished body may take to read (so the connection is reused)."""
UNFRAMED_LIMIT = 1 << 20
"""Characters of lines outside the SSE format kept while no event came."""
_FIELDS = frozenset({"data", "event", "id", "retry"})

_EOL = re.compile(rb"\r\n|\r|\n")


class Body(Protocol):
    """The part of an HTTP client's streamed response (``httpx``) the readers use."""

    @property
    def headers(self) -> Mapping[str, str]:
        """The response headers."""
        ...

    def aiter_bytes(self) -> AsyncIterator[bytes]:
        """The body, as it arrives."""
        ...

    async def aread(self) -> bytes:
        """The whole body."""
        ...

    async def aclose(self) -> None:
        """Close the response."""
        ...


def is_event_stream(body: Body) -> bool:
    """True unless the response says it is something else than ``text/event-stream``
    (a server that does not stream answers with a whole ``application/json`` body)."""
    media = body.headers.get("content-type", "").partition(";")[0].strip().lower()
    return media in ("", "text/event-stream")


def looks_like_events(data: bytes) -> bool:
    """True when a body that is not JSON reads as server-sent events (a server that
    streams under another content type)."""
    return data.lstrip().startswith((b"data:", b"event:", b":", b"id:", b"retry:"))


def json_of(data: bytes | str) -> Any:
    """The JSON value of ``data``, or None when it is not JSON."""
    try:
        return json.loads(data)
    except ValueError:  # also a UnicodeDecodeError
        return None


_BOM = b"\xef\xbb\xbf"
"""A UTF-8 byte-order mark, which the SSE format says to ignore at the start of a stream."""


class Lines:
    """Splits a byte stream into lines at CR, LF and CRLF (a CRLF split across two
    chunks included), decoding each line as UTF-8; a byte-order mark that opens the
    stream is dropped."""

    __slots__ = ("_after_cr", "_begun", "_rest")

    def __init__(self) -> None:
        self._rest = b""
        self._after_cr = False
        self._begun = False

    def feed(self, chunk: bytes) -> list[str]:
        """The lines ``chunk`` completes."""
        if not chunk:
            return []
        if self._after_cr and chunk.startswith(b"\n"):
            chunk = chunk[1:]  # the LF of a CRLF whose CR ended the last chunk
        data = self._rest + chunk
        if not self._begun:
            if len(data) < len(_BOM) and _BOM.startswith(data):
                self._rest = data  # maybe the start of a byte-order mark: wait for more
                return []
            self._begun = True
            data = data.removeprefix(_BOM)
        parts = data.split(b"\n") if b"\r" not in data else _EOL.split(data)
        self._rest = parts.pop()
        self._after_cr = data.endswith(b"\r")
        return [part.decode("utf-8", "replace") for part in parts]

    def flush(self) -> list[str]:
        """The unterminated last line, if any (at the end of the body)."""
        rest, self._rest = self._rest, b""
        return [rest.decode("utf-8", "replace")] if rest else []


@dataclass(frozen=True, slots=True)
class Event:
    """One server-sent event: its ``event:`` name (None when unnamed) and its data."""

    name: str | None
    data: str


@dataclass(slots=True)
class _Fields:
    """Events from lines: ``data:`` fields joined until a blank line."""

    data: list[str] = field(default_factory=list)
    name: str | None = None

    def feed(self, line: str) -> Event | None:
        """Take one line; the event it completes, if any."""
        if not line:
            return self.flush()
        if line.startswith(":"):
            return None  # a comment (keep-alive)
        key, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if key == "data":
            self.data.append(value)
        elif key == "event":
            self.name = value or None
        return None

    def flush(self) -> Event | None:
        """The event in progress, if any (at a blank line or the end of the body)."""
        if not self.data:
            self.name = None
            return None
        event = Event(self.name, "\n".join(self.data))
        self.data, self.name = [], None
        return event


class EventReader:
    """Reads the events of a response body: :meth:`next_event` until it returns None,
    then :meth:`close` (always, also after an error or a cancellation)."""

    def __init__(self, body: Body) -> None:
        self._body = body
        self._chunks = body.aiter_bytes()
        self._lines = Lines()
        self._fields = _Fields()
        self._events: deque[Event] = deque()
        self._ended = False
        self._unframed: list[str] | None = []
        """Lines outside the SSE format while no event came (a whole JSON body sent as
        an event stream); None once an event came or they passed :data:`UNFRAMED_LIMIT`."""
        self._unframed_size = 0

    def unframed(self) -> str | None:
        """At the end of a body that held no event: its lines outside the SSE format
        (say, a whole JSON body under the event-stream label), else None."""
        if not self._ended or not self._unframed:
            return None
        return "\n".join(self._unframed)

    def _keep_unframed(self, line: str) -> None:
        if not line or line.startswith(":") or line.partition(":")[0] in _FIELDS:
            return
        assert self._unframed is not None
        self._unframed_size += len(line)
        if self._unframed_size > UNFRAMED_LIMIT:
            self._unframed = None
        else:
            self._unframed.append(line)

    async def next_event(self) -> Event | None:
        """The next event, or None at the end of the body.

        Raises:
            Exception: what the HTTP client raised while reading (for the caller to
                translate).
        """
        while not self._events:
            if self._ended:
                return None
            try:
                chunk = await anext(self._chunks)
            except StopAsyncIteration:
                self._ended = True
                lines = [*self._lines.flush(), ""]  # the end of the body ends an event
            else:
                lines = self._lines.feed(chunk)
            for line in lines:
                if self._unframed is not None:
                    self._keep_unframed(line)
                event = self._fields.feed(line)
                if event is not None:
                    self._events.append(event)
                    self._unframed = None
        return self._events.popleft()

    async def close(self, *, drain: bool) -> None:
        """Finish reading: with ``drain`` (the reply is complete) the rest of the body,
        briefly; then close the response and run the body's readers to their end.
        Shielded from cancellation."""
        with anyio.CancelScope(shield=True):
            if drain and not self._ended:
                with anyio.move_on_after(DRAIN_SECONDS), suppress(Exception):
                    async for _ in self._chunks:
                        pass
            with suppress(Exception):
                await self._body.aclose()
            with suppress(Exception):  # reads on a closed response fail at once
                async for _ in self._chunks:
                    pass
