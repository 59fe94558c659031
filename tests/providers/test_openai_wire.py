"""OpenAIProvider against servers that bend the wire format: raw UTF-8 line separators,
a connection lost after the finish, whole JSON bodies to a streamed request, a 200 that
is not a completion, use after ``aclose``, credentials in ``base_url``."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import TypeAlias

import openai
import pytest
from _openai_support import KEY, adapter_for, collect, llm_request, main_request

from opsrun.errors import ProviderError
from opsrun.model import Usage
from opsrun.ports import MainLlmDone
from opsrun.providers.openai import OpenAIProvider
from opsrun.testing import FakeOpenAIServer

pytestmark = pytest.mark.anyio

Reply: TypeAlias = FakeOpenAIServer.Reply
Error: TypeAlias = FakeOpenAIServer.Error
HTML = "<!doctype html><html><body>My Chat UI</body></html>"


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(default=None) as fake:
        yield fake


@pytest.fixture
async def provider(server: FakeOpenAIServer) -> AsyncIterator[OpenAIProvider]:
    async with adapter_for(server.base_url) as adapter:
        yield adapter


# -- lines end at CR, LF and CRLF only -------------------------------------------------------


async def test_a_stream_keeps_unicode_line_separators_sent_as_raw_utf8() -> None:
    text = "para one\u2028para two, a\u2029b, wait\x85 what, café"
    with FakeOpenAIServer([Reply(text=text, chunk_size=1000)], ensure_ascii=False) as server:
        async with adapter_for(server.base_url) as provider:
            deltas, done = await collect(provider.stream(main_request()))
    assert deltas == [text]
    assert done.text == text
    assert done.finish_reason == "stop"


# -- a complete reply, then a misbehaving connection -----------------------------------------


async def test_a_connection_dropped_after_the_finish_reason_loses_nothing(
    server: FakeOpenAIServer, provider: OpenAIProvider
) -> None:
    server.push(Reply(text="The door opens.", after_finish="drop"))
    deltas, done = await collect(provider.stream(main_request()))
    assert "".join(deltas) == "The door opens."
    assert done == MainLlmDone(
        text="The door opens.", finish_reason="stop", raw_finish_reason="stop", usage=None
    )


# -- a streamed request answered with a whole JSON body ---------------------------------------


async def test_a_whole_json_completion_to_a_streamed_request_is_the_reply(
    server: FakeOpenAIServer, provider: OpenAIProvider
) -> None:
    server.push(Reply(text="The door opens.", as_json=True, input_tokens=5, output_tokens=4))
    deltas, done = await collect(provider.stream(main_request()))
    assert deltas == ["The door opens."]
    assert (done.text, done.finish_reason, done.raw_finish_reason) == (
        "The door opens.",
        "stop",
        "stop",
    )
    assert done.usage == Usage(input_tokens=5, output_tokens=4, total_tokens=9)
    assert server.requests[0].stream


async def test_an_error_object_in_a_200_body_to_a_streamed_request_is_that_error(
    server: FakeOpenAIServer, provider: OpenAIProvider
) -> None:
    server.push(Error(200, "The model `gpt-9` does not exist", code="model_not_found"))
    with pytest.raises(ProviderError) as raised:
        await collect(provider.stream(main_request()))
    assert raised.value.code == "bad_request"
    assert not raised.value.retryable
    assert "does not exist" in raised.value.message


async def test_an_html_page_to_a_streamed_request_is_a_provider_error(
    server: FakeOpenAIServer, provider: OpenAIProvider
) -> None:
    server.push(Error(200, raw_body=HTML, headers={"Content-Type": "text/html; charset=utf-8"}))
    with pytest.raises(ProviderError) as raised:
        await collect(provider.stream(main_request()))
    assert raised.value.code == "provider_error"
    assert not raised.value.retryable


@pytest.mark.parametrize("label", ["text/plain", "application/json"])
async def test_an_event_stream_under_another_content_type_is_read_as_one(
    server: FakeOpenAIServer, provider: OpenAIProvider, label: str
) -> None:
    chunks = [
        '{"choices": [{"index": 0, "delta": {"content": "The door"}, "finish_reason": null}]}',
        '{"choices": [{"index": 0, "delta": {"content": " opens."}, "finish_reason": "stop"}]}',
        "[DONE]",
    ]
    body = "".join(f"data: {chunk}\n\n" for chunk in chunks)
    server.push(Error(200, raw_body=body, headers={"Content-Type": label}))
    deltas, done = await collect(provider.stream(main_request()))
    assert "".join(deltas) == done.text == "The door opens."
    assert done.finish_reason == "stop"


# -- complete(): a 200 that is not a completion ----------------------------------------------


@pytest.mark.parametrize(
    ("reply", "said"),
    [
        (Error(200, raw_body=HTML, headers={"Content-Type": "text/html"}), "My Chat UI"),
        (Error(200, raw_body='{"choices": '), "not JSON"),
    ],
    ids=["html", "broken-json"],
)
async def test_complete_on_a_200_that_is_not_a_completion_raises_provider_error(
    server: FakeOpenAIServer, provider: OpenAIProvider, reply: Error, said: str
) -> None:
    server.push(reply)
    with pytest.raises(ProviderError) as raised:
        await provider.complete(llm_request())
    assert type(raised.value) is ProviderError
    assert raised.value.code == "provider_error"
    assert not raised.value.retryable
    assert said in raised.value.message


@pytest.mark.parametrize(
    ("reply", "code", "said"),
    [
        (Error(200, "The model `gpt-9` does not exist"), "bad_request", "not exist"),
        (Error(200, f"bad key {KEY}", type="server_error"), "provider_unavailable", "[REDACTED]"),
    ],
    ids=["error-object", "error-with-key"],
)
async def test_complete_on_a_200_error_object_raises_the_error_a_stream_would(
    server: FakeOpenAIServer, provider: OpenAIProvider, reply: Error, code: str, said: str
) -> None:
    server.push(reply)
    with pytest.raises(ProviderError) as from_complete:
        await provider.complete(llm_request())
    server.push(reply)
    with pytest.raises(ProviderError) as from_stream:
        await collect(provider.stream(main_request()))
    assert from_complete.value.code == from_stream.value.code == code
    assert from_complete.value.retryable == from_stream.value.retryable
    assert said in from_complete.value.message
    assert KEY not in from_complete.value.message


# -- use after aclose ------------------------------------------------------------------------


async def test_a_closed_adapter_refuses_every_call_without_a_request(
    server: FakeOpenAIServer,
) -> None:
    adapter = OpenAIProvider("gpt-test", base_url=server.base_url, api_key=KEY)
    await adapter.aclose()
    with pytest.raises(ProviderError) as completing:
        await adapter.complete(llm_request())
    with pytest.raises(ProviderError) as streaming:
        await collect(adapter.stream(main_request()))
    for raised in (completing.value, streaming.value):
        assert (type(raised), raised.code, raised.retryable) == (
            ProviderError,
            "provider_closed",
            False,
        )
    assert server.requests == []


async def test_an_adapter_whose_given_client_was_closed_refuses_calls(
    server: FakeOpenAIServer,
) -> None:
    client = openai.AsyncOpenAI(api_key=KEY, base_url=server.base_url)
    adapter = OpenAIProvider("gpt-test", client=client)
    await client.close()
    with pytest.raises(ProviderError) as raised:
        await adapter.complete(llm_request())
    assert (raised.value.code, raised.value.retryable) == ("provider_closed", False)
    assert server.requests == []


# -- repr ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "base_url",
    [
        "https://alice:hunter2-s3cret@llm-gw.internal/v1",
        "https://llm-gw.internal/v1?api_key=sk-abc123def456ghi789jkl012#frag",
    ],
)
def test_repr_shows_the_endpoint_without_credentials(base_url: str) -> None:
    shown = repr(OpenAIProvider("gpt-test", base_url=base_url, api_key=KEY))
    assert "https://llm-gw.internal/v1" in shown
    for secret in ("alice", "hunter2", "api_key", "sk-abc123", "frag", KEY):
        assert secret not in shown


# -- event streams that begin oddly or end with an error ----------------------------------

SSE = {"Content-Type": "text/event-stream"}
CHUNKS = [
    '{"choices": [{"index": 0, "delta": {"content": "The door"}, "finish_reason": null}]}',
    '{"choices": [{"index": 0, "delta": {"content": " opens."}, "finish_reason": "stop"}]}',
]


async def test_a_byte_order_mark_before_the_first_event_is_ignored(
    server: FakeOpenAIServer, provider: OpenAIProvider
) -> None:
    body = "\ufeff" + "".join(f"data: {chunk}\n\n" for chunk in [*CHUNKS, "[DONE]"])
    server.push(Error(200, raw_body=body, headers=SSE))
    deltas, done = await collect(provider.stream(main_request()))
    assert deltas == ["The door", " opens."]
    assert done.text == "The door opens."


async def test_an_error_event_after_the_finish_reason_keeps_the_whole_reply(
    server: FakeOpenAIServer, provider: OpenAIProvider
) -> None:
    error = '{"error": {"message": "usage unavailable", "type": "server_error"}}'
    body = "".join(f"data: {chunk}\n\n" for chunk in [*CHUNKS, error])
    server.push(Error(200, raw_body=body, headers=SSE))
    _, done = await collect(provider.stream(main_request()))
    assert (done.text, done.finish_reason) == ("The door opens.", "stop")


async def test_a_json_error_labelled_as_an_event_stream_is_that_error(
    server: FakeOpenAIServer, provider: OpenAIProvider
) -> None:
    error = {
        "message": "The model `gpt-9` does not exist",
        "type": "invalid_request_error",
        "code": "model_not_found",
    }
    server.push(Error(200, raw_body=json.dumps({"error": error}, indent=2), headers=SSE))
    with pytest.raises(ProviderError) as raised:
        await collect(provider.stream(main_request()))
    assert raised.value.code == "bad_request"
    assert not raised.value.retryable
    assert "does not exist" in raised.value.message


async def test_a_json_completion_labelled_as_an_event_stream_is_the_reply(
    server: FakeOpenAIServer, provider: OpenAIProvider
) -> None:
    body = '{"choices": [{"index": 0, "message": {"content": "Hi."}, "finish_reason": "stop"}]}'
    server.push(Error(200, raw_body=body, headers=SSE))
    deltas, done = await collect(provider.stream(main_request()))
    assert deltas == ["Hi."]
    assert (done.text, done.finish_reason) == ("Hi.", "stop")
