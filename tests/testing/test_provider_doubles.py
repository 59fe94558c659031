"""The aux LLM provider doubles users test with: scripted, function, recording, credentials."""

from __future__ import annotations

import anyio
import pytest

from opsrun.errors import ConfigError, ProviderError, RateLimited
from opsrun.model import Trigger, Usage
from opsrun.ports import (
    LlmRequest,
    LlmResponse,
    MainLlmRequest,
    ProviderCapabilities,
    ProviderMessage,
)
from opsrun.testing import (
    Delayed,
    FunctionMainLlm,
    FunctionProvider,
    RecordingProvider,
    ScriptedMainLlm,
    ScriptedProvider,
    StaticCredentials,
)

pytestmark = pytest.mark.anyio


MAIN = MainLlmRequest(
    messages=(ProviderMessage(role="user", content="hi"),),
    run_id="r",
    chat_id="c",
    user_message_id="u",
    trigger=Trigger.GENERATE,
)


def request(text: str = "hello", model: str = "m") -> LlmRequest:
    return LlmRequest(messages=(ProviderMessage(role="user", content=text),), model=model)


async def test_scripted_answers_in_order_then_the_default() -> None:
    full = LlmResponse(text="full", finish_reason="length", request_id="r9")
    provider = ScriptedProvider(["first", full])
    assert (await provider.complete(request())).text == "first"
    assert await provider.complete(request()) == full
    assert (await provider.complete(request())).text == "OK"
    assert provider.calls == 3


async def test_scripted_text_replies_get_usage_model_and_request_id() -> None:
    provider = ScriptedProvider(["12345678"])
    response = await provider.complete(request("abcd", model="tiny"))
    assert response.finish_reason == "stop"
    assert response.usage == Usage(input_tokens=1, output_tokens=2, total_tokens=3)
    assert response.model == "tiny"
    assert response.request_id == "test-1"


async def test_scripted_raises_queued_exceptions_and_records_the_request() -> None:
    provider = ScriptedProvider([RateLimited("429", retry_after=1.5)])
    with pytest.raises(RateLimited) as caught:
        await provider.complete(request("x"))
    assert caught.value.retry_after == 1.5
    assert provider.last_request == request("x")


async def test_scripted_without_default_fails_unexpected_calls() -> None:
    provider = ScriptedProvider(default=None)
    with pytest.raises(AssertionError, match="unexpected aux LLM call"):
        await provider.complete(request("late"))
    assert provider.unexpected == [request("late")]
    main_llm = ScriptedMainLlm(default=None)
    with pytest.raises(AssertionError, match="unexpected main LLM call"):
        async for _ in main_llm.stream(MAIN):
            pass
    assert main_llm.unexpected == [MAIN]


async def overlapping_ids(provider: ScriptedProvider | FunctionProvider) -> dict[str, str | None]:
    """Request ids of a slow call and of a fast one made while the slow one waits."""
    ids: dict[str, str | None] = {}

    async def call(text: str) -> None:
        ids[text] = (await provider.complete(request(text))).request_id

    async with anyio.create_task_group() as tg:
        tg.start_soon(call, "slow")
        await anyio.sleep(0.01)
        tg.start_soon(call, "fast")
    return ids


async def test_overlapping_calls_keep_their_own_request_ids() -> None:
    async def later(req: LlmRequest) -> str:
        await anyio.sleep(0.05 if req.messages[0].content == "slow" else 0)
        return "x"

    for provider in (ScriptedProvider([Delayed(0.05, "slow"), "fast"]), FunctionProvider(later)):
        assert await overlapping_ids(provider) == {"slow": "test-1", "fast": "test-2"}


@pytest.mark.parametrize("bad", [42, LlmResponse(text="x"), Delayed(0, "x")])
async def test_a_main_llm_reply_of_another_type_names_the_allowed_ones(bad: object) -> None:
    main_llm = ScriptedMainLlm([bad])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="str, MainLlmDone or an exception"):
        async for _ in main_llm.stream(MAIN):
            pass


