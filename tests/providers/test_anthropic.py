"""opsrun.providers.anthropic against FakeAnthropicServer: both ports, mapping, JSON, errors."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any, TypeAlias

import anyio
import pytest
from anthropic import AsyncAnthropic, DefaultAsyncHttpxClient

from opsrun.errors import (
    ConfigError,
    ProviderError,
    ProviderTimeout,
    ProviderUnavailable,
    RateLimited,
    ResponseFormatRejected,
)
from opsrun.model import Samplers, Trigger, Usage
from opsrun.ports import (
    LlmProvider,
    LlmRequest,
    MainLlm,
    MainLlmDone,
    MainLlmRequest,
    ProviderMessage,
    ResponseFormat,
)
from opsrun.providers.anthropic import AnthropicProvider
from opsrun.testing import FakeAnthropicServer

pytestmark = pytest.mark.anyio

Reply: TypeAlias = FakeAnthropicServer.Reply
Error: TypeAlias = FakeAnthropicServer.Error
KEY = "sk-ant-provider-key-0001"
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"mood": {"type": "string"}},
    "required": ["mood"],
}


def _conformance(provider: AnthropicProvider) -> tuple[MainLlm, LlmProvider]:
    return provider, provider  # mypy checks that one object serves both ports


@pytest.fixture
def server() -> Iterator[FakeAnthropicServer]:
    with FakeAnthropicServer(default=None) as fake:
        yield fake


def cheap_client(server: FakeAnthropicServer, api_key: str = KEY) -> AsyncAnthropic:
    """A client for the plain-HTTP fake server: no TLS context to build, so setup is quick."""
    http = DefaultAsyncHttpxClient(verify=False)
    return AsyncAnthropic(api_key=api_key, base_url=server.base_url, http_client=http)


@pytest.fixture
async def provider(server: FakeAnthropicServer) -> AsyncIterator[AnthropicProvider]:
    async with cheap_client(server) as client:
        yield AnthropicProvider("claude-test", client=client)


def msgs(*pairs: tuple[str, str]) -> tuple[ProviderMessage, ...]:
    return tuple(ProviderMessage(role, content) for role, content in pairs)


def main_request(*pairs: tuple[str, str], params: dict[str, Any] | None = None) -> MainLlmRequest:
    return MainLlmRequest(
        messages=msgs(*pairs) or msgs(("user", "hi")),
        run_id="run_1",
        chat_id="c",
        user_message_id="m1",
        trigger=Trigger.GENERATE,
        params=params or {},
    )


def llm_request(*pairs: tuple[str, str], **kw: Any) -> LlmRequest:
    return LlmRequest(messages=msgs(*pairs) or msgs(("user", "hi")), model="claude-aux", **kw)


async def collect(provider: AnthropicProvider, request: MainLlmRequest) -> list[str | MainLlmDone]:
    return [item async for item in provider.stream(request)]


async def gather(stream: AsyncIterator[str | MainLlmDone], into: list[str | MainLlmDone]) -> None:
    """Append what ``stream`` yields to ``into`` (kept when the stream then fails)."""
    async for item in stream:
        into.append(item)  # noqa: PERF401 - the items so far must survive the exception


def body(server: FakeAnthropicServer, index: int = -1) -> dict[str, Any]:
    recorded = server.requests[index].body
    assert isinstance(recorded, dict)
    return recorded


# -- the main LLM: streaming ---------------------------------------------------------------


async def test_stream_yields_deltas_then_done_with_usage(
    server: FakeAnthropicServer, provider: AnthropicProvider
) -> None:
    reply = Reply(text="Hello, traveller!", chunk_size=5, input_tokens=12, output_tokens=4)
    server.push(reply)
    items = await collect(provider, main_request(("user", "hi")))
    assert items[:-1] == ["Hello", ", tra", "velle", "r!"]
    assert items[-1] == MainLlmDone(
        text="Hello, traveller!",
        finish_reason="stop",
        raw_finish_reason="end_turn",
        usage=Usage(input_tokens=12, output_tokens=4, total_tokens=16),
    )
    sent = body(server)
    assert sent["stream"] is True
    assert sent["model"] == "claude-test"
    assert sent["max_tokens"] == 1024
    assert server.requests[-1].headers["authorization"] == f"Bearer {KEY}"


async def test_cached_input_tokens_count_as_input(
    server: FakeAnthropicServer, provider: AnthropicProvider
) -> None:
    server.push(Reply(text="ok", input_tokens=3, cache_read_input_tokens=100, output_tokens=1))
    done = (await collect(provider, main_request()))[-1]
    assert isinstance(done, MainLlmDone)
    assert done.usage == Usage(input_tokens=103, output_tokens=1, total_tokens=104)


STOP_REASONS = [
    ("end_turn", "stop"),
    ("stop_sequence", "stop"),
    ("max_tokens", "length"),
    ("model_context_window_exceeded", "length"),
    ("refusal", "content_filter"),
    ("tool_use", "stop"),
    ("something_new", "stop"),
]


@pytest.mark.parametrize(("raw", "normalised"), STOP_REASONS)
async def test_stop_reasons_are_normalised_and_kept_when_streamed(
    server: FakeAnthropicServer, provider: AnthropicProvider, raw: str, normalised: str
) -> None:
    server.push(Reply(text="partial", stop_reason=raw))
    done = (await collect(provider, main_request()))[-1]
    assert isinstance(done, MainLlmDone)
    assert (done.finish_reason, done.raw_finish_reason) == (normalised, raw)


@pytest.mark.parametrize(("raw", "normalised"), STOP_REASONS)
async def test_stop_reasons_are_normalised_and_kept_when_not_streamed(
    server: FakeAnthropicServer, provider: AnthropicProvider, raw: str, normalised: str
) -> None:
    server.push(Reply(text="partial", stop_reason=raw))
    response = await provider.complete(llm_request())
    assert (response.finish_reason, response.raw_finish_reason) == (normalised, raw)


async def test_main_params_choose_model_tokens_samplers_and_stops(
    server: FakeAnthropicServer, provider: AnthropicProvider
) -> None:
    server.push("ok")
    params = {
        "provider": "anthropic",  # not the adapter's: ignored
        "model": "claude-other",
        "maxTokens": 99,
        "temperature": 0.3,
        "top_k": 5,
        "stop": "END",
    }
    await collect(provider, main_request(("user", "hi"), params=params))
    sent = body(server)
    assert (sent["model"], sent["max_tokens"], sent["stop_sequences"]) == (
        "claude-other",
        99,
        ["END"],
    )
    assert (sent["temperature"], sent["top_k"]) == (0.3, 5)
    assert "provider" not in sent


@pytest.mark.parametrize(
    "params",
    [{"model": ""}, {"max_tokens": 0}, {"max_tokens": True}, {"temperature": "hot"}, {"stop": [1]}],
)
async def test_invalid_main_params_are_bad_requests_without_a_call(
    server: FakeAnthropicServer, provider: AnthropicProvider, params: dict[str, Any]
) -> None:
    with pytest.raises(ProviderError) as caught:
        await collect(provider, main_request(params=params))
    assert caught.value.code == "bad_request"
    assert server.requests == []


# -- system and role mapping ---------------------------------------------------------------


def text_turns(sent: dict[str, Any]) -> list[tuple[str, list[str]]]:
    return [(m["role"], [b["text"] for b in m["content"]]) for m in sent["messages"]]


async def test_leading_system_and_developer_messages_become_the_system_prompt(
    server: FakeAnthropicServer, provider: AnthropicProvider
) -> None:
    server.push("ok")
    conversation = (
        ("system", "You are the narrator."),
        ("developer", "Answer in English."),
        ("user", "hi"),
    )
    await collect(provider, main_request(*conversation))
    sent = body(server)
    assert sent["system"] == "You are the narrator.\n\nAnswer in English."
    assert text_turns(sent) == [("user", ["hi"])]


async def test_a_system_message_mid_conversation_keeps_its_place_as_a_prefixed_user_turn(
    server: FakeAnthropicServer, provider: AnthropicProvider
) -> None:
    server.push("ok")
    conversation = (
        ("system", "Narrate."),
        ("user", "open the door"),
        ("assistant", "It is locked."),
        ("developer", "The key is under the mat."),
        ("user", "look around"),
        ("system", "Be brief."),
    )
    await collect(provider, main_request(*conversation))
    sent = body(server)
    assert sent["system"] == "Narrate."
    assert text_turns(sent) == [
        ("user", ["open the door"]),
        ("assistant", ["It is locked."]),
        (
            "user",
            ["[system]\nThe key is under the mat.", "look around", "[system]\nBe brief."],
        ),
    ]


async def test_mid_conversation_system_messages_can_join_the_system_prompt(
    server: FakeAnthropicServer,
) -> None:
    server.push("ok")
    conversation = (
        ("system", "Narrate."),
        ("user", "open the door"),
        ("developer", "The key is under the mat."),
        ("assistant", "It is locked."),
    )
    async with AnthropicProvider(
        "claude-test", api_key=KEY, base_url=server.base_url, system_in_conversation="system"
    ) as provider:
        await collect(provider, main_request(*conversation))
    sent = body(server)
    assert sent["system"] == "Narrate.\n\nThe key is under the mat."
    assert text_turns(sent) == [("user", ["open the door"]), ("assistant", ["It is locked."])]


async def test_turns_alternate_start_with_a_user_and_skip_empty_messages(
    server: FakeAnthropicServer, provider: AnthropicProvider
) -> None:
    server.push("ok")
    conversation = (
        ("assistant", "Welcome, traveller."),
        ("assistant", "The inn is warm."),
        ("user", "  "),
        ("user", "I sit down."),
        ("user", "I order tea."),
        ("assistant", "The innkeeper nods.  \n"),
    )
    await collect(provider, main_request(*conversation))
    assert text_turns(body(server)) == [
        ("user", ["(conversation start)"]),
        ("assistant", ["Welcome, traveller.", "The inn is warm."]),
        ("user", ["I sit down.", "I order tea."]),
        ("assistant", ["The innkeeper nods."]),
    ]


async def test_a_prompt_of_system_messages_only_gets_an_opening_user_turn(
    server: FakeAnthropicServer, provider: AnthropicProvider
) -> None:
    server.push("ok")
    await collect(provider, main_request(("system", "Say hello.")))
    sent = body(server)
    assert sent["system"] == "Say hello."
    assert text_turns(sent) == [("user", ["(conversation start)"])]


async def test_an_unknown_role_is_a_bad_request(
    server: FakeAnthropicServer, provider: AnthropicProvider
) -> None:
    with pytest.raises(ProviderError) as caught:
        await provider.complete(llm_request(("user", "hi"), ("tool", "42")))
    assert caught.value.code == "bad_request"
    assert server.requests == []


# -- the llm kind's provider: one completion -----------------------------------------------


async def test_complete_returns_text_usage_model_and_request_id(
    server: FakeAnthropicServer, provider: AnthropicProvider
) -> None:
    server.push(Reply(text="- the door is locked", input_tokens=20, output_tokens=6))
    response = await provider.complete(
        llm_request(
            ("system", "Take notes."),
            ("user", "open the door"),
            samplers=Samplers(temperature=0.2, top_p=0.9, seed=7, presence_penalty=1.0),
            max_output_tokens=64,
            stop=("END",),
        )
    )
    assert response.text == "- the door is locked"
    assert (response.finish_reason, response.raw_finish_reason) == ("stop", "end_turn")
    assert response.usage == Usage(input_tokens=20, output_tokens=6, total_tokens=26)
    assert (response.model, response.request_id) == ("claude-aux", "req_fake_1")
    sent = body(server)
    assert "stream" not in sent
    assert (sent["model"], sent["max_tokens"], sent["stop_sequences"]) == (
        "claude-aux",
        64,
        ["END"],
    )
    assert sent["system"] == "Take notes."
    assert (sent["temperature"], sent["top_p"]) == (0.2, 0.9)
    # The Messages API has no penalties and no seed: they are not sent.
    assert not {"seed", "presence_penalty", "frequency_penalty"} & set(sent)


async def test_default_params_reach_every_call_and_requests_win(
    server: FakeAnthropicServer,
) -> None:
    server.push("a", "b")
    defaults = {"temperature": 1.0, "metadata": {"user_id": "u-1"}, "stop_sequences": ["##"]}
    async with AnthropicProvider(
        "claude-test", api_key=KEY, base_url=server.base_url, default_params=defaults
    ) as provider:
        await provider.complete(llm_request(samplers=Samplers(temperature=0.1)))
        await collect(provider, main_request())
    first, second = body(server, 0), body(server, 1)
    assert (first["temperature"], first["metadata"], first["stop_sequences"]) == (
        0.1,
        {"user_id": "u-1"},
        ["##"],
    )
    assert (second["temperature"], second["stop_sequences"]) == (1.0, ["##"])


@pytest.mark.parametrize("key", ["model", "max_tokens", "messages", "system", "stream", "tools"])
def test_default_params_may_not_set_what_the_adapter_sets(key: str) -> None:
    with pytest.raises(ConfigError):
        AnthropicProvider("claude-test", api_key=KEY, default_params={key: 1})


def test_constructor_arguments_are_checked() -> None:
    client = AsyncAnthropic(api_key=KEY)
    with pytest.raises(ConfigError):
        AnthropicProvider("claude-test", client=client, api_key=KEY)
    with pytest.raises(ConfigError):
        AnthropicProvider("")
    with pytest.raises(ConfigError):
        AnthropicProvider("claude-test", api_key=KEY, max_tokens=0)
    with pytest.raises(ConfigError):
        AnthropicProvider("claude-test", api_key=KEY, structured_output="xml")  # type: ignore[arg-type]


async def test_a_client_passed_in_is_used_without_retries_and_left_open(
    server: FakeAnthropicServer,
) -> None:
    server.push(Error(529, "busy"), "fine")
    client = AsyncAnthropic(api_key=KEY, base_url=server.base_url, max_retries=5)
    provider = AnthropicProvider("claude-test", client=client)
    with pytest.raises(ProviderUnavailable):
        await provider.complete(llm_request())
    assert len(server.requests) == 1  # the SDK did not retry: opsrun decides
    await provider.aclose()
    assert not client.is_closed()
    assert (await provider.complete(llm_request())).text == "fine"
    await client.close()


# -- JSON output ---------------------------------------------------------------------------


def test_capabilities_declare_the_configured_level() -> None:
    default = AnthropicProvider("claude-test", api_key=KEY)
    strict = AnthropicProvider("claude-test", api_key=KEY, structured_output="json_schema_strict")
    assert default.capabilities.structured_output == "json_schema"
    assert strict.capabilities.structured_output == "json_schema_strict"
    assert not default.capabilities.developer_role


async def test_a_json_schema_is_asked_for_through_one_forced_tool(
    server: FakeAnthropicServer, provider: AnthropicProvider
) -> None:
    server.push('{"mood": "calm"}')
    fmt = ResponseFormat(type="json_schema", schema=SCHEMA, name="mood check")
    response = await provider.complete(llm_request(("user", "how?"), response_format=fmt))
    assert json.loads(response.text) == {"mood": "calm"}
    assert (response.finish_reason, response.raw_finish_reason) == ("stop", "tool_use")
    sent = body(server)
    assert sent["tools"] == [
        {
            "name": "mood_check",
            "description": "Give your reply as this tool's input; it must match the input schema.",
            "input_schema": SCHEMA,
        }
    ]
    assert sent["tool_choice"] == {
        "type": "tool",
        "name": "mood_check",
        "disable_parallel_tool_use": True,
    }
    assert "system" not in sent


async def test_a_strict_schema_is_the_api_output_format(
    server: FakeAnthropicServer, provider: AnthropicProvider
) -> None:
    server.push('{"mood": "calm"}')
    fmt = ResponseFormat(type="json_schema", schema=SCHEMA, name="mood", strict=True)
    response = await provider.complete(llm_request(response_format=fmt))
    assert response.text == '{"mood": "calm"}'
    sent = body(server)
    assert sent["output_config"] == {"format": {"type": "json_schema", "schema": SCHEMA}}
    assert "tools" not in sent


async def test_json_mode_is_asked_for_by_instruction(
    server: FakeAnthropicServer, provider: AnthropicProvider
) -> None:
    server.push("[1, 2]")
    response = await provider.complete(
        llm_request(
            ("system", "Count."), ("user", "go"), response_format=ResponseFormat(type="json")
        )
    )
    assert response.text == "[1, 2]"
    sent = body(server)
    assert sent["system"] == (
        "Count.\n\nReply with one JSON value and nothing else: no prose before or after it, "
        "no markdown code fence."
    )
    assert "tools" not in sent


async def test_a_schema_that_is_not_an_object_is_rejected_without_a_call(
    server: FakeAnthropicServer, provider: AnthropicProvider
) -> None:
    fmt = ResponseFormat(type="json_schema", schema={"type": "array"}, name="list")
    with pytest.raises(ResponseFormatRejected):
        await provider.complete(llm_request(response_format=fmt))
    assert server.requests == []


@pytest.mark.parametrize(
    "message",
    [
        "tools.0.custom.input_schema: JSON schema is invalid",
        "output_config.format.schema: unsupported keyword 'patternProperties'",
    ],
)
async def test_a_schema_the_api_refuses_is_response_format_rejected(
    server: FakeAnthropicServer, provider: AnthropicProvider, message: str
) -> None:
    server.push(Error(400, message))
    strict = "output_config" in message
    fmt = ResponseFormat(type="json_schema", schema=SCHEMA, name="mood", strict=strict)
    with pytest.raises(ResponseFormatRejected) as caught:
        await provider.complete(llm_request(response_format=fmt))
    assert caught.value.details["status"] == 400


async def test_the_same_400_without_a_format_is_a_bad_request(
    server: FakeAnthropicServer, provider: AnthropicProvider
) -> None:
    server.push(Error(400, "tools.0.custom.input_schema: JSON schema is invalid"))
    with pytest.raises(ProviderError) as caught:
        await provider.complete(llm_request())
    assert not isinstance(caught.value, ResponseFormatRejected)
    assert caught.value.code == "bad_request"


# -- errors --------------------------------------------------------------------------------

ERRORS: list[tuple[Error, type[ProviderError], str, bool]] = [
    (Error(429, "slow down"), RateLimited, "rate_limited", True),
    (Error(529, "Overloaded"), ProviderUnavailable, "provider_unavailable", True),
    (Error(500, "Internal server error"), ProviderUnavailable, "provider_unavailable", True),
    (
        Error(503, "unavailable", type="api_error"),
        ProviderUnavailable,
        "provider_unavailable",
        True,
    ),
    (Error(504, "too slow"), ProviderTimeout, "timeout", True),
    (Error(401, "invalid x-api-key"), ProviderError, "provider_auth", False),
    (Error(403, "not allowed for this key"), ProviderError, "provider_auth", False),
    (
        Error(400, "prompt is too long: 210000 tokens > 200000 maximum"),
        ProviderError,
        "context_length_exceeded",
        False,
    ),
    (
        Error(400, "Output blocked by content filtering policy"),
        ProviderError,
        "content_filter",
        False,
    ),
    (Error(400, "messages: roles must alternate"), ProviderError, "bad_request", False),
    (Error(404, "model: claude-nope"), ProviderError, "bad_request", False),
    (Error(402, "credit balance is too low"), ProviderError, "bad_request", False),
    (Error(413, "request too large"), ProviderError, "bad_request", False),
]


@pytest.mark.parametrize(("scripted", "kind", "code", "retryable"), ERRORS)
@pytest.mark.parametrize("streamed", [False, True], ids=["complete", "stream"])
async def test_api_errors_map_to_typed_errors(
    server: FakeAnthropicServer,
    provider: AnthropicProvider,
    scripted: Error,
    kind: type[ProviderError],
    code: str,
    retryable: bool,
    streamed: bool,
) -> None:
    server.push(scripted)
    call = collect(provider, main_request()) if streamed else provider.complete(llm_request())
    with pytest.raises(ProviderError) as caught:
        await call
    error = caught.value
    assert type(error) is kind
    assert (error.code, error.retryable) == (code, retryable)
    assert error.details["status"] == scripted.status
    assert error.details["requestId"] == "req_fake_1"
    assert scripted.message in error.message


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({"retry-after": "7"}, 7.0),
        ({"retry-after": "1.5"}, 1.5),
        ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),
        ({}, None),
        ({"retry-after": "soon"}, None),
    ],
)
async def test_rate_limits_carry_retry_after(
    server: FakeAnthropicServer,
    provider: AnthropicProvider,
    headers: dict[str, str],
    seconds: float | None,
) -> None:
    server.push(Error(429, "slow down", headers=headers))
    with pytest.raises(RateLimited) as caught:
        await provider.complete(llm_request())
    assert caught.value.retry_after == seconds


async def test_retry_after_as_an_http_date(
    server: FakeAnthropicServer, provider: AnthropicProvider
) -> None:
    when = datetime.now(UTC) + timedelta(hours=1)
    server.push(
        Error(429, "slow down", headers={"retry-after": format_datetime(when, usegmt=True)})
    )
    with pytest.raises(RateLimited) as caught:
        await provider.complete(llm_request())
    assert caught.value.retry_after is not None
    assert 3000 < caught.value.retry_after <= 3600


async def test_a_spent_budget_is_rate_limited_but_not_retryable(
    server: FakeAnthropicServer, provider: AnthropicProvider
) -> None:
    server.push(Error(429, "spend limit reached", error_code="enforced_spend_limit_reached"))
    with pytest.raises(RateLimited) as caught:
        await provider.complete(llm_request())
    assert caught.value.code == "rate_limited"
    assert not caught.value.retryable
    assert caught.value.details["errorCode"] == "enforced_spend_limit_reached"


async def test_an_error_event_mid_stream_is_mapped(
    server: FakeAnthropicServer, provider: AnthropicProvider
) -> None:
    overloaded = Error(200, "Overloaded", type="overloaded_error")
    server.push(Reply(text="abcdefgh", chunk_size=2, cut_after=2, stream_error=overloaded))
    seen: list[str | MainLlmDone] = []
    with pytest.raises(ProviderUnavailable) as caught:
        await gather(provider.stream(main_request()), seen)
    assert seen == ["ab", "cd"]
    assert caught.value.details["type"] == "overloaded_error"
    assert "status" in caught.value.details
    assert "in the stream" in caught.value.message


async def test_a_cut_stream_is_provider_unavailable_after_the_text_so_far(
    server: FakeAnthropicServer, provider: AnthropicProvider
) -> None:
    server.push(Reply(text="abcdefgh", chunk_size=3, cut_after=1))
    seen: list[str | MainLlmDone] = []
    with pytest.raises(ProviderUnavailable) as caught:
        await gather(provider.stream(main_request()), seen)
    assert seen == ["abc"]
    assert caught.value.retryable


async def test_a_stream_that_ends_before_message_stop_is_provider_unavailable(
    server: FakeAnthropicServer, provider: AnthropicProvider
) -> None:
    server.push(Reply(text="abcdefgh", chunk_size=3, cut_after=2, cut_cleanly=True))
    seen: list[str | MainLlmDone] = []
    with pytest.raises(ProviderUnavailable, match="message_stop"):
        await gather(provider.stream(main_request()), seen)
    assert seen == ["abc", "def"]


async def test_a_refused_connection_is_provider_unavailable() -> None:
    with FakeAnthropicServer() as gone:
        base_url = gone.base_url
    async with AnthropicProvider("claude-test", api_key=KEY, base_url=base_url) as provider:
        with pytest.raises(ProviderUnavailable):
            await provider.complete(llm_request())
        with pytest.raises(ProviderUnavailable):
            await collect(provider, main_request())


async def test_a_slow_answer_is_a_provider_timeout(
    server: FakeAnthropicServer, provider: AnthropicProvider
) -> None:
    server.push(Reply(text="late", delay=30))
    with pytest.raises(ProviderTimeout):
        await provider.complete(llm_request(timeout=0.2))


async def test_a_stalled_stream_is_a_provider_timeout(server: FakeAnthropicServer) -> None:
    server.push(Reply(text="abcdef", chunk_size=2, chunk_delay=30))
    async with AnthropicProvider(
        "claude-test", api_key=KEY, base_url=server.base_url, timeout=0.2
    ) as provider:
        with pytest.raises(ProviderTimeout):
            await collect(provider, main_request())


# -- cancellation --------------------------------------------------------------------------


async def test_cancelling_the_consumer_closes_the_http_stream(
    server: FakeAnthropicServer, provider: AnthropicProvider
) -> None:
    server.push(Reply(text="x" * 500, chunk_size=1, chunk_delay=0.02))
    first = anyio.Event()

    async def consume() -> None:
        async for _ in provider.stream(main_request()):
            first.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(consume)
        await first.wait()
        tg.cancel_scope.cancel()
    assert await anyio.to_thread.run_sync(server.wait_closed_early)


async def test_closing_the_iterator_early_closes_the_http_stream(
    server: FakeAnthropicServer, provider: AnthropicProvider
) -> None:
    server.push(Reply(text="x" * 500, chunk_size=1, chunk_delay=0.02))
    stream = provider.stream(main_request())
    assert await anext(stream) == "x"
    aclose = getattr(stream, "aclose")  # noqa: B009 - the port types it as an AsyncIterator
    await aclose()
    assert await anyio.to_thread.run_sync(server.wait_closed_early)


# -- credentials ---------------------------------------------------------------------------

SECRET = "sk-ant-request-credential-7777"


async def test_the_request_credential_is_the_key_of_that_call_only(
    server: FakeAnthropicServer, provider: AnthropicProvider
) -> None:
    server.push("one", "two")
    await provider.complete(llm_request(credential=SECRET))
    await provider.complete(llm_request())
    with_credential, without = server.requests
    assert with_credential.headers["authorization"] == f"Bearer {SECRET}"
    assert without.headers["authorization"] == f"Bearer {KEY}"
    assert SECRET not in json.dumps(with_credential.body)
    assert SECRET not in repr(provider)
    assert KEY not in repr(provider)
    assert SECRET not in repr(vars(provider) if hasattr(provider, "__dict__") else provider)
    assert SECRET not in repr(llm_request(credential=SECRET))


async def test_a_credential_never_shows_in_an_error(
    server: FakeAnthropicServer, provider: AnthropicProvider
) -> None:
    server.push(Error(401, f"invalid x-api-key: {SECRET}"), Error(401, f"invalid x-api-key: {KEY}"))
    with pytest.raises(ProviderError) as first:
        await provider.complete(llm_request(credential=SECRET))
    with pytest.raises(ProviderError) as second:
        await collect(provider, main_request())
    for caught in (first, second):
        error = caught.value
        assert error.code == "provider_auth"
        text = json.dumps(error.to_dict()) + str(error) + repr(error)
        assert SECRET not in text
        assert KEY not in text
        assert "[REDACTED]" in error.message


async def test_key_shaped_strings_are_masked_in_errors_too(
    server: FakeAnthropicServer, provider: AnthropicProvider
) -> None:
    other = "sk-ant-api03-" + "Z" * 40
    server.push(Error(400, f"bad header: x-api-key {other}"))
    with pytest.raises(ProviderError) as caught:
        await provider.complete(llm_request())
    assert other not in caught.value.message


async def test_a_server_that_checks_the_key_refuses_a_wrong_one() -> None:
    with FakeAnthropicServer(["hello"], api_key=SECRET) as server:
        async with AnthropicProvider("claude-test", api_key=KEY, base_url=server.base_url) as p:
            with pytest.raises(ProviderError) as caught:
                await p.complete(llm_request())
            assert caught.value.code == "provider_auth"
            assert (await p.complete(llm_request(credential=SECRET))).text == "hello"
