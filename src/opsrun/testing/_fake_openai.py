"""A local HTTP server that speaks OpenAI's Chat Completions wire format, for tests.

It answers ``POST /v1/chat/completions`` from a queue of scripted replies: a JSON body
for ordinary requests, a server-sent event stream (``data: {...}`` chunks, then
``data: [DONE]``) for ``"stream": true``. Replies can also be errors with any status,
headers and OpenAI error body, slow, cut off mid-stream or stalled until the client
hangs up; every request is recorded. Only the standard library serves it, so any HTTP
client can talk to it, the ``openai`` SDK included.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, Literal, TypeAlias

from ._fake_http import FakeHandler, LocalFake, drop

__all__ = ["FakeOpenAIServer"]

STALL_LIMIT = 30.0
"""Seconds a stalled stream waits for the client to hang up before the server cuts it."""

_ERROR_TYPES: dict[int, str] = {
    401: "invalid_request_error",
    403: "invalid_request_error",
    404: "invalid_request_error",
    429: "rate_limit_exceeded",
}


def _estimate(text: str) -> int:
    return (len(text) + 3) // 4


class FakeOpenAIServer(LocalFake["FakeOpenAIServer.Request"]):
    """A real HTTP server on 127.0.0.1 that answers like OpenAI's Chat Completions API.

    Use it as a context manager and point any OpenAI-compatible client at
    :attr:`base_url` (it ends in ``/v1``). Each ``POST /v1/chat/completions`` takes the
    next scripted reply: a string (a text reply), a :class:`FakeOpenAIServer.Reply` or a
    :class:`FakeOpenAIServer.Error`. When the queue is empty it answers ``default`` (a
    reply, an error, or a function of the :class:`FakeOpenAIServer.Request` that
    returns one), or a 400 error when ``default`` is None, so a test notices an
    unexpected call. With ``api_key`` set, a request whose ``Authorization: Bearer``
    header carries another key gets a 401 ``invalid_api_key`` whose message repeats the
    key it got, as a careless provider might (it counts as a request but takes no
    reply from the queue), so tests can check that adapters mask it.

    Usage defaults to an estimate (characters / 4, rounded up, of each message and of
    the reply, as ``ScriptedProvider`` counts); a stream reports it in a last chunk
    only when the request set ``stream_options.include_usage``, as OpenAI does. With
    ``ensure_ascii=False`` JSON goes out as raw UTF-8 (U+2028 and all), as vLLM,
    llama.cpp and many other servers send it.

    Example::

        with FakeOpenAIServer(["Hello!"]) as server:
            server.push(FakeOpenAIServer.Error(429, headers={"Retry-After": "2"}))
            model = OpenAIProvider("gpt-4o-mini", base_url=server.base_url, api_key="k")
            ...
            assert server.requests[0].body["model"] == "gpt-4o-mini"

    Raises:
        OSError: from :meth:`start` when no local port could be bound.
    """

    @dataclass(frozen=True, slots=True, kw_only=True)
    class Reply:
        """A scripted completion, sent as JSON or streamed, as the request asks.

        A stream sends a chunk with the assistant role, the text in pieces of
        ``chunk_size`` characters, a chunk with the finish reason, the usage chunk when
        asked for, then ``data: [DONE]``.
        """

        text: str = ""
        """The reply text (``message.content``)."""
        finish_reason: str | None = "stop"
        """The finish reason sent, any string (compatible servers send their own)."""
        refusal: str | None = None
        """A refusal (``message.refusal``), sent instead of the text."""
        input_tokens: int | None = None
        """Reported ``prompt_tokens`` (default: an estimate from the request)."""
        output_tokens: int | None = None
        """Reported ``completion_tokens`` (default: an estimate from the reply)."""
        send_usage: bool = True
        """False: the reply carries no ``usage`` at all."""
        model: str | None = None
        """The model named in the reply (default: the request's model)."""
        chunk_size: int = 16
        """Characters per streamed text chunk."""
        delay: float = 0.0
        """Seconds before the response starts (to make a client time out)."""
        cut_after: int | None = None
        """Drop the connection after this many text chunks, mid-body (0: right after the
        role chunk). A non-streamed request is dropped before any response."""
        cut_cleanly: bool = False
        """With ``cut_after``: end the body properly there instead (the events just stop,
        with no finish reason and no ``[DONE]``)."""
        stall_after: int | None = None
        """After this many text chunks, send only keep-alive comments until the client
        closes the connection (or :data:`STALL_LIMIT` seconds pass)."""
        stream_error: FakeOpenAIServer.Error | None = None
        """Send this error as a ``data:`` event after the text chunks, in place of the
        finish, and end the stream there."""
        after_finish: Literal["end", "drop"] = "end"
        """``drop``: right after the chunk with the finish reason, drop the connection
        (no usage chunk, no ``[DONE]``, no end of the body), as a proxy closing early."""
        as_json: bool = False
        """Answer a streamed request with the whole JSON completion, as a server that
        does not stream does."""
        headers: Mapping[str, str] = field(default_factory=dict)
        """Extra response headers."""

    @dataclass(frozen=True, slots=True)
    class Error:
        """A scripted API error: the status, headers and an OpenAI error body
        ``{"error": {"message", "type", "param", "code"}}``.

        ``type`` defaults from the status (``rate_limit_exceeded`` for 429,
        ``server_error`` for 5xx, else ``invalid_request_error``). ``raw_body`` replaces
        the JSON body (an HTML page from a proxy, say; give its ``Content-Type`` in
        ``headers``). A status of 200 makes a body with an error that is not an HTTP error,
        as some gateways send.
        """

        status: int
        """The HTTP status."""
        message: str = "scripted error"
        """``error.message``."""
        _: KW_ONLY
        type: str | None = None
        """``error.type``."""
        code: str | None = None
        """``error.code`` (``context_length_exceeded``, ``invalid_json_schema``…)."""
        param: str | None = None
        """``error.param`` (``response_format``, ``messages``…)."""
        headers: Mapping[str, str] = field(default_factory=dict)
        """Extra response headers (``Retry-After``, ``retry-after-ms``…)."""
        raw_body: str | None = None
        """A body sent as it is, instead of the JSON error."""

        def error(self) -> dict[str, Any]:
            """The ``error`` object of the body."""
            kind = self.type or _ERROR_TYPES.get(
                self.status, "server_error" if self.status >= 500 else "invalid_request_error"
            )
            return {"message": self.message, "type": kind, "param": self.param, "code": self.code}

    @dataclass(frozen=True, slots=True)
    class Request:
        """One request the server received, as sent (headers included)."""

        method: str
        """``POST``, ``GET``…"""
        path: str
        """The request path (``/v1/chat/completions``)."""
        headers: Mapping[str, str]
        """Request headers, names lower-cased."""
        body: Any
        """The parsed JSON body (None when there was none or it did not parse)."""
        closed_early: threading.Event = field(default_factory=threading.Event, compare=False)
        """Set when the client closed the connection before the streamed reply ended."""

        @property
        def stream(self) -> bool:
            """True when the request asked for a streamed reply."""
            return isinstance(self.body, dict) and self.body.get("stream") is True

        @property
        def messages(self) -> list[dict[str, Any]]:
            """The request's ``messages`` (empty when it has none)."""
            messages = self.body.get("messages") if isinstance(self.body, dict) else None
            return (
                [m for m in messages if isinstance(m, dict)] if isinstance(messages, list) else []
            )

    def __init__(
        self,
        replies: Iterable[str | Reply | Error] = (),
        *,
        default: str | Reply | Error | Responder | None = "OK",
        api_key: str | None = None,
        ensure_ascii: bool = True,
    ) -> None:
        super().__init__()
        self.replies: deque[str | FakeOpenAIServer.Reply | FakeOpenAIServer.Error] = deque(replies)
        self.default = default
        self.api_key = api_key
        self.ensure_ascii = ensure_ascii
        """False: JSON is sent as raw UTF-8 (``é``, U+2028…), as many compatible servers
        send it, rather than with ``\\u`` escapes."""

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>/v1``: an OpenAI client's ``base_url``.

        Raises:
            RuntimeError: the server is not started.
        """
        return f"{self._root()}/v1"

    # -- script and records ----------------------------------------------------------------

    def push(self, *replies: str | Reply | Error) -> None:
        """Queue more replies."""
        with self._lock:
            self.replies.extend(replies)

    # -- serving (handler threads) ---------------------------------------------------------

    def _next(self, recorded: Request) -> tuple[int, Reply | Error]:
        with self._lock:
            self.requests.append(recorded)
            number = len(self.requests)
            given = recorded.headers.get("authorization", "")
            if self.api_key is not None and given != f"Bearer {self.api_key}":
                shown = given.removeprefix("Bearer ") or "(none)"
                message = f"Incorrect API key provided: {shown}."
                return number, FakeOpenAIServer.Error(401, message, code="invalid_api_key")
            item: Any = self.replies.popleft() if self.replies else self.default
        if item is None:
            return number, FakeOpenAIServer.Error(
                400, "FakeOpenAIServer: no scripted reply left", type="fake_server_error"
            )
        if callable(item):
            try:
                item = item(recorded)
            except Exception as exc:  # the responder's bug becomes a visible 500
                return number, FakeOpenAIServer.Error(500, f"responder failed: {exc!r}")
        if isinstance(item, str):
            return number, FakeOpenAIServer.Reply(text=item)
        if not isinstance(item, FakeOpenAIServer.Reply | FakeOpenAIServer.Error):
            message = f"a reply must be a str, Reply or Error, not {type(item).__name__}"
            return number, FakeOpenAIServer.Error(500, message)
        return number, item

    def _usage(self, recorded: Request, reply: Reply) -> dict[str, int]:
        prompt = reply.input_tokens
        if prompt is None:
            prompt = sum(
                _estimate(m["content"])
                for m in recorded.messages
                if isinstance(m.get("content"), str)
            )
        output = reply.output_tokens
        if output is None:
            output = _estimate(reply.refusal if reply.refusal is not None else reply.text)
        return {
            "prompt_tokens": prompt,
            "completion_tokens": output,
            "total_tokens": prompt + output,
        }


Responder: TypeAlias = Callable[
    [FakeOpenAIServer.Request], "str | FakeOpenAIServer.Reply | FakeOpenAIServer.Error"
]
"""What a server's ``default`` may be: a function from the request to a reply."""


class _Handler(FakeHandler):
    @property
    def fake(self) -> FakeOpenAIServer:
        fake: FakeOpenAIServer = self.server.fake  # type: ignore[assignment]
        return fake

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def _serve(self) -> None:
        fake = self.fake
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = None
        headers = {name.lower(): value for name, value in self.headers.items()}
        recorded = FakeOpenAIServer.Request(self.command, self.path, headers, body)
        path = self.path.split("?", 1)[0].rstrip("/")
        if self.command != "POST" or path != "/v1/chat/completions":
            with fake._lock:
                fake.requests.append(recorded)
            where = f"{self.command} {path}"
            message = f"FakeOpenAIServer serves POST /v1/chat/completions, not {where}"
            self._send_error(FakeOpenAIServer.Error(404, message), 0)
            return
        number, reply = fake._next(recorded)
        if isinstance(reply, FakeOpenAIServer.Error):
            self._send_error(reply, number)
        elif not isinstance(body, dict):
            self._send_error(FakeOpenAIServer.Error(400, "the body is not a JSON object"), number)
        elif fake._sleep(reply.delay):
            if recorded.stream and not reply.as_json:
                _Stream(self, recorded, reply, number).send()
            else:
                self._send_completion(recorded, reply, number)

    def _json(self, payload: Any) -> bytes:
        return json.dumps(payload, ensure_ascii=self.fake.ensure_ascii).encode()

    def _send_bytes(self, status: int, headers: Mapping[str, str], payload: bytes) -> None:
        self.send_response(status)
        if not any(name.lower() == "content-type" for name in headers):
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        try:
            self.wfile.write(payload)
            self.wfile.flush()
        except OSError:
            self.close_connection = True

    def _send_error(self, error: FakeOpenAIServer.Error, number: int) -> None:
        if error.raw_body is not None:
            payload = error.raw_body.encode()
        else:
            payload = self._json({"error": error.error()})
        self._send_bytes(
            error.status, {"x-request-id": f"req_fake_{number}", **error.headers}, payload
        )

    def _send_completion(
        self, recorded: FakeOpenAIServer.Request, reply: FakeOpenAIServer.Reply, number: int
    ) -> None:
        if reply.cut_after is not None:
            self.close_connection = True
            drop(self.connection)
            return
        message = {
            "role": "assistant",
            "content": None if reply.refusal is not None else reply.text,
            "refusal": reply.refusal,
        }
        choice = {
            "index": 0,
            "message": message,
            "finish_reason": reply.finish_reason,
            "logprobs": None,
        }
        payload: dict[str, Any] = {
            **_envelope(recorded, reply, number, "chat.completion"),
            "choices": [choice],
        }
        if reply.send_usage:
            payload["usage"] = self.fake._usage(recorded, reply)
        headers = {"x-request-id": f"req_fake_{number}", **reply.headers}
        self._send_bytes(200, headers, self._json(payload))


def _envelope(
    recorded: FakeOpenAIServer.Request, reply: FakeOpenAIServer.Reply, number: int, obj: str
) -> dict[str, Any]:
    model = reply.model or str(recorded.body.get("model") or "fake-model")
    return {
        "id": f"chatcmpl-fake-{number}",
        "object": obj,
        "created": int(time.time()),
        "model": model,
    }


class _Stream:
    """One server-sent event stream, written with chunked transfer encoding."""

    def __init__(
        self,
        handler: _Handler,
        recorded: FakeOpenAIServer.Request,
        reply: FakeOpenAIServer.Reply,
        number: int,
    ) -> None:
        self.handler = handler
        self.fake = handler.fake
        self.recorded = recorded
        self.reply = reply
        self.number = number
        self.envelope = _envelope(recorded, reply, number, "chat.completion.chunk")

    def _write(self, data: bytes) -> bool:
        """Send one piece of the chunked body; False (and noted) when the client is gone."""
        try:
            self.handler.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.handler.wfile.flush()
        except OSError:
            self.recorded.closed_early.set()
            self.handler.close_connection = True
            return False
        return True

    def _event(self, payload: Mapping[str, Any]) -> bool:
        return self._write(b"data: " + self.handler._json(payload) + b"\n\n")

    def _chunk(self, delta: Mapping[str, Any], finish_reason: str | None = None) -> bool:
        choice = {
            "index": 0,
            "delta": dict(delta),
            "finish_reason": finish_reason,
            "logprobs": None,
        }
        return self._event({**self.envelope, "choices": [choice]})

    def _stall(self) -> None:
        deadline = time.monotonic() + STALL_LIMIT
        while time.monotonic() < deadline:
            if not self.fake._sleep(0.01) or not self._write(b": keep-alive\n\n"):
                return
        self._cut()

    def _cut(self) -> None:
        self.handler.close_connection = True
        if self.reply.cut_cleanly:
            self._write(b"")  # the last piece of a chunked body: a complete, short stream
        else:
            drop(self.handler.connection)

    def send(self) -> None:
        h, reply = self.handler, self.reply
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.send_header("Transfer-Encoding", "chunked")
        h.send_header("x-request-id", f"req_fake_{self.number}")
        for name, value in reply.headers.items():
            h.send_header(name, value)
        h.end_headers()
        key = "refusal" if reply.refusal is not None else "content"
        text = reply.refusal if reply.refusal is not None else reply.text
        pieces = [text[i : i + reply.chunk_size] for i in range(0, len(text), reply.chunk_size)]
        if not self._chunk({"role": "assistant", key: ""}):
            return
        for sent, piece in enumerate([*pieces, None]):
            if reply.cut_after is not None and sent >= reply.cut_after:
                self._cut()
                return
            if reply.stall_after is not None and sent >= reply.stall_after:
                self._stall()
                return
            if piece is not None and not self._chunk({key: piece}):
                return
        self._finish()

    def _finish(self) -> None:
        reply = self.reply
        if reply.stream_error is not None:
            if self._event({"error": reply.stream_error.error()}):
                self._write(b"")
            return
        if not self._chunk({}, reply.finish_reason):
            return
        if reply.after_finish == "drop":
            self.handler.close_connection = True
            drop(self.handler.connection)
            return
        options = self.recorded.body.get("stream_options")
        if reply.send_usage and isinstance(options, dict) and options.get("include_usage"):
            usage = self.fake._usage(self.recorded, reply)
            if not self._event({**self.envelope, "choices": [], "usage": usage}):
                return
        if self._write(b"data: [DONE]\n\n"):
            self._write(b"")  # the last piece of a chunked body


FakeOpenAIServer.handler = _Handler