def test_a_single_string_is_not_a_list_of_replies() -> None:
    for build in (ScriptedProvider, ScriptedMainLlm):
        with pytest.raises(TypeError, match=r"use \['hello'\]"):
            build("hello")


async def test_delayed_replies_take_their_time() -> None:
    provider = ScriptedProvider([Delayed(10, "late")])
    with anyio.move_on_after(0.02) as scope:
        await provider.complete(request())
    assert scope.cancelled_caught
    provider.push(Delayed(0, Delayed(0, "nested")))
    assert (await provider.complete(request())).text == "nested"


async def test_capabilities_are_configurable() -> None:
    caps = ProviderCapabilities(structured_output="json_object", developer_role=True)
    assert ScriptedProvider(capabilities=caps).capabilities == caps
    assert ScriptedProvider().capabilities.structured_output == "none"


async def test_function_provider_accepts_sync_and_async_functions() -> None:
    def sync(req: LlmRequest) -> str:
        return req.messages[-1].content.upper()

    async def asynchronous(req: LlmRequest) -> LlmResponse:
        await anyio.sleep(0)
        return LlmResponse(text=req.model)

    assert (await FunctionProvider(sync).complete(request("abc"))).text == "ABC"
    provider = FunctionProvider(asynchronous)
    assert (await provider.complete(request(model="m2"))).text == "m2"
    assert provider.requests == [request(model="m2")]


async def test_function_provider_lets_exceptions_through() -> None:
    def boom(req: LlmRequest) -> str:
        raise RuntimeError("down")

    with pytest.raises(RuntimeError, match="down"):
        await FunctionProvider(boom).complete(request())


async def test_function_provider_rejects_replies_of_the_wrong_type() -> None:
    with pytest.raises(TypeError):
        await FunctionProvider(lambda req: 42).complete(request())  # type: ignore[arg-type,return-value]  # a wrong reply type on purpose


async def test_recording_provider_keeps_requests_responses_and_errors() -> None:
    inner = ScriptedProvider(
        ["one", ValueError("bad")],
        capabilities=ProviderCapabilities(structured_output="json_schema"),
    )
    recording = RecordingProvider(inner)
    await recording.complete(request("a"))
    with pytest.raises(ValueError, match="bad"):
        await recording.complete(request("b"))
    assert recording.capabilities.structured_output == "json_schema"
    assert [r.messages[0].content for r in recording.requests] == ["a", "b"]
    assert [r.text for r in recording.responses] == ["one"]
    assert isinstance(recording.exchanges[1].error, ValueError)
    assert recording.exchanges[1].response is None


async def test_static_credentials() -> None:
    creds = StaticCredentials({"ref": "the-secret"})
    assert await creds.resolve("ref") == "the-secret"
    assert creds.resolved == ["ref"]
    with pytest.raises(ConfigError):
        await creds.resolve("other")
    assert "the-secret" not in repr(creds)


async def test_doubles_close_like_the_real_adapters() -> None:
    inner = ScriptedProvider(["kept"])
    doubles: list[ScriptedProvider | FunctionProvider | RecordingProvider] = [
        ScriptedProvider(),
        FunctionProvider(lambda r: "x"),
        RecordingProvider(inner),
    ]
    for double in doubles:
        async with double as entered:
            assert entered is double
            await double.complete(request())
        assert double.closed
        with pytest.raises(ProviderError) as caught:
            await double.complete(request())
        assert caught.value.code == "provider_closed"
        await double.aclose()  # closing twice is harmless
    # Closing the recording wrapper leaves the provider it wraps open.
    assert not inner.closed
    assert (await inner.complete(request())).text == "OK"


async def test_main_llm_doubles_close_and_then_fail_while_streaming() -> None:
    main_request = MAIN
    for main in (ScriptedMainLlm(["reply"]), FunctionMainLlm(lambda r: "computed")):
        async with main:
            pass
        stream = main.stream(main_request)
        with pytest.raises(ProviderError) as caught:
            async for _ in stream:
                pass
        assert caught.value.code == "provider_closed"
        assert main.requests == []
