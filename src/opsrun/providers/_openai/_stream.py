"""Reading a streamed Chat Completions reply off the HTTP response.

An event stream is read event by event (see :mod:`.._sse`) up to ``data: [DONE]``; a
connection lost once the finish reason arrived loses nothing. A server that does not
stream answers with a whole JSON body instead: a completion is read as a stream of one
chunk, an error object raises its error.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ...errors import ProviderError, ProviderTimeout, ProviderUnavailable
from ...model import Usage
from ...ports import MainLlmDone
from .._sse import Body, Event, EventReader, is_event_stream, json_of, looks_like_events
from ._errors import event_error, not_a_completion
from ._reply import REFUSAL, finish_reason, usage_of

__all__ = ["ChunkReader", "StreamedReply", "transport_error"]


def transport_error(exc: Exception) -> ProviderError:
    """The provider error of an HTTP client failure while the body was read."""
    names = {cls.__name__ for cls in type(exc).__mro__}
    if "TimeoutException" in names or isinstance(exc, TimeoutError):
        return ProviderTimeout("the provider stopped sending within the client's timeout")
    return ProviderUnavailable(
        f"the connection to the provider broke during the stream ({type(exc).__name__})"
    )


@dataclass(slots=True)
class StreamedReply:
    """Collects a streamed completion, chunk by chunk."""

    parts: list[str] = field(default_factory=list)
    raw_finish: str | None = None
    finished: bool = False
    """The reply is whole: a finish reason arrived (or a whole completion was read)."""
    refused: bool = False
    usage: Usage | None = None

    def add(self, chunk: dict[str, Any]) -> str:
        """Take one chunk (or a whole completion: its ``message`` is read as a
        ``delta``) in; return the text it adds (may be empty)."""
        if chunk.get("usage") is not None:
            self.usage = usage_of(chunk["usage"])
        piece = ""
        choices = chunk.get("choices")
        for choice in choices if isinstance(choices, list) else ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta", choice.get("message"))
            delta = delta if isinstance(delta, dict) else {}
            content, refusal = delta.get("content"), delta.get("refusal")
            if isinstance(content, str):
                piece += content
            if isinstance(refusal, str) and refusal:
                self.refused = True
                piece += refusal
            if isinstance(choice.get("finish_reason"), str):
                self.raw_finish, self.finished = choice["finish_reason"], True
        if piece:
            self.parts.append(piece)
        return piece

    def done(self) -> MainLlmDone:
        """The stream's last item.

        Raises:
            ProviderUnavailable: the stream ended without a finish reason: the
                connection closed before the reply was complete.
        """
        if not self.finished:
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
        self._events = EventReader(body) if is_event_stream(body) else None
        self._secrets = tuple(secrets)
        self._complete = False
        self.reply = StreamedReply()

    async def next_piece(self) -> str | None:
        """The next non-empty text piece, or None once the stream is complete.

        Raises:
            ProviderTimeout: the client's read timeout passed.
            ProviderUnavailable: the connection broke, or the server sent an error event
                (other error events: see :func:`event_error`).
            ProviderError: an event is not JSON, or a body that is not an event stream
                holds no completion (code ``provider_error``).
        """
        if self._events is None:
            return await self._whole_body()
        while not self._complete:
            try:
                event = await self._events.next_event()
            except Exception as exc:  # the HTTP client's own errors, translated here
                if not self.reply.finished:
                    raise transport_error(exc) from exc
                event = None  # the reply was whole: losing the connection now loses nothing
            if event is None or event.data.strip() == "[DONE]":
                self._complete = True
                unframed = self._events.unframed() if event is None else None
                payload = None if unframed is None else json_of(unframed)
                if payload is not None:  # a whole JSON body sent as an event stream
                    return self._whole(unframed or "", payload)
                break
            piece = self._take(event)
            if piece:
                return piece
        return None

    def _take(self, event: Event) -> str:
        try:
            payload = json.loads(event.data)
        except ValueError as exc:
            raise ProviderError("the provider sent a stream event that is not JSON") from exc
        if not isinstance(payload, dict):
            raise ProviderError("the provider sent a stream event that is not a JSON object")
        if payload.get("error") is not None or event.name == "error":
            if self.reply.finished:  # after the finish reason: the reply is whole already
                self._complete = True
                return ""
            raise event_error(payload.get("error", payload), secrets=self._secrets)
        return self.reply.add(payload)

    async def _whole_body(self) -> str | None:
        """A body that is not an event stream: a whole completion, or an error."""
        if self._complete:
            return None
        self._complete = True
        try:
            data = await self._body.aread()
        except Exception as exc:
            raise transport_error(exc) from exc
        payload = json_of(data)
        if payload is None and looks_like_events(data):  # a stream under another label
            self._events, self._complete = EventReader(self._body), False
            return await self.next_piece()
        return self._whole(data.decode("utf-8", "replace"), payload)

    def _whole(self, text: str, payload: Any) -> str | None:
        """A whole body's JSON ``payload`` (``text`` when it is not JSON): a completion's
        text, or the error it holds."""
        if isinstance(payload, dict) and payload.get("error") is not None:
            raise event_error(payload["error"], secrets=self._secrets, status=200)
        choices = payload.get("choices") if isinstance(payload, dict) else None
        if not isinstance(payload, dict) or not isinstance(choices, list) or not choices:
            raise not_a_completion(
                text if payload is None else payload,
                secrets=self._secrets,
                content_type=self._body.headers.get("content-type"),
            )
        piece = self.reply.add(payload)
        self.reply.finished = True  # a whole completion, with or without a finish reason
        return piece or None

    async def close(self) -> None:
        """Finish reading: the rest of a complete body, briefly; then close the response
        and run the body's readers to their end. Shielded from cancellation."""
        if self._events is not None:
            await self._events.close(drain=self._complete)
