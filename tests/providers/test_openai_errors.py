"""OpenAIProvider's errors: every HTTP failure, stream error, timeout and refusal, typed."""

from __future__ import annotations

import socket
import time
from collections.abc import AsyncIterator, Iterator
from email.utils import formatdate

import openai
import pytest
from _openai_support import KEY, adapter_for, collect, llm_request, main_request

from opsrun.errors import (
    ProviderError,
    ProviderTimeout,
    ProviderUnavailable,
    RateLimited,
    ResponseFormatRejected,
)
from opsrun.ports import ResponseFormat
from opsrun.providers._openai._errors import retry_after_seconds, translate
from opsrun.providers.openai import OpenAIProvider
from opsrun.testing import FakeOpenAIServer

pytestmark = pytest.mark.anyio

Error = FakeOpenAIServer.Error
Reply = FakeOpenAIServer.Reply
STRICT = ResponseFormat(type="json_schema", schema={"type": "object"}, name="notes", strict=True)


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(default=None) as fake:
        yield fake


@pytest.fixture
async def provider(server: FakeOpenAIServer) -> AsyncIterator[OpenAIProvider]:
    async with adapter_for(server.base_url) as adapter:
        yield adapter


async def both_calls(
    provider: OpenAIProvider, server: FakeOpenAIServer, reply: Error
) -> list[ProviderError]:
    """What ``complete`` and ``stream`` raise for the same scripted error."""
    server.push(reply, reply)
    raised: list[ProviderError] = []
    with pytest.raises(ProviderError) as first:
        await provider.complete(llm_request())
    raised.append(first.value)
    with pytest.raises(ProviderError) as second:
        await collect(provider.stream(main_request()))
    raised.append(second.value)
    return raised


STATUS_CASES = [
    (Error(400, "Invalid value for 'temperature'"), ProviderError, "bad_request", False),
    (
        Error(401, "Incorrect API key provided", code="invalid_api_key"),
        ProviderError,
        "provider_auth",
        False,
    ),
    (Error(403, "Project does not have access to model"), ProviderError, "provider_auth", False),
    (
        Error(404, "The model does not exist", code="model_not_found"),
        ProviderError,
        "bad_request",
        False,
    ),
    (Error(408, "Request timed out"), ProviderTimeout, "timeout", True),
    (Error(409, "Conflict"), ProviderUnavailable, "provider_unavailable", True),
    (Error(422, "Unprocessable"), ProviderError, "bad_request", False),
    (Error(429, "Rate limit reached"), RateLimited, "rate_limited", True),
    (
        Error(429, "You exceeded your quota", code="insufficient_quota"),
        RateLimited,
        "rate_limited",
        False,
    ),
    (Error(500, "The server had an error"), ProviderUnavailable, "provider_unavailable", True),
    (
        Error(502, raw_body="<html>502 Bad Gateway</html>"),
        ProviderUnavailable,
        "provider_unavailable",
        True,
    ),
    (
        Error(503, "The engine is currently overloaded"),
        ProviderUnavailable,
        "provider_unavailable",
        True,
    ),
    (
        Error(529, "Overloaded", type="overloaded_error"),
        ProviderUnavailable,
        "provider_unavailable",
        True,
    ),
    (
        Error(
            400,
            "This model's maximum context length is 8192 tokens",
            code="context_length_exceeded",
        ),
        ProviderError,
        "context_length_exceeded",
        False,
    ),
    (
        Error(
            400, "the request exceeds the available context size", type="exceed_context_size_error"
        ),
        ProviderError,
        "context_length_exceeded",
        False,
    ),
    (
        Error(
            400, "Your request was rejected by our safety system", code="content_policy_violation"
        ),
        ProviderError,
        "content_filter",
        False,
    ),
    (
        Error(400, "The prompt triggered the content management policy", code="content_filter"),
        ProviderError,
        "content_filter",
        False,
    ),
]


@pytest.mark.parametrize(
    ("reply", "kind", "code", "retryable"),
    STATUS_CASES,
    ids=[f"{c[0].status}-{c[2]}" for c in STATUS_CASES],
)
async def test_http_errors_map_to_typed_provider_errors(
    server: FakeOpenAIServer,
    provider: OpenAIProvider,
    reply: Error,
    kind: type[ProviderError],
    code: str,
    retryable: bool,
) -> None:
    for error in await both_calls(provider, server, reply):
        assert type(error) is kind
        assert (error.code, error.retryable) == (code, retryable)
        assert error.details["status"] == reply.status
        assert error.details["requestId"].startswith("req_fake_")
        assert f"HTTP {reply.status}" in error.message


