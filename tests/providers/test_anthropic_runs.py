"""AnthropicProvider inside real runs: the same records as the scripted doubles, the llm
kind's format step-down, the main LLM's retries, and a credential that stays out of them."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any, TypeAlias

import anyio
import pytest

from opsrun.kinds import builtin_kinds
from opsrun.model import (
    Hook,
    MainLlmStatus,
    OperationConfig,
    OperationDefinition,
    OperationProfile,
    OperationStatus,
    ProfileOperation,
    RunRequest,
    RunStatus,
    Trigger,
    Usage,
)
from opsrun.operations import OperationCatalog
from opsrun.ports import LlmProvider, LlmResponse, MainLlm, MainLlmDone, ProviderCapabilities
from opsrun.providers import ProviderRegistry
from opsrun.providers.anthropic import AnthropicProvider
from opsrun.runner import MainLlmRetry, Runner
from opsrun.stores import InMemoryStores
from opsrun.testing import (
    FakeAnthropicServer,
    FakeClock,
    ScriptedMainLlm,
    ScriptedProvider,
    SequentialIds,
    StaticCredentials,
)

pytestmark = pytest.mark.anyio

Reply: TypeAlias = FakeAnthropicServer.Reply
Error: TypeAlias = FakeAnthropicServer.Error

SECRET = "sk-ant-run-credential-31337"
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"mood": {"type": "string"}},
    "required": ["mood"],
}
MOOD_PARAMS: dict[str, Any] = {
    "providerRef": "claude",
    "model": "claude-aux",
    "system": "You read the mood of a message.",
    "prompt": "Mood of: {{ chatHistory | last: 1 | map: 'content' | join }}",
    "output": {"mode": "json", "schemaRef": "mood"},
    "credentialRef": "anthropic",
    "writeArtifact": {"tag": "mood"},
    "promptEffect": {"type": "prompt.append_after_last_user", "role": "developer"},
}

# One conversation, scripted twice: (aux reply, usage), (main reply, usage) per turn.
TURNS = [
    ("hello there", '{"mood": "warm"}', (30, 5), "Welcome, traveller. The inn is warm.", (60, 11)),
    ("and the door?", '{"mood": "curious"}', (41, 6), "The door is locked; no key.", (95, 9)),
]


@pytest.fixture
def server() -> Iterator[FakeAnthropicServer]:
    with FakeAnthropicServer(default=None) as fake:
        yield fake


@pytest.fixture
async def claude(server: FakeAnthropicServer) -> AsyncIterator[AnthropicProvider]:
    async with AnthropicProvider(
        "claude-main", api_key="sk-ant-main-key", base_url=server.base_url
    ) as provider:  # the provider's own client, as a host would make it
        yield provider


async def no_wait(seconds: float) -> None:
    await anyio.lowlevel.checkpoint()


async def make_runner(
    main_llm: MainLlm, provider: LlmProvider, params: dict[str, Any] | None = None
) -> Runner:
    kinds = builtin_kinds(
        providers=ProviderRegistry({"claude": provider}),
        credentials=StaticCredentials({"anthropic": SECRET}),
        schemas={"mood": SCHEMA},
    )
    catalog = OperationCatalog(kinds=kinds)
    catalog.add_definition(OperationDefinition(operation_id="mood", name="Mood", kind="llm"))
    stores = InMemoryStores()
    entry = ProfileOperation(
        operation_id="mood",
        config=OperationConfig(
            hooks=(Hook.BEFORE_MAIN_LLM,), order=1, params=params or MOOD_PARAMS
        ),
    )
    await stores.profiles.save_profile(
        OperationProfile(
            profile_id="p", name="P", operation_profile_session_id="s1", operations=(entry,)
        )
    )
    return Runner(
        catalog=catalog,
        stores=stores,
        main_llm=main_llm,
        clock=FakeClock(),
        ids=SequentialIds(),
        main_llm_retry=MainLlmRetry(sleep=no_wait),
    )


def turn(text: str) -> RunRequest:
    return RunRequest(trigger=Trigger.GENERATE, chat_id="c", profile_id="p", user_message=text)


TIMINGS = frozenset({"durationMs", "duration_ms"})


def without_timings(value: Any) -> Any:
    """The records with what measures wall time taken out."""
    if isinstance(value, dict):
        return {k: without_timings(v) for k, v in value.items() if k not in TIMINGS}
    if isinstance(value, list):
        return [without_timings(v) for v in value]
    return value


async def records(runner: Runner, run_ids: list[str]) -> list[Any]:
    """The chat, and every run, operation run and event the runner stored, as JSON."""
    out: list[Any] = [m.model_dump(mode="json") for m in await runner.chats.history("c", "main")]
    for run_id in run_ids:
        run, operation_runs = await runner.runs.get_run(run_id)
        out.append(run.model_dump(mode="json"))
        out.extend(o.model_dump(mode="json") for o in operation_runs)
        out.extend(e.model_dump(mode="json") for e in await runner.runs.events(run_id))
    kept: list[Any] = without_timings(out)
    return kept


async def run_turns(runner: Runner) -> tuple[list[Any], list[str]]:
    """Each turn's result as JSON, and the run ids."""
    results, run_ids = [], []
    for user, *_ in TURNS:
        result = await runner.run(turn(user))
        assert result.status == RunStatus.DONE, result.run
        results.append(without_timings(result.model_dump(mode="json")))
        run_ids.append(result.run.run_id)
    return results, run_ids


