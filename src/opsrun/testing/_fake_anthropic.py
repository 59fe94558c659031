"""A local HTTP server that speaks the Anthropic Messages API, for tests without a network.

``FakeAnthropicServer`` answers ``POST /v1/messages`` on 127.0.0.1 from a queue of
scripted replies, in the API's wire format: a JSON message, or the server-sent event
stream (``message_start``, ``content_block_start``, ``content_block_delta``,
``content_block_stop``, ``message_delta``, ``message_stop``) when the request asks for
``stream``. It can also answer with an API error, send an ``error`` event in the middle
of a stream, or drop the connection mid-stream; it records every request and notices
when a client closes a stream early.
"""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, Literal

from ._fake_http import FakeHandler, LocalFake, drop

__all__ = ["FakeAnthropicServer"]

HOLD_LIMIT = 30.0
"""Seconds a body held open after ``message_stop`` waits for the client to hang up."""

_ERROR_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}


def _estimate(text: str) -> int:
    return (len(text) + 3) // 4


def _request_text(body: Mapping[str, Any]) -> str:
    """Every text of the request (system and messages), for estimated usage."""
    texts: list[str] = []
    system = body.get("system")
    if isinstance(system, str):
        texts.append(system)
    elif isinstance(system, list):
        texts.extend(str(b.get("text", "")) for b in system if isinstance(b, dict))
    for message in body.get("messages") or ():
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            texts.extend(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return "".join(texts)


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """One request the fake server received."""

    method: str
    """``POST``, ``GET``…"""
    path: str
    """The request path (``/v1/messages``)."""
    headers: Mapping[str, str]
    """The request headers, names lower-cased."""
    body: Any
    """The JSON body, parsed (None when there was none or it did not parse)."""
    closed_early: threading.Event = field(default_factory=threading.Event, compare=False)
    """Set when the client closed the connection before the streamed reply ended."""

    @property
    def stream(self) -> bool:
        """True when the request asked for a streamed reply."""
        return isinstance(self.body, dict) and bool(self.body.get("stream"))


class FakeAnthropicServer(LocalFake[RecordedRequest]):
    """A real HTTP server on 127.0.0.1 that answers like the Anthropic Messages API.

    Use it as a context manager and point a client at :attr:`base_url`. Each
    ``POST /v1/messages`` takes the next scripted reply: a string (a text reply), a
    :class:`FakeAnthropicServer.Reply` or a :class:`FakeAnthropicServer.Error`. When
    the queue is empty it answers ``default``, or with a 400 ``invalid_request_error``
    when ``default`` is None, so a test notices an unexpected call. With ``api_key``
    set, a request whose ``x-api-key`` or ``Authorization: Bearer`` header does not
    carry that key gets a 401 ``authentication_error`` (it still counts as a request
    but takes no reply from the queue).

    Usage defaults to an estimate (characters / 4 of the request's texts in, of the
    reply out). When the request forces a tool (``tool_choice`` of type ``tool``) and
    the scripted text is a JSON object, the reply is a call of that tool with the
    object as its input, so one script serves text and tool-based JSON output alike.

    A :class:`Reply` can also wait before answering (``delay``), stream slowly
    (``chunk_delay``), drop the connection mid-stream (``cut_after``), end the stream
    with an ``error`` event (``stream_error``), leave usage out (``send_usage``), add
    events of its own (``extra_events``), drop or hold the connection after
    ``message_stop`` (``after_stop``), or answer a streamed call with JSON
    (``as_json``). ``ensure_ascii=False`` sends JSON as raw UTF-8. Every request is
    kept in ``requests`` (method, path, lower-cased headers, parsed body);
    :meth:`wait_closed_early` tells whether a client closed a stream before its end.

    Example::

        with FakeAnthropicServer(["Hello!"]) as server:
            server.push(FakeAnthropicServer.Error(429, headers={"retry-after": "2"}))
            provider = AnthropicProvider("claude-test", base_url=server.base_url, api_key="k")
            ...
            assert server.requests[0].body["messages"][0]["role"] == "user"

    Raises:
        OSError: from :meth:`start` (or entering the context) when no local port could be bound.
    """

    @dataclass(frozen=True, slots=True, kw_only=True)
    class Reply:
        """A scripted successful reply."""

        text: str = ""
        """The reply text (or, with ``tool_input``, ignored)."""
        stop_reason: str | None = None
        """``end_turn`` unless given (``tool_use`` for a tool call)."""
        stop_sequence: str | None = None
        """The stop sequence that ended the reply, for ``stop_reason="stop_sequence"``."""
        tool_input: Any = None
        """Answer with a call of the forced tool (or a tool named ``tool``) with this input."""
        input_tokens: int | None = None
        """Reported input tokens (default: an estimate from the request)."""
        output_tokens: int | None = None
        """Reported output tokens (default: an estimate from the reply)."""
        cache_read_input_tokens: int | None = None
        """Reported cache reads, when given."""
        model: str | None = None
        """The model named in the reply (default: the request's model)."""
        chunk_size: int = 16
        """Characters per ``text_delta`` when streaming."""
        delay: float = 0.0
        """Seconds before the response starts (to make a client time out)."""
        chunk_delay: float = 0.0
        """Seconds before each streamed event after the first."""
        cut_after: int | None = None
        """Streaming: drop the connection after this many deltas, mid-body."""
        cut_cleanly: bool = False
        """With ``cut_after``: end the body properly there instead (the events just stop,
        before ``message_stop``)."""
        stream_error: FakeAnthropicServer.Error | None = None
        """Streaming: send this as an ``error`` event after ``cut_after`` deltas (or all)
        and end the stream there."""
        send_usage: bool = True
        """False: the reply carries no ``usage`` at all (not in the message, nor in
        ``message_start`` or ``message_delta``), as some gateways answer."""
        extra_events: Sequence[tuple[str, Mapping[str, Any]]] = ()
        """Streaming: more ``(event name, data)`` events, sent after the content block
        and before ``message_delta`` (an event type the adapter does not know…)."""
        after_stop: Literal["end", "drop", "hold"] = "end"
        """Streaming, after ``message_stop``: ``end`` the body; ``drop`` the connection
        without ending the body; or ``hold`` the body open, sending nothing, until the
        client closes the connection (:data:`HOLD_LIMIT` seconds at most)."""
        as_json: bool = False
        """Answer a streamed request with the whole JSON message, as a server that does
        not stream does."""
        headers: Mapping[str, str] = field(default_factory=dict)
        """Extra response headers."""

    @dataclass(frozen=True, slots=True)
    class Error:
        """A scripted API error: the status, the Anthropic error body and headers.

        ``type`` defaults from the status (429 ``rate_limit_error``, 529
        ``overloaded_error``, 401 ``authentication_error``…).
        """

        status: int
        """The HTTP status."""
        message: str = "scripted error"
        """``error.message`` of the body."""
        _: KW_ONLY
        type: str | None = None
        """``error.type`` of the body (default from the status)."""
        headers: Mapping[str, str] = field(default_factory=dict)
        """Extra response headers (``retry-after``…)."""
        error_code: str | None = None
        """``error.details.error_code`` of the body, when given."""
        raw_body: str | None = None
        """A body sent as it is, instead of the JSON error (an HTML page from a proxy,
        say; give its ``content-type`` in ``headers``). A status of 200 with the JSON
        error makes a body with an error that is not an HTTP error, as some gateways
        send."""

        def body(self, request_id: str) -> dict[str, Any]:
            """The error body the API sends."""
            error_type = self.type or _ERROR_TYPES.get(
                self.status, "api_error" if self.status >= 500 else "invalid_request_error"
            )
            error: dict[str, Any] = {"type": error_type, "message": self.message}
            if self.error_code is not None:
                error["details"] = {"error_code": self.error_code}
            return {"type": "error", "error": error, "request_id": request_id}

    def __init__(
        self,
        replies: Iterable[str | Reply | Error] = (),
        *,
        default: str | Reply | None = "OK",
        api_key: str | None = None,
        ensure_ascii: bool = True,
    ) -> None:
        super().__init__()
        self.replies: deque[str | FakeAnthropicServer.Reply | FakeAnthropicServer.Error] = deque(
            replies
        )
        self.default = default
        self.api_key = api_key
        self.ensure_ascii = ensure_ascii
        """False: JSON is sent as raw UTF-8 (U+2028 and all) rather than escaped."""
        self._count = 0

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>``: the client's ``base_url``.

        Raises:
            RuntimeError: the server is not started.
        """
        return self._root()

    # -- script and records ----------------------------------------------------------------

    def push(self, *replies: str | Reply | Error) -> None:
        """Queue more replies."""
        with self._lock:
            self.replies.extend(replies)

    # -- serving (handler threads) ---------------------------------------------------------

    def _next(
        self, recorded: RecordedRequest
    ) -> tuple[int, FakeAnthropicServer.Error | FakeAnthropicServer.Reply]:
        with self._lock:
            self.requests.append(recorded)
            self._count += 1
            number = self._count
            if self.api_key is not None and not _authorized(recorded.headers, self.api_key):
                return number, FakeAnthropicServer.Error(401, "invalid x-api-key")
            if self.replies:
                item: Any = self.replies.popleft()
            elif self.default is not None:
                item = self.default
            else:
                return number, FakeAnthropicServer.Error(
                    400, "FakeAnthropicServer: no scripted reply left"
                )
        if isinstance(item, str):
            return number, FakeAnthropicServer.Reply(text=item)
        return number, item


def _authorized(headers: Mapping[str, str], key: str) -> bool:
    return headers.get("x-api-key") == key or headers.get("authorization") == f"Bearer {key}"


def _peer_closed(conn: socket.socket) -> bool:
    """True when the client has closed its end (readable with nothing to read)."""
    try:
        readable, _, _ = select.select([conn], [], [], 0)
        return bool(readable) and conn.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


# -- wire format ---------------------------------------------------------------------------


def _tool_name(body: Mapping[str, Any]) -> str | None:
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") == "tool":
        name = choice.get("name")
        return name if isinstance(name, str) else None
    return None


def _content(reply: FakeAnthropicServer.Reply, body: Mapping[str, Any]) -> tuple[str, Any]:
    """``("text", text)`` or ``("tool", input)``: what the reply's content block is."""
    if reply.tool_input is not None:
        return "tool", reply.tool_input
    if _tool_name(body) is not None:
        try:
            value = json.loads(reply.text)
        except ValueError:
            value = None
        if isinstance(value, dict):
            return "tool", value
    return "text", reply.text


def _usage(reply: FakeAnthropicServer.Reply, body: Mapping[str, Any], out: str) -> dict[str, Any]:
    usage: dict[str, Any] = {
        "input_tokens": (
            reply.input_tokens if reply.input_tokens is not None else _estimate(_request_text(body))
        ),
        "output_tokens": reply.output_tokens if reply.output_tokens is not None else _estimate(out),
    }
    if reply.cache_read_input_tokens is not None:
        usage["cache_read_input_tokens"] = reply.cache_read_input_tokens
    return usage


def _message(
    reply: FakeAnthropicServer.Reply, body: Mapping[str, Any], number: int
) -> dict[str, Any]:
    kind, value = _content(reply, body)
    if kind == "tool":
        out = json.dumps(value)
        block: dict[str, Any] = {
            "type": "tool_use",
            "id": f"toolu_fake_{number}",
            "name": _tool_name(body) or "tool",
            "input": value,
        }
        stop = reply.stop_reason or "tool_use"
    else:
        out = value
        block = {"type": "text", "text": value}
        stop = reply.stop_reason or "end_turn"
    message = {
        "id": f"msg_fake_{number}",
        "type": "message",
        "role": "assistant",
        "model": reply.model or str(body.get("model", "claude-fake")),
        "content": [block],
        "stop_reason": stop,
        "stop_sequence": reply.stop_sequence,
        "usage": _usage(reply, body, out),
    }
    if not reply.send_usage:
        del message["usage"]
    return message


def _events(
    reply: FakeAnthropicServer.Reply, body: Mapping[str, Any], number: int
) -> Iterator[tuple[str, dict[str, Any]] | None]:
    """The event stream of a reply; None marks where the connection is dropped."""
    message = _message(reply, body, number)
    block = message["content"][0]
    usage = message.get("usage")
    start = {**message, "content": [], "stop_reason": None, "stop_sequence": None}
    if usage is not None:
        start["usage"] = {**usage, "output_tokens": 1}
    yield "message_start", {"type": "message_start", "message": start}
    if block["type"] == "tool_use":
        text = json.dumps(block["input"])
        first = {**block, "input": {}}
        delta_type, key = "input_json_delta", "partial_json"
    else:
        text = block["text"]
        first = {"type": "text", "text": ""}
        delta_type, key = "text_delta", "text"
    yield "content_block_start", {"type": "content_block_start", "index": 0, "content_block": first}
    size = max(1, reply.chunk_size)
    chunks = [text[i : i + size] for i in range(0, len(text), size)]
    for chunk in chunks if reply.cut_after is None else chunks[: reply.cut_after]:
        delta: dict[str, Any] = {"type": delta_type, key: chunk}
        yield "content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}
    if reply.stream_error is not None:
        yield "error", reply.stream_error.body(f"req_fake_{number}")
        return
    if reply.cut_after is not None:
        if not reply.cut_cleanly:
            yield None
        return
    yield "content_block_stop", {"type": "content_block_stop", "index": 0}
    for name, data in reply.extra_events:
        yield name, dict(data)
    delta = {"stop_reason": message["stop_reason"], "stop_sequence": reply.stop_sequence}
    message_delta: dict[str, Any] = {"type": "message_delta", "delta": delta}
    if usage is not None:
        message_delta["usage"] = {"output_tokens": usage["output_tokens"]}
    yield "message_delta", message_delta
    yield "message_stop", {"type": "message_stop"}


class _Handler(FakeHandler):
    @property
    def fake(self) -> FakeAnthropicServer:
        fake: FakeAnthropicServer = self.server.fake  # type: ignore[assignment]
        return fake

    def do_GET(self) -> None:
        self._record(None)
        self._send_error(FakeAnthropicServer.Error(404, "Not found"), 0)

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = None
        if self.path.split("?")[0] != "/v1/messages":
            self._record(body)
            self._send_error(FakeAnthropicServer.Error(404, "Not found"), 0)
            return
        recorded = self._recorded(body)
        number, item = self.fake._next(recorded)
        if isinstance(item, FakeAnthropicServer.Error):
            self._send_error(item, number)
        elif not isinstance(body, dict):
            self._send_error(FakeAnthropicServer.Error(400, "the body is not JSON"), number)
        elif not self.fake._sleep(item.delay):
            self.close_connection = True
        elif recorded.stream and not item.as_json:
            self._send_stream(item, body, number, recorded)
        else:
            self._send_json(200, _message(item, body, number), number, item.headers)

    def _recorded(self, body: Any) -> RecordedRequest:
        headers = {name.lower(): value for name, value in self.headers.items()}
        return RecordedRequest(method=self.command, path=self.path, headers=headers, body=body)

    def _record(self, body: Any) -> None:
        with self.fake._lock:
            self.fake.requests.append(self._recorded(body))

    def _send_json(
        self, status: int, payload: Any, number: int, headers: Mapping[str, str]
    ) -> None:
        if isinstance(payload, str):
            data = payload.encode("utf-8")
        else:
            data = json.dumps(payload, ensure_ascii=self.fake.ensure_ascii).encode("utf-8")
        self.send_response(status)
        if not any(name.lower() == "content-type" for name in headers):
            self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.send_header("request-id", f"req_fake_{number}")
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _send_error(self, error: FakeAnthropicServer.Error, number: int) -> None:
        payload = error.raw_body if error.raw_body is not None else error.body(f"req_fake_{number}")
        self._send_json(error.status, payload, number, error.headers)

    def _send_stream(
        self,
        reply: FakeAnthropicServer.Reply,
        body: Mapping[str, Any],
        number: int,
        recorded: RecordedRequest,
    ) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.send_header("request-id", f"req_fake_{number}")
        for name, value in reply.headers.items():
            self.send_header(name, value)
        self.end_headers()
        for index, event in enumerate(_events(reply, body, number)):
            if index and not self.fake._sleep(reply.chunk_delay):
                self.close_connection = True
                return
            if _peer_closed(self.connection):
                recorded.closed_early.set()
                self.close_connection = True
                return
            if event is None:  # the scripted cut: no terminating chunk, the socket just closes
                self.wfile.flush()
                drop(self.connection)
                self.close_connection = True
                return
            name, data = event
            text = json.dumps(data, ensure_ascii=self.fake.ensure_ascii)
            if not self._chunk(f"event: {name}\ndata: {text}\n\n".encode()):
                recorded.closed_early.set()
                return
        stopped = reply.cut_after is None and reply.stream_error is None
        if stopped and reply.after_stop == "drop":
            self.wfile.flush()
            drop(self.connection)
            self.close_connection = True
        elif stopped and reply.after_stop == "hold":
            self._hold(recorded)
        else:
            self._chunk(b"")

    def _hold(self, recorded: RecordedRequest) -> None:
        """Keep the body open, sending nothing, until the client closes the connection."""
        self.close_connection = True
        deadline = time.monotonic() + HOLD_LIMIT
        while time.monotonic() < deadline and self.fake._sleep(0.01):
            if _peer_closed(self.connection):
                recorded.closed_early.set()
                return
        self._chunk(b"")

    def _chunk(self, payload: bytes) -> bool:
        """Write one chunk (an empty one ends the body); False when the client is gone."""
        try:
            self.wfile.write(f"{len(payload):x}\r\n".encode() + payload + b"\r\n")
            self.wfile.flush()
        except OSError:
            self.close_connection = True
            return False
        return True


FakeAnthropicServer.handler = _Handler
