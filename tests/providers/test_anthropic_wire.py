"""AnthropicProvider against servers that bend the wire format: unknown events, no
usage, a connection held or lost after ``message_stop``, whole JSON bodies to a streamed
call, a 200 that is not a message, use after ``aclose``, credentials in ``base_url``."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any, TypeAlias

import anyio
import pytest
from anthropic import AsyncAnthropic, DefaultAsyncHttpxClient

from opsrun.errors import ProviderError, ProviderUnavailable
from opsrun.model import Trigger, Usage
from opsrun.ports import LlmRequest, MainLlmDone, MainLlmRequest, ProviderMessage
from opsrun.providers.anthropic import AnthropicProvider
from opsrun.testing import FakeAnthropicServer

pytestmark = pytest.mark.anyio

Reply: TypeAlias = FakeAnthropicServer.Reply
Error: TypeAlias = FakeAnthropicServer.Error
KEY = "sk-ant-provider-key-0001"
HTML = "<!doctype html><html><body>My Chat UI</body></html>"
REQUEST = LlmRequest(messages=(ProviderMessage("user", "hi"),), model="claude-aux")
MAIN = MainLlmRequest(
    messages=(ProviderMessage("user", "I try the door."),),
    run_id="run_1",
    chat_id="c",
    user_message_id="m1",
    trigger=Trigger.GENERATE,
)


@pytest.fixture
def server() -> Iterator[FakeAnthropicServer]:
    with FakeAnthropicServer(default=None) as fake:
        yield fake


def client_for(server: FakeAnthropicServer) -> AsyncAnthropic:
    """A client for the plain-HTTP fake server: no TLS context to build."""
    http = DefaultAsyncHttpxClient(verify=False)
    return AsyncAnthropic(api_key=KEY, base_url=server.base_url, http_client=http)


@pytest.fixture
async def provider(server: FakeAnthropicServer) -> AsyncIterator[AnthropicProvider]:
    async with client_for(server) as client:
        yield AnthropicProvider("claude-test", client=client, timeout=10.0)


async def collect(provider: AnthropicProvider) -> tuple[list[str], MainLlmDone]:
    items = [item async for item in provider.stream(MAIN)]
    done = items.pop()
    assert isinstance(done, MainLlmDone)
    assert all(isinstance(item, str) for item in items)
    return [str(item) for item in items], done


def event(kind: str, **fields: Any) -> tuple[str, dict[str, Any]]:
    return kind, {"type": kind, **fields}


# -- events and deltas the adapter does not know ---------------------------------------------

UNKNOWN: dict[str, list[tuple[str, dict[str, Any]]]] = {
    "event-type": [event("message_annotation", note="x"), event("ping")],
    "delta-type": [
        event("content_block_start", index=1, content_block={"type": "compaction", "content": ""}),
        event(
            "content_block_delta",
            index=1,
            delta={"type": "compaction_delta", "content": "summary"},
        ),
        event("content_block_stop", index=1),
    ],
    "text-delta-without-text": [
        event("content_block_delta", index=0, delta={"type": "text_delta", "text": None}),
    ],
}


@pytest.mark.parametrize("extra", UNKNOWN.values(), ids=UNKNOWN.keys())
async def test_unknown_stream_events_and_deltas_are_skipped(
    server: FakeAnthropicServer,
    provider: AnthropicProvider,
    extra: list[tuple[str, dict[str, Any]]],
) -> None:
    server.push(Reply(text="The door opens.", extra_events=extra, input_tokens=5, output_tokens=4))
    deltas, done = await collect(provider)
    assert "".join(deltas) == "The door opens."
    assert done == MainLlmDone(
        text="The door opens.",
        finish_reason="stop",
        raw_finish_reason="end_turn",
        usage=Usage(input_tokens=5, output_tokens=4, total_tokens=9),
    )


async def test_a_stream_keeps_unicode_line_separators_sent_as_raw_utf8() -> None:
    text = "para one\u2028para two, a\u2029b, wait\x85 what, café"
    with FakeAnthropicServer([Reply(text=text, chunk_size=1000)], ensure_ascii=False) as server:
        async with client_for(server) as client:
            deltas, done = await collect(AnthropicProvider("claude-test", client=client))
    assert deltas == [text]
    assert done.text == text


# -- no usage --------------------------------------------------------------------------------


async def test_a_reply_without_usage_has_none(
    server: FakeAnthropicServer, provider: AnthropicProvider
) -> None:
    server.push(Reply(text="The door opens.", send_usage=False))
    server.push(Reply(text="notes", send_usage=False))
    _, done = await collect(provider)
    assert (done.text, done.usage) == ("The door opens.", None)
    response = await provider.complete(REQUEST)
    assert (response.text, response.usage) == ("notes", None)


# -- the end of a stream is message_stop -----------------------------------------------------


async def test_a_connection_dropped_after_message_stop_loses_nothing(
    server: FakeAnthropicServer, provider: AnthropicProvider
) -> None:
    server.push(Reply(text="The door opens.", after_stop="drop"))
    deltas, done = await collect(provider)
    assert "".join(deltas) == "The door opens."
    assert (done.finish_reason, done.raw_finish_reason) == ("stop", "end_turn")


async def test_the_stream_stops_at_message_stop_and_closes_the_connection(
    server: FakeAnthropicServer, provider: AnthropicProvider
) -> None:
    # The body stays open after message_stop; waiting for its end would time out.
    server.push(Reply(text="The door opens.", after_stop="hold"))
    _, done = await collect(provider)
    assert done.text == "The door opens."
    assert await anyio.to_thread.run_sync(server.wait_closed_early, 0, 10.0)


# -- a streamed call answered with a whole JSON body -----------------------------------------


async def test_a_whole_json_message_to_a_streamed_call_is_the_reply(
    server: FakeAnthropicServer, provider: AnthropicProvider
) -> None:
    server.push(Reply(text="The door opens.", as_json=True, input_tokens=5, output_tokens=4))
    deltas, done = await collect(provider)
    assert deltas == ["The door opens."]
    assert done == MainLlmDone(
        text="The door opens.",
        finish_reason="stop",
        raw_finish_reason="end_turn",
        usage=Usage(input_tokens=5, output_tokens=4, total_tokens=9),
    )
    assert server.requests[0].stream


@pytest.mark.parametrize(
    ("error", "kind", "code", "retryable"),
    [
        (Error(200, "Overloaded", type="overloaded_error"), ProviderUnavailable, None, True),
        (
            Error(200, "model: claude-9", type="not_found_error"),
            ProviderError,
            "bad_request",
            False,
        ),
    ],
    ids=["overloaded", "not-found"],
)
async def test_an_error_body_with_200_to_a_streamed_call_is_that_error(
    server: FakeAnthropicServer,
    provider: AnthropicProvider,
    error: Error,
    kind: type[ProviderError],
    code: str | None,
    retryable: bool,
) -> None:
    server.push(error)
    with pytest.raises(ProviderError) as raised:
        await collect(provider)
    assert type(raised.value) is kind
    assert raised.value.code == (code or kind.default_code)
    assert raised.value.retryable is retryable
    assert error.message in raised.value.message


async def test_an_html_page_to_a_streamed_call_is_a_provider_error(
    server: FakeAnthropicServer, provider: AnthropicProvider
) -> None:
    server.push(Error(200, raw_body=HTML, headers={"content-type": "text/html"}))
    with pytest.raises(ProviderError) as raised:
        await collect(provider)
    assert (raised.value.code, raised.value.retryable) == ("provider_error", False)


async def test_an_event_stream_under_another_content_type_is_read_as_one(
    server: FakeAnthropicServer, provider: AnthropicProvider
) -> None:
    message = {"id": "msg_1", "type": "message", "role": "assistant", "content": []}
    events = [
        event("message_start", message=message),
        event("content_block_start", index=0, content_block={"type": "text", "text": ""}),
        event("content_block_delta", index=0, delta={"type": "text_delta", "text": "Hi"}),
        event("message_delta", delta={"stop_reason": "end_turn"}),
        event("message_stop"),
    ]
    body = "".join(f"event: {kind}\ndata: {json.dumps(data)}\n\n" for kind, data in events)
    server.push(Error(200, raw_body=body, headers={"content-type": "text/plain"}))
    deltas, done = await collect(provider)
    assert deltas == ["Hi"]
    assert (done.text, done.finish_reason) == ("Hi", "stop")


# -- complete(): a 200 that is not a message -------------------------------------------------


async def test_complete_on_a_200_that_is_not_a_message_raises_provider_error(
    server: FakeAnthropicServer, provider: AnthropicProvider
) -> None:
    server.push(Error(200, raw_body=HTML, headers={"content-type": "text/html"}))
    with pytest.raises(ProviderError) as raised:
        await provider.complete(REQUEST)
    assert type(raised.value) is ProviderError
    assert (raised.value.code, raised.value.retryable) == ("provider_error", False)
    assert "My Chat UI" in raised.value.message


@pytest.mark.parametrize(
    ("reply", "code", "said"),
    [
        (Error(200, "Overloaded", type="overloaded_error"), "provider_unavailable", "Overloaded"),
        (Error(200, "no such model", type="not_found_error"), "bad_request", "no such model"),
        (Error(200, f"bad key {KEY}", type="api_error"), "provider_unavailable", "[REDACTED]"),
    ],
    ids=["overloaded", "not-found", "error-with-key"],
)
async def test_complete_on_a_200_error_body_raises_the_error_a_stream_would(
    server: FakeAnthropicServer, provider: AnthropicProvider, reply: Error, code: str, said: str
) -> None:
    server.push(reply)
    with pytest.raises(ProviderError) as from_complete:
        await provider.complete(REQUEST)
    server.push(reply)
    with pytest.raises(ProviderError) as from_stream:
        await collect(provider)
    assert from_complete.value.code == from_stream.value.code == code
    assert from_complete.value.retryable == from_stream.value.retryable
    assert said in from_complete.value.message
    assert KEY not in from_complete.value.message


# -- use after aclose ------------------------------------------------------------------------


async def test_a_closed_provider_refuses_every_call_without_a_request(
    server: FakeAnthropicServer,
) -> None:
    provider = AnthropicProvider("claude-test", api_key=KEY, base_url=server.base_url)
    await provider.aclose()
    with pytest.raises(ProviderError) as completing:
        await provider.complete(REQUEST)
    with pytest.raises(ProviderError) as streaming:
        await collect(provider)
    for raised in (completing.value, streaming.value):
        assert (type(raised), raised.code, raised.retryable) == (
            ProviderError,
            "provider_closed",
            False,
        )
    assert server.requests == []


# -- repr ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "base_url",
    [
        "https://alice:hunter2-s3cret@llm-gw.internal/v1",
        "https://llm-gw.internal/v1?api_key=sk-abc123def456ghi789jkl012",
    ],
)
def test_repr_shows_the_endpoint_without_credentials(base_url: str) -> None:
    shown = repr(AnthropicProvider("claude-test", base_url=base_url, api_key=KEY))
    assert "https://llm-gw.internal/v1" in shown
    for secret in ("alice", "hunter2", "api_key", "sk-abc123", KEY):
        assert secret not in shown


# -- event streams that begin with a byte-order mark or are not event streams -----------------

SSE = {"content-type": "text/event-stream"}


def sse_body(*events: tuple[str, dict[str, Any]]) -> str:
    return "".join(f"event: {kind}\ndata: {json.dumps(data)}\n\n" for kind, data in events)


MESSAGE_EVENTS = [
    event(
        "message_start",
        message={"id": "m", "role": "assistant", "content": [], "usage": {"input_tokens": 5}},
    ),
    event("content_block_start", index=0, content_block={"type": "text", "text": ""}),
    event("content_block_delta", index=0, delta={"type": "text_delta", "text": "Hi."}),
    event("content_block_stop", index=0),
    event("message_delta", delta={"stop_reason": "end_turn"}, usage={"output_tokens": 2}),
    event("message_stop"),
]


async def test_a_byte_order_mark_before_the_first_event_is_ignored(
    server: FakeAnthropicServer, provider: AnthropicProvider
) -> None:
    server.push(Error(200, raw_body="\ufeff" + sse_body(*MESSAGE_EVENTS), headers=SSE))
    deltas, done = await collect(provider)
    assert deltas == ["Hi."]
    assert done.usage == Usage(input_tokens=5, output_tokens=2, total_tokens=7)


async def test_a_json_error_labelled_as_an_event_stream_is_that_error(
    server: FakeAnthropicServer, provider: AnthropicProvider
) -> None:
    body = {"type": "error", "error": {"type": "not_found_error", "message": "model: claude-9"}}
    server.push(Error(200, raw_body=json.dumps(body, indent=2), headers=SSE))
    with pytest.raises(ProviderError) as raised:
        await collect(provider)
    assert raised.value.code == "bad_request"
    assert not raised.value.retryable
    assert "claude-9" in raised.value.message
