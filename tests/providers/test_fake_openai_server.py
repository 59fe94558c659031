"""FakeOpenAIServer on the wire, seen with a plain HTTP client (no SDK)."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from typing import Any, cast

import pytest

from opsrun.testing import FakeOpenAIServer

Error = FakeOpenAIServer.Error
Reply = FakeOpenAIServer.Reply


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(default=None) as fake:
        yield fake


def post(
    server: FakeOpenAIServer, body: Any, path: str = "/v1/chat/completions", **headers: str
) -> tuple[int, dict[str, str], bytes]:
    """Status, headers (lower-cased names) and the whole body of one request."""
    port = int(server.base_url.rsplit(":", 1)[1].split("/")[0])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        conn.request(
            "POST", path, body=raw, headers={"Content-Type": "application/json", **headers}
        )
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


def chat(stream: bool = False, **extra: Any) -> dict[str, Any]:
    return {
        "model": "fake-model",
        "messages": [{"role": "user", "content": "12345678"}],
        "stream": stream,
        **extra,
    }


def events(body: bytes) -> list[str]:
    """The ``data:`` values of an event stream, in order."""
    return [
        line[len("data: ") :] for line in body.decode().split("\n") if line.startswith("data: ")
    ]


def test_a_completion_is_json_with_estimated_usage(server: FakeOpenAIServer) -> None:
    server.push("abcd")
    status, headers, body = post(server, chat())
    assert status == 200
    assert headers["x-request-id"] == "req_fake_1"
    reply = json.loads(body)
    assert reply["object"] == "chat.completion"
    assert reply["model"] == "fake-model"
    assert reply["choices"] == [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "abcd", "refusal": None},
            "finish_reason": "stop",
            "logprobs": None,
        }
    ]
    assert reply["usage"] == {"prompt_tokens": 2, "completion_tokens": 1, "total_tokens": 3}


def test_a_stream_is_server_sent_events_ending_in_done(server: FakeOpenAIServer) -> None:
    server.push(Reply(text="hello world", chunk_size=6, input_tokens=10, output_tokens=3))
    status, headers, body = post(server, chat(stream=True, stream_options={"include_usage": True}))
    assert status == 200
    assert headers["content-type"] == "text/event-stream"
    data = events(body)
    assert data[-1] == "[DONE]"
    chunks = [json.loads(d) for d in data[:-1]]
    assert [c["object"] for c in chunks] == ["chat.completion.chunk"] * len(chunks)
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert deltas == [
        {"role": "assistant", "content": ""},
        {"content": "hello "},
        {"content": "world"},
        {},
    ]
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"] == {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13}


def test_a_stream_reports_usage_only_when_asked(server: FakeOpenAIServer) -> None:
    server.push("hi")
    _, _, body = post(server, chat(stream=True))
    assert all("usage" not in json.loads(d) for d in events(body)[:-1])


def test_scripted_errors_carry_status_headers_and_body(server: FakeOpenAIServer) -> None:
    server.push(
        Error(429, "slow down", code="rate_limit_exceeded", headers={"Retry-After": "3"}),
        Error(502, raw_body="<html>bad gateway</html>"),
    )
    status, headers, body = post(server, chat())
    assert (status, headers["retry-after"]) == (429, "3")
    assert json.loads(body) == {
        "error": {
            "message": "slow down",
            "type": "rate_limit_exceeded",
            "param": None,
            "code": "rate_limit_exceeded",
        }
    }
    status, _, body = post(server, chat())
    assert (status, body) == (502, b"<html>bad gateway</html>")


def test_an_error_event_ends_a_stream(server: FakeOpenAIServer) -> None:
    server.push(Reply(text="abc", stream_error=Error(500, "boom")))
    _, _, body = post(server, chat(stream=True))
    data = events(body)
    assert json.loads(data[-1]) == {
        "error": {"message": "boom", "type": "server_error", "param": None, "code": None}
    }
    assert "[DONE]" not in data


def test_a_clean_cut_ends_the_body_without_finish_or_done(server: FakeOpenAIServer) -> None:
    server.push(Reply(text="abcdefgh", chunk_size=4, cut_after=1, cut_cleanly=True))
    _, _, body = post(server, chat(stream=True))
    data = events(body)
    assert "[DONE]" not in data
    assert [json.loads(d)["choices"][0]["finish_reason"] for d in data] == [None, None]


def test_a_cut_drops_the_connection(server: FakeOpenAIServer) -> None:
    server.push(Reply(text="abcdefgh", chunk_size=4, cut_after=1))
    with pytest.raises(http.client.IncompleteRead):
        post(server, chat(stream=True))


def test_requests_are_recorded_as_sent(server: FakeOpenAIServer) -> None:
    server.push("ok")
    post(server, chat(temperature=0.5), Authorization="Bearer sk-test")
    recorded = server.last_request
    assert recorded is not None
    assert (recorded.method, recorded.path) == ("POST", "/v1/chat/completions")
    assert recorded.headers["authorization"] == "Bearer sk-test"
    assert recorded.body["temperature"] == 0.5
    assert recorded.messages == [{"role": "user", "content": "12345678"}]
    assert not recorded.stream
    assert not recorded.closed_early.is_set()


def test_the_queue_then_the_default(server: FakeOpenAIServer) -> None:
    status, _, body = post(server, chat())
    assert status == 400
    assert "no scripted reply left" in json.loads(body)["error"]["message"]
    server.default = "fallback"
    assert json.loads(post(server, chat())[2])["choices"][0]["message"]["content"] == "fallback"


def test_a_responder_computes_replies_from_the_request(server: FakeOpenAIServer) -> None:
    def echo(request: FakeOpenAIServer.Request) -> str:
        if request.body.get("temperature") == 2:
            raise ValueError("too hot")
        return f"echo: {request.messages[-1]['content']}"

    server.default = echo
    assert (
        json.loads(post(server, chat())[2])["choices"][0]["message"]["content"] == "echo: 12345678"
    )
    status, _, body = post(server, chat(temperature=2))
    assert status == 500
    assert "too hot" in json.loads(body)["error"]["message"]
    server.push(cast(Any, 42))  # not a reply: the client sees a 500 that says why
    status, _, body = post(server, chat())
    assert status == 500
    assert "not int" in json.loads(body)["error"]["message"]


def test_a_wrong_key_is_refused_and_echoed(server: FakeOpenAIServer) -> None:
    server.api_key = "sk-right"
    server.push("kept for the right key")
    status, _, body = post(server, chat(), Authorization="Bearer sk-wrong")
    assert status == 401
    assert json.loads(body)["error"]["message"] == "Incorrect API key provided: sk-wrong."
    status, _, body = post(server, chat(), Authorization="Bearer sk-right")
    assert json.loads(body)["choices"][0]["message"]["content"] == "kept for the right key"


def test_other_paths_and_bad_bodies_are_refused(server: FakeOpenAIServer) -> None:
    server.push("unused")
    assert post(server, chat(), path="/v1/embeddings")[0] == 404
    assert post(server, b"not json")[0] == 400
    assert len(server.requests) == 2


def test_base_url_needs_a_started_server() -> None:
    server = FakeOpenAIServer()
    with pytest.raises(RuntimeError, match="not started"):
        _ = server.base_url
    with server:
        assert server.base_url.startswith("http://127.0.0.1:")
        assert server.base_url.endswith("/v1")
    server.close()  # closing twice is fine
