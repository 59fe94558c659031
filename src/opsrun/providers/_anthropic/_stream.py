"""Reading a streamed Messages API reply off the HTTP response.

Events are read as JSON and told apart by their ``type`` string: text comes only from
``text_delta`` deltas, and event or delta types this code does not know (new ones are
added to the API over time) are skipped. Reading stops at ``message_stop``: what follows
is read briefly, then the response is closed, so a connection held open (or lost) after
the reply changes nothing. A server that does not stream answers with a whole JSON body
instead: a message is read as a stream of one delta, an error body raises its error.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...errors import ProviderError, ProviderUnavailable
from ...model import Usage
from ...ports import MainLlmDone
from .._sse import Body, EventReader, is_event_stream, json_of, looks_like_events
from ._errors import body_error, not_a_message, translate
from ._request import finish_reason, usage_of

__all__ = ["MessageReader"]


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _dict(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


@dataclass(slots=True)
class _Reply:
    """What the event stream said so far."""

    parts: list[str] = field(default_factory=list)
    stop_reason: str | None = None
    stopped: bool = False
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_creation: int | None = None
    cache_read: int | None = None

    def feed(self, event: Mapping[str, Any]) -> str | None:
        """Take one event in; the text it adds, if any."""
        kind = event.get("type")
        if kind == "content_block_delta":
            delta = _dict(event.get("delta"))
            text = delta.get("text")
            if delta.get("type") == "text_delta" and isinstance(text, str) and text:
                self.parts.append(text)
                return text
        elif kind == "message_start":
            message = _dict(event.get("message"))
            self._usage(_dict(message.get("usage")), output=False)
        elif kind == "message_delta":
            stop_reason = _dict(event.get("delta")).get("stop_reason")
            if isinstance(stop_reason, str):
                self.stop_reason = stop_reason
            self._usage(_dict(event.get("usage")), output=True)
        elif kind == "message_stop":
            self.stopped = True
        return None

    def whole(self, message: Mapping[str, Any]) -> str:
        """Take a whole message (the body of a call that was not streamed) in; its text."""
        blocks = message.get("content")
        for block in blocks if isinstance(blocks, list) else ():
            text = _dict(block).get("text")
            if _dict(block).get("type") == "text" and isinstance(text, str):
                self.parts.append(text)
        stop_reason = message.get("stop_reason")
        self.stop_reason = stop_reason if isinstance(stop_reason, str) else None
        self._usage(_dict(message.get("usage")), output=True)
        self.stopped = True
        return "".join(self.parts)

    def _usage(self, usage: Mapping[str, Any], *, output: bool) -> None:
        """Counts as the API reports them (each one kept until a later one replaces it);
        the output count of ``message_start`` is a placeholder, not read."""
        if output:
            self.output_tokens = _latest(usage.get("output_tokens"), self.output_tokens)
        self.input_tokens = _latest(usage.get("input_tokens"), self.input_tokens)
        self.cache_creation = _latest(usage.get("cache_creation_input_tokens"), self.cache_creation)
        self.cache_read = _latest(usage.get("cache_read_input_tokens"), self.cache_read)

    def usage(self) -> Usage | None:
        return usage_of(
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            cache_creation=self.cache_creation,
            cache_read=self.cache_read,
        )


def _latest(value: object, before: int | None) -> int | None:
    count = _count(value)
    return before if count is None else count


class MessageReader:
    """Reads a Messages API stream: call :meth:`next_piece` until it returns None, then
    :meth:`close` (always, also after an error or a cancellation), then :meth:`done`.

    ``secrets`` are masked in error messages.
    """

    def __init__(self, body: Body, secrets: Sequence[str] = ()) -> None:
        self._body = body
        self._events = EventReader(body) if is_event_stream(body) else None
        self._secrets = tuple(secrets)
        self._read_whole = False
        self._reply = _Reply()

    async def next_piece(self) -> str | None:
        """The next non-empty text piece, or None once the stream ended (at
        ``message_stop``, or where the body ended).

        Raises:
            ProviderTimeout: no next chunk within the client's timeout.
            ProviderUnavailable: the connection broke, or an error event (overloaded…).
            ProviderError: another error event, an event that is not JSON, or a body
                that is neither an event stream nor a message (``provider_error``).
        """
        if self._events is None:
            return await self._whole_body()
        while not self._reply.stopped:
            try:
                event = await self._events.next_event()
            except Exception as exc:  # the HTTP client's own errors, translated here
                raise translate(exc, secrets=self._secrets) from exc
            if event is None:
                unframed = self._events.unframed()
                payload = None if unframed is None else json_of(unframed)
                if payload is not None:  # a whole JSON body sent as an event stream
                    return self._whole(unframed or "", payload)
                return None
            payload = json_of(event.data)
            if not isinstance(payload, dict):
                raise ProviderError(
                    "the Anthropic API sent a stream event that is not a JSON object"
                )
            if event.name == "error" or payload.get("type") == "error":
                raise body_error(payload, headers=self._body.headers, secrets=self._secrets)
            text = self._reply.feed(payload)
            if text:
                return text
        return None

    async def _whole_body(self) -> str | None:
        if self._read_whole:
            return None
        self._read_whole = True
        try:
            data = await self._body.aread()
        except Exception as exc:
            raise translate(exc, secrets=self._secrets) from exc
        payload = json_of(data)
        if payload is None and looks_like_events(data):  # a stream under another label
            self._events, self._read_whole = EventReader(self._body), False
            return await self.next_piece()
        return self._whole(data.decode("utf-8", "replace"), payload)

    def _whole(self, text: str, payload: Any) -> str | None:
        """A whole body's JSON ``payload`` (``text`` when it is not JSON): a message's
        text, or the error it holds."""
        headers, secrets = self._body.headers, self._secrets
        if isinstance(payload, dict) and (
            payload.get("type") == "error" or payload.get("error") is not None
        ):
            raise body_error(payload, headers=headers, secrets=secrets, where="in an HTTP 200 body")
        if not isinstance(payload, dict) or not isinstance(payload.get("content"), list):
            body = text if payload is None else payload
            raise not_a_message(body, secrets=secrets, content_type=headers.get("content-type"))
        return self._reply.whole(payload) or None

    def done(self) -> MainLlmDone:
        """The stream's last item.

        Raises:
            ProviderUnavailable: the stream ended before ``message_stop``.
        """
        reply = self._reply
        if not reply.stopped:
            raise ProviderUnavailable("the Anthropic stream ended before message_stop")
        return MainLlmDone(
            text="".join(reply.parts),
            finish_reason=finish_reason(reply.stop_reason),
            raw_finish_reason=reply.stop_reason,
            usage=reply.usage(),
        )

    async def close(self) -> None:
        """Finish reading: the rest of a complete body, briefly; then close the response
        and run the body's readers to their end. Shielded from cancellation."""
        if self._events is not None:
            await self._events.close(drain=self._reply.stopped)
