"""OpenAIProvider in real runs: the llm kind's format step-down, cut and aborted streams,
secrets, and parity with the scripted doubles."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import aclosing
from typing import Any

import anyio
import pytest
from _openai_support import KEY, adapter_for, main_request

from _support import make_runner
from opsrun import AbortSignal
from opsrun.kinds import builtin_kinds
from opsrun.model import (
    Hook,
    MainLlmDelta,
    MainLlmStatus,
    OperationConfig,
    OperationDefinition,
    OperationProfile,
    OperationStatus,
    ProfileOperation,
    RunEvent,
    RunRequest,
    RunResult,
    Trigger,
    Usage,
)
from opsrun.operations import OperationCatalog
from opsrun.ports import LlmProvider, MainLlm, MainLlmDone, ProviderCapabilities
from opsrun.providers import ProviderRegistry
from opsrun.providers.openai import OpenAIProvider
from opsrun.runner import MainLlmRetry, Runner
from opsrun.stores import InMemoryStores
from opsrun.testing import FakeOpenAIServer, ScriptedMainLlm, ScriptedProvider, StaticCredentials

pytestmark = pytest.mark.anyio

Error = FakeOpenAIServer.Error
Reply = FakeOpenAIServer.Reply
B, A = Hook.BEFORE_MAIN_LLM, Hook.AFTER_MAIN_LLM
SCHEMAS = {
    "facts": {
        "type": "object",
        "properties": {"door": {"type": "string"}},
        "required": ["door"],
        "additionalProperties": False,
    }
}
NOTES = {
    "providerRef": "openai",
    "model": "aux-model",
    "system": "You take notes.",
    "prompt": "Notes on: {{ chatHistory | last: 1 | map: 'content' | join }}",
    "samplers": {"temperature": 0.2},
    "writeArtifact": {"tag": "notes", "persisted": True, "usage": "internal"},
    "promptEffect": {"type": "prompt.append_after_last_user", "role": "developer"},
}
FACTS = {
    "providerRef": "openai",
    "model": "aux-model",
    "prompt": "Facts from: {{ chatHistory | last: 1 | map: 'content' | join }}",
    "output": {"mode": "json", "schemaRef": "facts"},
    "writeArtifact": {"tag": "facts", "persisted": True, "usage": "internal"},
}


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(default=None) as fake:
        yield fake


@pytest.fixture
async def provider(server: FakeOpenAIServer) -> AsyncIterator[OpenAIProvider]:
    async with adapter_for(server.base_url) as adapter:
        yield adapter


class Harness:
    """A runner over in-memory stores whose ``llm`` operations use ``provider``."""

    def __init__(
        self,
        provider: LlmProvider,
        main_llm: MainLlm,
        *,
        credentials: StaticCredentials | None = None,
        events: Any = None,
        retry: MainLlmRetry | None = None,
    ) -> None:
        self.stores = InMemoryStores()
        registry = ProviderRegistry({"openai": provider})
        kinds = builtin_kinds(providers=registry, credentials=credentials, schemas=SCHEMAS)
        catalog = OperationCatalog(kinds=kinds)
        for op_id in ("notes", "facts"):
            catalog.add_definition(OperationDefinition(operation_id=op_id, name=op_id, kind="llm"))
        if retry is None and events is None:
            self.runner = make_runner(stores=self.stores, catalog=catalog, main_llm=main_llm)
        else:
            self.runner = Runner(
                catalog=catalog,
                stores=self.stores,
                main_llm=main_llm,
                events=events,
                main_llm_retry=retry,
            )

    async def run(
        self, *ops: tuple[str, Hook, dict[str, Any]], abort: AbortSignal | None = None
    ) -> RunResult:
        entries = tuple(
            ProfileOperation(
                operation_id=op_id,
                config=OperationConfig(hooks=(hook,), order=n, params=params),
            )
            for n, (op_id, hook, params) in enumerate(ops, start=1)
        )
        await self.stores.profiles.save_profile(
            OperationProfile(
                profile_id="p", name="P", operation_profile_session_id="s1", operations=entries
            )
        )
        request = RunRequest(
            trigger=Trigger.GENERATE,
            chat_id="c",
            profile_id="p",
            user_message="I try the door.",
            system_prompt="You narrate.",
        )
        return await self.runner.run(request, abort=abort)

    async def records(self, result: RunResult) -> dict[str, Any]:
        """The run, its operation runs, events, artifacts and chat, as JSON-ready data."""
        key = result.run.session_key
        assert key is not None
        artifacts = await self.stores.sessions.get_artifacts(key)
        events = await self.stores.runs.events(result.run.run_id)
        return {
            "run": result.run.model_dump(mode="json"),
            "operations": [op.model_dump(mode="json") for op in result.operation_runs],
            "events": [e.model_dump(mode="json") for e in events],
            "artifacts": {t: a.model_dump(mode="json") for t, a in sorted(artifacts.items())},
            "chat": [
                m.model_dump(mode="json") for m in await self.stores.chats.history("c", "main")
            ],
        }


# -- the llm kind steps down a refused response format --------------------------------------


async def test_a_refused_strict_schema_steps_down_once(server: FakeOpenAIServer) -> None:
    server.push(
        Error(
            400,
            "Invalid schema for response_format 'facts'",
            code="invalid_json_schema",
            param="response_format",
        ),
        '{"door": "locked"}',
        "The door is locked.",
    )
    caps = ProviderCapabilities(structured_output="json_schema_strict")
    async with adapter_for(server.base_url, capabilities=caps) as adapter:
        result = await Harness(adapter, adapter).run(("facts", B, FACTS))

    facts = result.operation("facts")
    assert facts.status == OperationStatus.DONE, facts.error
    assert facts.outputs_summary["attempts"] == 2
    first, second = (r.body["response_format"] for r in server.requests[:2])
    assert first == {
        "type": "json_schema",
        "json_schema": {"name": "facts", "schema": SCHEMAS["facts"], "strict": True},
    }
    assert second == {
        "type": "json_schema",
        "json_schema": {"name": "facts", "schema": SCHEMAS["facts"]},
    }
    assert result.run.main_llm.text == "The door is locked."


async def test_a_second_refusal_ends_the_operation(
    server: FakeOpenAIServer, provider: OpenAIProvider
) -> None:
    refusal = Error(400, "response_format json_schema is not supported")
    server.push(refusal, refusal, "OK")
    result = await Harness(provider, provider).run(("facts", B, FACTS))
    facts = result.operation("facts")
    assert facts.status == OperationStatus.ERROR
    assert facts.error is not None
    assert facts.error.code == "provider_error"
    assert [r.body.get("response_format", {}).get("type") for r in server.requests[:2]] == [
        "json_schema",
        "json_object",
    ]


# -- the main LLM's stream: cut, retried, aborted -----------------------------------------------


async def test_a_cut_stream_fails_the_main_llm_and_keeps_the_text(
    server: FakeOpenAIServer, provider: OpenAIProvider
) -> None:
    server.push(Reply(text="The door creaks open and", chunk_size=5, cut_after=2))
    harness = Harness(provider, provider)
    result = await harness.run()
    call = result.run.main_llm
    assert call.status == MainLlmStatus.ERROR
    assert call.error is not None
    assert call.error.code == "provider_unavailable"
    assert call.text == "The door c"  # what was streamed before the cut
    assert call.attempts == 1  # text was shown: no retry
    events = await harness.stores.runs.events(result.run.run_id)
    assert "".join(e.text for e in events if isinstance(e, MainLlmDelta)) == "The door c"


async def test_a_cut_before_any_text_is_retried(
    server: FakeOpenAIServer, provider: OpenAIProvider
) -> None:
    server.push(Reply(text="lost", cut_after=0), Reply(text="Second try.", output_tokens=3))
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    harness = Harness(provider, provider, retry=MainLlmRetry(sleep=sleep))
    call = (await harness.run()).run.main_llm
    assert (call.status, call.text, call.attempts) == (MainLlmStatus.DONE, "Second try.", 2)
    assert len(waits) == 1
    assert call.usage is not None
    assert call.usage.output_tokens == 3


async def test_an_abort_closes_the_http_stream(
    server: FakeOpenAIServer, provider: OpenAIProvider
) -> None:
    # Five pieces: enough words for the stream's redactor to release a first delta.
    server.push(Reply(text="A very long answer that never ends", chunk_size=4, stall_after=5))
    signal = AbortSignal()

    class AbortOnFirstDelta:
        async def emit(self, event: RunEvent) -> None:
            if isinstance(event, MainLlmDelta):
                signal.abort()

    harness = Harness(provider, provider, events=AbortOnFirstDelta())
    with anyio.fail_after(10):
        result = await harness.run(abort=signal)
    assert result.run.main_llm.status == MainLlmStatus.ABORTED
    # What streamed before the abort took effect: a prefix of the answer, never more than
    # the five pieces the server sent (the abort arrives through the event sink).
    text = result.run.main_llm.text
    assert text
    assert "A very long answer t".startswith(text)
    assert await anyio.to_thread.run_sync(server.wait_closed_early, 0, 5.0)


async def test_leaving_a_stream_early_closes_the_connection(
    server: FakeOpenAIServer, provider: OpenAIProvider
) -> None:
    server.push(Reply(text="one two three four", chunk_size=4, stall_after=1))
    with anyio.move_on_after(10):
        async with aclosing(provider.stream(main_request())) as stream:  # type: ignore[type-var]
            async for item in stream:
                assert item == "one "
                break
    assert await anyio.to_thread.run_sync(server.wait_closed_early, 0, 5.0)


async def test_cancelling_a_stream_closes_the_connection(
    server: FakeOpenAIServer, provider: OpenAIProvider
) -> None:
    server.push(Reply(text="one two three four", chunk_size=4, stall_after=1))
    seen: list[str | MainLlmDone] = []
    with anyio.CancelScope() as scope:
        async with aclosing(provider.stream(main_request())) as stream:  # type: ignore[type-var]
            async for item in stream:
                seen.append(item)
                scope.cancel()  # the next read is cancelled while it waits
    assert seen == ["one "]
    assert await anyio.to_thread.run_sync(server.wait_closed_early, 0, 5.0)


# -- secrets ---------------------------------------------------------------------------------


async def test_credentials_never_reach_the_records() -> None:
    right = "sk-proj-RightKey0123456789abcdefghij"
    wrong = "sk-proj-WrongKey0123456789abcdefghij"
    credentials = StaticCredentials({"good": right, "bad": wrong})
    with FakeOpenAIServer(default="fine", api_key=right) as server:
        async with adapter_for(server.base_url) as provider:  # its own key is KEY: refused
            harness = Harness(provider, provider, credentials=credentials)
            result = await harness.run(
                ("notes", B, {**NOTES, "credentialRef": "good"}),
                ("facts", B, {**FACTS, "credentialRef": "bad"}),
            )
            records = json.dumps(await harness.records(result))
            shown = repr(provider)

    by_key = {r.headers["authorization"].removeprefix("Bearer "): r for r in server.requests}
    assert set(by_key) == {right, wrong, KEY}  # each call used its own key
    assert result.operation("notes").status == OperationStatus.DONE
    facts = result.operation("facts")
    assert facts.error is not None
    assert facts.error.message.startswith("the provider answered HTTP 401")
    main = result.run.main_llm
    assert main.error is not None
    assert main.error.code == "provider_auth"
    for secret in (right, wrong, KEY):
        assert secret not in records
        assert secret not in shown
        assert secret[:16] not in records


# -- parity with the scripted doubles ----------------------------------------------------------

MAIN_TEXT = "The door is locked. You look around for a key."


def _comparable(value: Any) -> Any:
    """``value`` without what differs between two runs of one conversation: how long
    things took and the provider's request ids."""
    if isinstance(value, dict):
        return {
            k: _comparable(v)
            for k, v in value.items()
            if k not in ("durationMs", "providerRequestId")
        }
    if isinstance(value, list):
        return [_comparable(v) for v in value]
    return value


async def test_the_adapter_records_what_the_scripted_doubles_record(
    server: FakeOpenAIServer,
) -> None:
    caps = ProviderCapabilities(structured_output="json_schema")
    aux_replies = ["- the door is locked\n- a key may be near", '{"door": "locked"}']
    main_usage = Usage(input_tokens=40, output_tokens=11, total_tokens=51)
    ops = (("notes", B, NOTES), ("facts", A, FACTS))

    scripted = Harness(
        ScriptedProvider(aux_replies, default=None, capabilities=caps),
        ScriptedMainLlm([MainLlmDone(text=MAIN_TEXT, usage=main_usage)], default=None),
    )
    expected = await scripted.records(await scripted.run(*ops))

    server.push(
        aux_replies[0],
        Reply(text=MAIN_TEXT, input_tokens=40, output_tokens=11),
        aux_replies[1],
    )
    async with adapter_for(server.base_url) as provider:
        assert provider.capabilities == caps
        adapted = Harness(provider, provider)
        actual = await adapted.records(await adapted.run(*ops))

    assert _comparable(actual) == _comparable(expected)
    assert actual["run"]["status"] == "done"
    assert [r.stream for r in server.requests] == [False, True, False]
