"""opsrun.testing.FakeAnthropicServer speaks the Messages API's wire format (read raw here)."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import pytest

from opsrun.testing import FakeAnthropicServer

Reply, Error = FakeAnthropicServer.Reply, FakeAnthropicServer.Error

BODY = {"model": "claude-test", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}


@dataclass
class Response:
    status: int
    headers: http.client.HTTPMessage
    raw: bytes

    def json(self) -> Any:
        return json.loads(self.raw)


@contextmanager
def connect(
    server: FakeAnthropicServer,
    body: Any = BODY,
    *,
    path: str = "/v1/messages",
    headers: dict[str, str] | None = None,
) -> Iterator[http.client.HTTPResponse]:
    url = urlsplit(server.base_url)
    conn = http.client.HTTPConnection(url.hostname or "", url.port, timeout=10)
    try:
        data = json.dumps(body).encode()
        headers = {"content-type": "application/json", **(headers or {})}
        conn.request("POST", path, body=data, headers=headers)
        yield conn.getresponse()
    finally:
        conn.close()


def post(
    server: FakeAnthropicServer,
    body: Any = BODY,
    *,
    path: str = "/v1/messages",
    headers: dict[str, str] | None = None,
) -> Response:
    with connect(server, body, path=path, headers=headers) as response:
        return Response(response.status, response.headers, response.read())


def sse(raw: bytes) -> list[tuple[str, dict[str, Any]]]:
    events = []
    for block in raw.decode().split("\n\n"):
        if not block.strip():
            continue
        name, data = block.split("\n")
        assert name.startswith("event: ")
        assert data.startswith("data: ")
        events.append((name.removeprefix("event: "), json.loads(data.removeprefix("data: "))))
    return events


def test_a_json_reply_with_estimated_usage_and_a_request_id() -> None:
    with FakeAnthropicServer(["Hello!"]) as server:
        response = post(server)
        message = response.json()
    assert response.status == 200
    assert response.headers["request-id"] == "req_fake_1"
    assert message == {
        "id": "msg_fake_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": [{"type": "text", "text": "Hello!"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 2},
    }
    assert server.requests[0].body == BODY
    assert server.requests[0].path == "/v1/messages"
    assert not server.requests[0].stream


def test_the_event_stream_in_order_with_usage_and_stop_reason() -> None:
    reply = Reply(text="abcdefgh", chunk_size=3, stop_reason="max_tokens", output_tokens=7)
    with FakeAnthropicServer([reply]) as server:
        response = post(server, {**BODY, "stream": True})
        events = sse(response.raw)
    assert response.headers["content-type"] == "text/event-stream"
    assert [name for name, _ in events] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert all(data["type"] == name for name, data in events)
    assert [d["delta"]["text"] for n, d in events if n == "content_block_delta"] == [
        "abc",
        "def",
        "gh",
    ]
    assert events[0][1]["message"]["stop_reason"] is None
    assert events[-2][1]["delta"]["stop_reason"] == "max_tokens"
    assert events[-2][1]["usage"] == {"output_tokens": 7}
    assert server.requests[0].stream


def test_a_scripted_error_has_the_status_headers_and_anthropic_body() -> None:
    scripted = Error(429, "slow down", headers={"retry-after": "7"})
    with FakeAnthropicServer(
        [scripted, Error(529, "busy"), Error(400, "no", type="x_error")]
    ) as server:
        first, second, third = (post(server) for _ in range(3))
        bodies = [r.json() for r in (first, second, third)]
    assert (first.status, first.headers["retry-after"]) == (429, "7")
    assert bodies[0] == {
        "type": "error",
        "error": {"type": "rate_limit_error", "message": "slow down"},
        "request_id": "req_fake_1",
    }
    assert (second.status, bodies[1]["error"]["type"]) == (529, "overloaded_error")
    assert (third.status, bodies[2]["error"]["type"]) == (400, "x_error")


def test_a_cut_stream_ends_without_the_last_chunk() -> None:
    reply = Reply(text="abcdefgh", chunk_size=2, cut_after=1)
    with (
        FakeAnthropicServer([reply]) as server,
        connect(server, {**BODY, "stream": True}) as response,
        pytest.raises(http.client.IncompleteRead) as caught,
    ):
        response.read()
    events = sse(caught.value.partial)
    assert [name for name, _ in events] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
    ]


def test_an_error_event_mid_stream() -> None:
    reply = Reply(
        text="abcd",
        chunk_size=2,
        cut_after=1,
        stream_error=Error(200, "busy", type="overloaded_error"),
    )
    with FakeAnthropicServer([reply]) as server:
        events = sse(post(server, {**BODY, "stream": True}).raw)
    assert events[-1] == (
        "error",
        {
            "type": "error",
            "error": {"type": "overloaded_error", "message": "busy"},
            "request_id": "req_fake_1",
        },
    )
    assert [name for name, _ in events].count("content_block_delta") == 1


def test_a_forced_tool_turns_a_json_object_into_a_tool_call() -> None:
    body = {**BODY, "tool_choice": {"type": "tool", "name": "notes"}}
    with FakeAnthropicServer(['{"a": 1}', "not json"]) as server:
        called = post(server, body).json()
        plain = post(server, body).json()
    assert called["content"] == [
        {"type": "tool_use", "id": "toolu_fake_1", "name": "notes", "input": {"a": 1}}
    ]
    assert called["stop_reason"] == "tool_use"
    assert plain["content"] == [{"type": "text", "text": "not json"}]


def test_a_streamed_tool_call_sends_input_json_deltas() -> None:
    with FakeAnthropicServer([Reply(tool_input={"k": "v"}, chunk_size=4)]) as server:
        events = sse(post(server, {**BODY, "stream": True}).raw)
    start = next(d for n, d in events if n == "content_block_start")
    assert start["content_block"]["type"] == "tool_use"
    parts = [d["delta"]["partial_json"] for n, d in events if n == "content_block_delta"]
    assert json.loads("".join(parts)) == {"k": "v"}


def test_api_key_is_checked_when_set() -> None:
    with FakeAnthropicServer(["yes"], api_key="sk-test") as server:
        denied = post(server, headers={"x-api-key": "wrong"})
        assert denied.status == 401
        assert denied.json()["error"]["type"] == "authentication_error"
        assert post(server, headers={"authorization": "Bearer sk-test"}).status == 200
        assert post(server, headers={"x-api-key": "sk-test"}).status == 200
    assert len(server.requests) == 3
    assert server.requests[0].headers["x-api-key"] == "wrong"


def test_the_queue_default_and_an_empty_queue() -> None:
    with FakeAnthropicServer(default="fallback") as server:
        server.push("first")
        texts = [post(server).json()["content"][0]["text"] for _ in range(2)]
    assert texts == ["first", "fallback"]
    with FakeAnthropicServer(default=None) as server:
        response = post(server)
        assert response.status == 400
        assert "no scripted reply" in response.json()["error"]["message"]


def test_unknown_paths_are_not_found() -> None:
    with FakeAnthropicServer() as server:
        response = post(server, path="/v1/complete")
        assert response.status == 404
    assert server.last_request is not None
    assert server.last_request.path == "/v1/complete"


def test_a_client_that_closes_a_stream_early_is_noticed() -> None:
    reply = Reply(text="x" * 400, chunk_size=1, chunk_delay=0.01)
    with FakeAnthropicServer([reply]) as server:
        with connect(server, {**BODY, "stream": True}) as response:
            response.read1(64)
        assert server.wait_closed_early(0)