async def test_the_message_says_what_the_provider_said(
    server: FakeOpenAIServer, provider: OpenAIProvider
) -> None:
    reply = Error(400, "Invalid 'messages[0].role'", param="messages[0].role", code="invalid_value")
    error = (await both_calls(provider, server, reply))[0]
    assert error.message == "the provider answered HTTP 400: Invalid 'messages[0].role'"
    assert error.details["param"] == "messages[0].role"
    assert error.details["code"] == "invalid_value"
    assert error.details["type"] == "invalid_request_error"


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"Retry-After": "7"}, 7.0),
        ({"Retry-After": "0.25"}, 0.25),
        ({"retry-after-ms": "1500", "Retry-After": "9"}, 1.5),
        ({"Retry-After": "soon"}, None),
        ({}, None),
    ],
)
async def test_rate_limits_carry_the_wait_the_provider_asked_for(
    server: FakeOpenAIServer,
    provider: OpenAIProvider,
    headers: dict[str, str],
    expected: float | None,
) -> None:
    for error in await both_calls(provider, server, Error(429, headers=headers)):
        assert isinstance(error, RateLimited)
        assert error.retry_after == expected


async def test_retry_after_as_an_http_date(
    server: FakeOpenAIServer, provider: OpenAIProvider
) -> None:
    when = formatdate(time.time() + 120, usegmt=True)
    for error in await both_calls(provider, server, Error(429, headers={"Retry-After": when})):
        assert isinstance(error, RateLimited)
        assert error.retry_after is not None
        assert 100 < error.retry_after <= 120


def test_retry_after_parsing() -> None:
    now = 1_700_000_000.0
    assert retry_after_seconds({"retry-after": formatdate(now + 30, usegmt=True)}, now=now) == 30
    assert retry_after_seconds({"retry-after": formatdate(now - 30, usegmt=True)}, now=now) == 0
    assert retry_after_seconds({"retry-after-ms": "-5", "retry-after": "2"}) == 2
    assert retry_after_seconds({"retry-after-ms": "nan"}) is None
    assert retry_after_seconds({"retry-after": "inf"}) is None
    assert retry_after_seconds({"retry-after": "-1"}) is None


# -- a refused response_format -----------------------------------------------------------------

REFUSALS = [
    Error(
        400,
        "Invalid schema for response_format 'notes': 'required' must list every property",
        code="invalid_json_schema",
        param="response_format",
    ),
    Error(400, "response_format is not supported by this model"),
    Error(
        400,
        "'messages' must contain the word 'json' in some form, to use 'response_format' of "
        "type 'json_object'.",
        param="messages",
    ),
    Error(422, "Unrecognized request argument: json_schema"),
    Error(500, "Structured outputs are not available for this model"),
]


@pytest.mark.parametrize("reply", REFUSALS, ids=lambda e: f"{e.status}-{e.message[:24]}")
async def test_a_refused_response_format_is_response_format_rejected(
    server: FakeOpenAIServer, provider: OpenAIProvider, reply: Error
) -> None:
    server.push(reply, reply)
    with pytest.raises(ResponseFormatRejected) as caught:
        await provider.complete(llm_request(response_format=STRICT))
    assert caught.value.code == "response_format_rejected"
    assert not caught.value.retryable
    # Without a response_format the same answer is an ordinary error.
    with pytest.raises(ProviderError) as plain:
        await provider.complete(llm_request())
    assert not isinstance(plain.value, ResponseFormatRejected)
    assert plain.value.code == ("provider_unavailable" if reply.status >= 500 else "bad_request")


async def test_other_errors_are_not_format_refusals(
    server: FakeOpenAIServer, provider: OpenAIProvider
) -> None:
    server.push(Error(429, "slow down"), Error(401, "bad key"), Error(400, "temperature too high"))
    for expected in ("rate_limited", "provider_auth", "bad_request"):
        with pytest.raises(ProviderError) as caught:
            await provider.complete(llm_request(response_format=STRICT))
        assert caught.value.code == expected


# -- time, connections, streams ------------------------------------------------------------------


