"""OpenAIProvider against the bundled fake server: requests, replies, streams, settings."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import openai
import pytest
from _openai_support import KEY, adapter_for, collect, llm_request, main_request

from opsrun.errors import ConfigError, ProviderError, ProviderUnavailable
from opsrun.model import Samplers, Usage
from opsrun.ports import (
    LlmProvider,
    LlmRequest,
    MainLlm,
    MainLlmDone,
    ProviderCapabilities,
    ProviderMessage,
    ResponseFormat,
)
from opsrun.providers._openai._request import (
    create_kwargs,
    default_capabilities,
    supports_developer_role,
)
from opsrun.providers.openai import OpenAIProvider
from opsrun.testing import FakeOpenAIServer

pytestmark = pytest.mark.anyio

Reply = FakeOpenAIServer.Reply


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(default=None) as fake:
        yield fake


@pytest.fixture
async def provider(server: FakeOpenAIServer) -> AsyncIterator[OpenAIProvider]:
    async with adapter_for(server.base_url) as adapter:
        yield adapter


def body(server: FakeOpenAIServer, index: int = -1) -> dict[str, Any]:
    recorded = server.requests[index].body
    assert isinstance(recorded, dict)
    return recorded


def test_one_object_serves_both_ports() -> None:
    adapter = OpenAIProvider("gpt-test", base_url="http://127.0.0.1:9/v1", api_key=KEY)
    main: MainLlm = adapter
    aux: LlmProvider = adapter
    assert main.capabilities == aux.capabilities


# -- kind="llm": one non-streamed completion ------------------------------------------------


async def test_complete_sends_the_request_and_reads_the_reply(
    server: FakeOpenAIServer, provider: OpenAIProvider
) -> None:
    server.push("- the door is locked")
    request = llm_request(
        "open the door",
        samplers=Samplers(temperature=0.2, top_p=0.9, top_k=40, seed=7, presence_penalty=0.5),
        max_output_tokens=64,
        stop=("END",),
    )
    response = await provider.complete(request)

    assert response.text == "- the door is locked"
    assert response.finish_reason == "stop"
    assert response.raw_finish_reason == "stop"
    assert response.usage == Usage(input_tokens=4, output_tokens=5, total_tokens=9)
    assert response.model == "aux-model"
    assert response.request_id == "req_fake_1"
    sent = body(server)
    assert sent["model"] == "aux-model"
    assert sent["messages"] == [{"role": "user", "content": "open the door"}]
    assert sent["stream"] is False
    assert (sent["temperature"], sent["top_p"], sent["seed"]) == (0.2, 0.9, 7)
    assert sent["presence_penalty"] == 0.5
    assert sent["top_k"] == 40  # not an OpenAI parameter: sent as an extra body field
    assert sent["max_tokens"] == 64  # not OpenAI's own API: max_tokens
    assert sent["stop"] == ["END"]
    assert "response_format" not in sent
    assert server.requests[0].headers["authorization"] == f"Bearer {KEY}"


def test_max_output_tokens_is_max_completion_tokens_on_openai() -> None:
    settings = {"max_output_tokens": 10, "top_k": 3, "stop": "END", "model": "x"}
    assert create_kwargs(settings, openai_endpoint=True) == {
        "max_completion_tokens": 10,
        "stop": ["END"],
        "extra_body": {"top_k": 3},
    }
    assert create_kwargs(settings, openai_endpoint=False)["max_tokens"] == 10


async def test_the_request_credential_is_the_key_of_that_call(
    server: FakeOpenAIServer, provider: OpenAIProvider
) -> None:
    server.push("a", "b")
    await provider.complete(llm_request(credential="sk-per-call-credential-0001"))
    await provider.complete(llm_request())
    assert server.requests[0].headers["authorization"] == "Bearer sk-per-call-credential-0001"
    assert server.requests[1].headers["authorization"] == f"Bearer {KEY}"


async def test_without_any_key_no_authorization_header_is_sent(
    server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    server.push("a", "b")
    async with OpenAIProvider("local-model", base_url=server.base_url) as adapter:
        await adapter.complete(llm_request())
        await collect(adapter.stream(main_request()))
    assert [r.headers.get("authorization") for r in server.requests] == [None, None]


async def test_the_key_defaults_to_openai_api_key(
    server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-the-environment-01")
    server.push("a")
    async with OpenAIProvider("m", base_url=server.base_url) as adapter:
        await adapter.complete(llm_request())
    assert server.requests[0].headers["authorization"] == "Bearer sk-from-the-environment-01"


@pytest.mark.parametrize(
    ("response_format", "expected"),
    [
        (None, None),
        (ResponseFormat(type="text"), None),
        (ResponseFormat(type="json"), {"type": "json_object"}),
        (
            ResponseFormat(type="json_schema", schema={"type": "object"}, name="notes"),
            {"type": "json_schema", "json_schema": {"name": "notes", "schema": {"type": "object"}}},
        ),
        (
            ResponseFormat(
                type="json_schema", schema={"type": "object"}, name="my notes.v1", strict=True
            ),
            {
                "type": "json_schema",
                "json_schema": {
                    "name": "my_notes_v1",
                    "schema": {"type": "object"},
                    "strict": True,
                },
            },
        ),
        (ResponseFormat(type="json_schema"), {"type": "json_object"}),
    ],
)
async def test_response_format_on_the_wire(
    server: FakeOpenAIServer,
    provider: OpenAIProvider,
    response_format: ResponseFormat | None,
    expected: dict[str, Any] | None,
) -> None:
    server.push("{}")
    await provider.complete(llm_request(response_format=response_format))
    assert body(server).get("response_format") == expected


@pytest.mark.parametrize(
    ("raw", "normalised"),
    [
        ("stop", "stop"),
        ("length", "length"),
        ("content_filter", "content_filter"),
        ("tool_calls", "stop"),
        ("eos_token", "stop"),
        ("abort", "error"),
    ],
)
async def test_finish_reasons_are_normalised_and_the_raw_value_kept(
    server: FakeOpenAIServer, provider: OpenAIProvider, raw: str, normalised: str
) -> None:
    server.push(Reply(text="abc", finish_reason=raw), Reply(text="abc", finish_reason=raw))
    response = await provider.complete(llm_request())
    _, done = await collect(provider.stream(main_request()))
    assert (response.finish_reason, response.raw_finish_reason) == (normalised, raw)
    assert (done.finish_reason, done.raw_finish_reason) == (normalised, raw)


async def test_a_refusal_is_a_content_filter_finish(
    server: FakeOpenAIServer, provider: OpenAIProvider
) -> None:
    refusal = "I can't help with that."
    server.push(Reply(refusal=refusal), Reply(refusal=refusal))
    response = await provider.complete(llm_request())
    deltas, done = await collect(provider.stream(main_request()))
    assert (response.text, response.finish_reason, response.raw_finish_reason) == (
        refusal,
        "content_filter",
        "refusal",
    )
    assert "".join(deltas) == done.text == refusal
    assert (done.finish_reason, done.raw_finish_reason) == ("content_filter", "refusal")


async def test_a_reply_without_choices_is_a_provider_error(
    server: FakeOpenAIServer, provider: OpenAIProvider
) -> None:
    empty = '{"id": "x", "object": "chat.completion", "model": "m", "choices": []}'
    server.push(FakeOpenAIServer.Error(200, raw_body=empty))  # a 200 with a body as given
    with pytest.raises(ProviderError) as caught:
        await provider.complete(llm_request())
    assert caught.value.code == "provider_error"


# -- the main LLM: streaming -----------------------------------------------------------------


async def test_stream_yields_deltas_then_the_done_item_with_usage(
    server: FakeOpenAIServer, provider: OpenAIProvider
) -> None:
    server.push(Reply(text="Once upon a time, a dragon slept.", chunk_size=10))
    deltas, done = await collect(provider.stream(main_request("tell me")))

    assert deltas == ["Once upon ", "a time, a ", "dragon sle", "pt."]
    assert done == MainLlmDone(
        text="Once upon a time, a dragon slept.",
        finish_reason="stop",
        raw_finish_reason="stop",
        usage=Usage(input_tokens=6, output_tokens=9, total_tokens=15),
    )
    sent = body(server)
    assert sent["stream"] is True
    assert sent["stream_options"] == {"include_usage": True}
    assert sent["model"] == "gpt-test"
    assert sent["messages"] == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "tell me"},
    ]


async def test_stream_usage_can_be_turned_off(server: FakeOpenAIServer) -> None:
    server.push("hi")
    async with adapter_for(server.base_url, stream_usage=False) as adapter:
        _, done = await collect(adapter.stream(main_request()))
    assert "stream_options" not in body(server)
    assert done.usage is None


async def test_main_llm_params_pass_through(
    server: FakeOpenAIServer, provider: OpenAIProvider
) -> None:
    server.push("ok")
    params: dict[str, Any] = {
        "provider": "openai",  # the host's own routing key: ignored
        "model": "gpt-other",
        "temperature": 0.7,
        "maxTokens": 99,
        "topK": 5,
        "stop": ["\n\n"],
        "seed": None,  # left to the provider
        "reasoningEffort": "low",
    }
    await collect(provider.stream(main_request(**params)))
    sent = body(server)
    assert sent["model"] == "gpt-other"
    assert (sent["temperature"], sent["max_tokens"], sent["top_k"]) == (0.7, 99, 5)
    assert sent["stop"] == ["\n\n"]
    assert sent["reasoning_effort"] == "low"
    assert "seed" not in sent
    assert "provider" not in sent


async def test_unknown_main_llm_params_are_refused_before_any_request(
    server: FakeOpenAIServer, provider: OpenAIProvider
) -> None:
    with pytest.raises(ProviderError) as caught:
        await collect(provider.stream(main_request(temprature=0.2, model="m")))
    assert caught.value.code == "bad_request"
    assert "temprature" in caught.value.message
    assert not caught.value.retryable
    with pytest.raises(ProviderError, match="model name"):
        await collect(provider.stream(main_request(model=3)))
    assert server.requests == []


async def test_default_params_apply_under_the_calls_own(server: FakeOpenAIServer) -> None:
    server.push("a", "b")
    defaults = {"temperature": 0.1, "maxOutputTokens": 50, "model": "gpt-default"}
    async with adapter_for(server.base_url, default_params=defaults) as adapter:
        await collect(adapter.stream(main_request(temperature=0.9)))
        await adapter.complete(llm_request(samplers=Samplers(top_p=0.5)))
    main, aux = body(server, 0), body(server, 1)
    assert (main["model"], main["temperature"], main["max_tokens"]) == ("gpt-default", 0.9, 50)
    assert (aux["model"], aux["temperature"], aux["top_p"]) == ("aux-model", 0.1, 0.5)


def test_configuration_mistakes_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="temprature"):
        OpenAIProvider("m", api_key=KEY, default_params={"temprature": 1})
    with pytest.raises(ConfigError, match="model"):
        OpenAIProvider("", api_key=KEY)
    client = openai.AsyncOpenAI(api_key=KEY, base_url="http://127.0.0.1:9/v1")
    with pytest.raises(ConfigError, match="base_url"):
        OpenAIProvider("m", client=client, base_url="http://127.0.0.1:9/v1")


async def test_a_given_client_is_used_without_sdk_retries_and_left_open(
    server: FakeOpenAIServer,
) -> None:
    server.push("hi")
    client = openai.AsyncOpenAI(api_key=KEY, base_url=server.base_url, max_retries=5)
    async with OpenAIProvider("m", client=client) as adapter:
        assert adapter.client.max_retries == 0
        assert (await adapter.complete(llm_request())).text == "hi"
    assert not client.is_closed()
    await client.close()


async def test_a_stream_that_ends_without_a_finish_reason_is_unavailable(
    server: FakeOpenAIServer, provider: OpenAIProvider
) -> None:
    server.push(Reply(text="abcdefgh", chunk_size=4, cut_after=1, cut_cleanly=True))
    deltas: list[str] = []
    with pytest.raises(ProviderUnavailable) as caught:
        await collect(provider.stream(main_request()), deltas)
    assert deltas == ["abcd"]
    assert caught.value.retryable
    assert caught.value.details == {"receivedChars": 4}


# -- capabilities and the developer role -------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "developer"),
    [
        ("o1", True),
        ("o3-mini", True),
        ("o4-mini-2025-04-16", True),
        ("gpt-4.1-mini", True),
        ("gpt-4.5-preview", True),
        ("gpt-5", True),
        ("gpt-5.1-codex", True),
        ("openai/o3", True),
        ("o1-mini", False),
        ("o1-preview", False),
        ("gpt-4o", False),
        ("gpt-4o-mini", False),
        ("gpt-3.5-turbo", False),
        ("llama3.1:8b", False),
        ("omni-moderation-latest", False),
    ],
)
def test_the_developer_role_rule(model: str, developer: bool) -> None:
    assert supports_developer_role(model) is developer


def test_default_capabilities_depend_on_the_endpoint() -> None:
    assert default_capabilities("o3", None, None) == ProviderCapabilities(
        structured_output="json_schema_strict", developer_role=True
    )
    assert default_capabilities("o3", "https://api.openai.com/v1", None).developer_role
    local = default_capabilities("o3", "http://localhost:11434/v1", None)
    assert local == ProviderCapabilities(structured_output="json_schema", developer_role=False)
    assert default_capabilities("llama3", "http://localhost:8000/v1", True).developer_role
    explicit = ProviderCapabilities(structured_output="json_object")
    adapter = OpenAIProvider(
        "m", base_url="http://127.0.0.1:9/v1", api_key=KEY, capabilities=explicit
    )
    assert adapter.capabilities is explicit


@pytest.mark.parametrize("developer_role", [True, False])
async def test_developer_messages_follow_the_capability(
    server: FakeOpenAIServer, developer_role: bool
) -> None:
    server.push("ok")
    messages = (
        ProviderMessage(role="developer", content="notes"),
        ProviderMessage(role="user", content="hi"),
        ProviderMessage(role="assistant", content="hello"),
    )
    async with adapter_for(server.base_url, developer_role=developer_role) as adapter:
        await adapter.complete(LlmRequest(messages=messages, model="aux"))
    roles = [m["role"] for m in body(server)["messages"]]
    assert roles == ["developer" if developer_role else "system", "user", "assistant"]


async def test_an_unknown_role_is_a_bad_request(
    server: FakeOpenAIServer, provider: OpenAIProvider
) -> None:
    odd = LlmRequest(messages=(ProviderMessage(role="tool", content="x"),), model="m")
    with pytest.raises(ProviderError) as caught:
        await provider.complete(odd)
    assert caught.value.code == "bad_request"
    assert server.requests == []


def test_repr_names_the_model_and_endpoint_only() -> None:
    adapter = OpenAIProvider("gpt-test", base_url="http://127.0.0.1:9/v1", api_key=KEY)
    assert repr(adapter) == "OpenAIProvider(model='gpt-test', base_url='http://127.0.0.1:9/v1/')"
    assert KEY not in repr(adapter)