async def test_the_adapter_and_the_scripted_doubles_record_the_same_runs(
    server: FakeAnthropicServer, claude: AnthropicProvider
) -> None:
    scripted_aux, scripted_main = [], []
    for number, (_, aux, (aux_in, aux_out), main, (main_in, main_out)) in enumerate(TURNS):
        server.push(
            Reply(text=aux, input_tokens=aux_in, output_tokens=aux_out),
            Reply(text=main, input_tokens=main_in, output_tokens=main_out),
        )
        scripted_aux.append(
            LlmResponse(
                text=aux,
                raw_finish_reason="tool_use",
                usage=Usage(
                    input_tokens=aux_in, output_tokens=aux_out, total_tokens=aux_in + aux_out
                ),
                model="claude-aux",
                request_id=f"req_fake_{2 * number + 1}",
            )
        )
        scripted_main.append(
            MainLlmDone(
                text=main,
                raw_finish_reason="end_turn",
                usage=Usage(
                    input_tokens=main_in, output_tokens=main_out, total_tokens=main_in + main_out
                ),
            )
        )
    doubles = await make_runner(
        ScriptedMainLlm(scripted_main, default=None),
        ScriptedProvider(
            scripted_aux,
            default=None,
            capabilities=ProviderCapabilities(structured_output="json_schema"),
        ),
    )
    adapter = await make_runner(claude, claude)

    expected, expected_ids = await run_turns(doubles)
    actual, actual_ids = await run_turns(adapter)

    assert actual == expected
    assert await records(adapter, actual_ids) == await records(doubles, expected_ids)
    # The adapter really went through the API: tools for the mood, a stream for the reply.
    assert [r.stream for r in server.requests] == [False, True, False, True]
    assert server.requests[0].body["tool_choice"]["name"] == "mood"
    note = server.requests[3].body["messages"][-1]["content"][-1]["text"]
    assert note.startswith("[system]\n")
    assert json.loads(note.removeprefix("[system]\n")) == {"mood": "curious"}


async def test_a_credential_reaches_the_api_and_no_record(
    server: FakeAnthropicServer, claude: AnthropicProvider
) -> None:
    server.push('{"mood": "calm"}', "Hello.")
    runner = await make_runner(claude, claude)
    result = await runner.run(turn("hi"))
    assert result.status == RunStatus.DONE
    aux_request, main_request = server.requests
    assert aux_request.headers["authorization"] == f"Bearer {SECRET}"
    assert main_request.headers["authorization"] == "Bearer sk-ant-main-key"
    assert SECRET not in json.dumps([aux_request.body, main_request.body])
    assert SECRET not in json.dumps(await records(runner, [result.run.run_id]))
    assert SECRET not in json.dumps(result.model_dump(mode="json"))


async def test_a_refused_schema_steps_down_to_json_by_instruction(
    server: FakeAnthropicServer, claude: AnthropicProvider
) -> None:
    server.push(
        Error(400, "tools.0.custom.input_schema: JSON schema is invalid"),
        '{"mood": "calm"}',
        "Hello.",
    )
    runner = await make_runner(claude, claude)
    result = await runner.run(turn("hi"))
    mood = result.operation("mood")
    assert mood.status == OperationStatus.DONE, mood.error
    assert mood.outputs_summary["attempts"] == 2
    first, second = server.requests[0].body, server.requests[1].body
    assert "tools" in first
    assert "tools" not in second
    assert second["system"].endswith("no markdown code fence.")


async def test_an_overloaded_main_llm_is_retried_by_the_runner(
    server: FakeAnthropicServer, claude: AnthropicProvider
) -> None:
    server.push('{"mood": "calm"}', Error(529, "Overloaded"), "Hello.")
    runner = await make_runner(claude, claude)
    result = await runner.run(turn("hi"))
    call = result.run.main_llm
    assert call is not None
    assert (call.status, call.attempts, call.text) == (MainLlmStatus.DONE, 2, "Hello.")
    assert call.provider_finish_reason == "end_turn"


async def test_a_cut_main_stream_ends_the_run_with_the_text_so_far(
    server: FakeAnthropicServer, claude: AnthropicProvider
) -> None:
    server.push(
        '{"mood": "calm"}', Reply(text="Hello there, traveller.", chunk_size=6, cut_after=2)
    )
    runner = await make_runner(claude, claude)
    result = await runner.run(turn("hi"))
    call = result.run.main_llm
    assert call is not None
    assert call.status == MainLlmStatus.ERROR
    assert call.error is not None
    assert call.error.code == "provider_unavailable"
    assert (call.attempts, call.text) == (1, "Hello there,")  # streamed text is not retried