async def test_the_request_timeout_bounds_a_completion(
    server: FakeOpenAIServer, provider: OpenAIProvider
) -> None:
    server.push(Reply(text="late", delay=5))
    with pytest.raises(ProviderTimeout) as caught:
        await provider.complete(llm_request(timeout=0.2))
    assert caught.value.code == "timeout"
    assert caught.value.retryable


async def test_the_client_timeout_bounds_a_stream(server: FakeOpenAIServer) -> None:
    server.push(Reply(text="late", delay=5))
    async with adapter_for(server.base_url, timeout=0.2) as adapter:
        with pytest.raises(ProviderTimeout):
            await collect(adapter.stream(main_request()))


async def test_an_unreachable_server_is_unavailable() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    async with adapter_for(f"http://127.0.0.1:{port}/v1") as adapter:
        with pytest.raises(ProviderUnavailable) as first:
            await adapter.complete(llm_request())
        with pytest.raises(ProviderUnavailable):
            await collect(adapter.stream(main_request()))
    assert first.value.retryable
    assert "ConnectError" in first.value.message


async def test_a_cut_stream_is_unavailable_after_the_text_so_far(
    server: FakeOpenAIServer, provider: OpenAIProvider
) -> None:
    server.push(Reply(text="The dragon wakes and", chunk_size=4, cut_after=2))
    deltas: list[str] = []
    with pytest.raises(ProviderUnavailable) as caught:
        await collect(provider.stream(main_request()), deltas)
    assert deltas == ["The ", "drag"]
    assert caught.value.message.startswith("the connection to the provider broke during the stream")


async def test_a_cut_completion_is_unavailable(
    server: FakeOpenAIServer, provider: OpenAIProvider
) -> None:
    server.push(Reply(text="never sent", cut_after=0))
    with pytest.raises(ProviderUnavailable):
        await provider.complete(llm_request())


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (Error(500, "The server had an error while processing"), "provider_unavailable"),
        (Error(429, "Rate limit reached", type="rate_limit_error"), "rate_limited"),
        (
            Error(400, "maximum context length exceeded", code="context_length_exceeded"),
            "context_length_exceeded",
        ),
        (Error(400, "content filtered", code="content_filter"), "content_filter"),
        (Error(400, "Invalid request"), "bad_request"),
    ],
)
async def test_an_error_event_mid_stream_is_typed(
    server: FakeOpenAIServer, provider: OpenAIProvider, error: Error, code: str
) -> None:
    server.push(Reply(text="partial answer", chunk_size=8, stream_error=error))
    deltas: list[str] = []
    with pytest.raises(ProviderError) as caught:
        await collect(provider.stream(main_request()), deltas)
    assert caught.value.code == code
    assert caught.value.message.startswith("the provider sent an error in the stream: ")
    assert "".join(deltas) == "partial answer"


# -- secrets ---------------------------------------------------------------------------------


async def test_keys_are_masked_in_error_messages() -> None:
    credential = "sk-proj-perCallCredential0123456789"
    with FakeOpenAIServer(api_key="sk-proj-theOnlyRightKey0123456789") as server:
        async with OpenAIProvider("m", base_url=server.base_url, api_key=KEY) as adapter:
            with pytest.raises(ProviderError) as own:
                await collect(adapter.stream(main_request()))
            with pytest.raises(ProviderError) as per_call:
                await adapter.complete(llm_request(credential=credential))
            assert KEY not in repr(adapter)
    # The server echoed each key it was sent; none is left in what the adapter raises.
    assert [r.headers["authorization"] for r in server.requests] == [
        f"Bearer {KEY}",
        f"Bearer {credential}",
    ]
    for error, secret in ((own.value, KEY), (per_call.value, credential)):
        assert error.code == "provider_auth"
        assert error.message.startswith(
            "the provider answered HTTP 401: Incorrect API key provided"
        )
        for text in (error.message, str(error), repr(error), str(error.to_dict())):
            assert secret not in text
            assert secret[:12] not in text


def test_an_unexpected_sdk_error_is_a_provider_error() -> None:
    error = translate(
        openai.OpenAIError("something odd with sk-proj-abc123def456ghi789jkl012mno"),
        format_sent=False,
    )
    assert type(error) is ProviderError
    assert error.code == "provider_error"
    assert "sk-proj-abc123def456ghi789jkl012mno" not in error.message
