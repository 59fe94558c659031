"""kind=llm through a real Runner: requests, results, every error code, retries, summaries."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest

from _support import make_runner, session_artifacts
from opsrun.errors import (
    ConfigError,
    ProfileInvalid,
    ProviderError,
    ProviderTimeout,
    RateLimited,
    ResponseFormatRejected,
)
from opsrun.kinds import LlmOperation, approximate_tokens, builtin_kinds
from opsrun.kinds._llm import MAX_BACKOFF_SECONDS
from opsrun.kinds.liquid import TemplateEngine, TemplateLimits
from opsrun.model import (
    Artifact,
    Hook,
    JsonObject,
    LlmParams,
    OperationConfig,
    OperationDefinition,
    OperationError,
    OperationProfile,
    OperationRun,
    OperationStatus,
    ProfileOperation,
    RunRequest,
    RunResult,
    Trigger,
    Usage,
)
from opsrun.operations import AbortSignal, OperationCatalog, OperationContext, RunMeta
from opsrun.ports import (
    LlmProvider,
    LlmRequest,
    LlmResponse,
    ProviderCapabilities,
    ResponseFormat,
)
from opsrun.providers import ProviderRegistry
from opsrun.stores import InMemoryStores
from opsrun.testing import (
    Delayed,
    FunctionProvider,
    ScriptedMainLlm,
    ScriptedProvider,
    StaticCredentials,
)

pytestmark = pytest.mark.anyio
B, A = Hook.BEFORE_MAIN_LLM, Hook.AFTER_MAIN_LLM

Sleep = Callable[[float], Awaitable[None]]


class Waits:
    """A recording ``sleep``: keeps the seconds asked for and returns at once."""

    def __init__(self) -> None:
        self.seconds: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.seconds.append(seconds)
        await anyio.lowlevel.checkpoint()


def llm_params(**overrides: Any) -> dict[str, Any]:
    params: dict[str, Any] = {
        "providerRef": "test",
        "model": "aux-model",
        "prompt": "Summarise: {{ chatHistory | last: 1 | map: 'content' | join }}",
        "writeArtifact": {"tag": "notes", "persisted": True, "usage": "internal"},
    }
    params.update(overrides)
    return params


class Harness:
    """A runner with the built-in kinds, one llm operation ``aux`` and helpers to inspect."""

    def __init__(
        self,
        provider: Any = None,
        *,
        schemas: dict[str, Any] | None = None,
        credentials: StaticCredentials | None = None,
        engine: TemplateEngine | None = None,
        token_counter: Any = None,
        main_llm: ScriptedMainLlm | None = None,
        sleep: Sleep | None = None,
    ) -> None:
        self.provider = provider if provider is not None else ScriptedProvider()
        self.stores = InMemoryStores()
        self.main_llm = main_llm or ScriptedMainLlm()
        registry = ProviderRegistry({"test": self.provider})
        kinds = builtin_kinds(
            providers=registry,
            credentials=credentials,
            engine=engine,
            schemas=schemas,
            token_counter=token_counter,
        )
        if sleep is not None:  # the same llm kind, waiting through ``sleep``
            kinds["llm"] = lambda definition: LlmOperation(
                definition,
                providers=registry,
                credentials=credentials,
                engine=engine,
                schemas=schemas,
                token_counter=token_counter,
                sleep=sleep,
            )
        self.catalog = OperationCatalog(kinds=kinds)
        self.catalog.add_definition(OperationDefinition(operation_id="aux", name="Aux", kind="llm"))
        self.runner = make_runner(stores=self.stores, catalog=self.catalog, main_llm=self.main_llm)

    def issues(self, params: dict[str, Any]) -> list[str]:
        """The save-time problems of a profile running ``aux`` with ``params``."""
        entry = ProfileOperation(
            operation_id="aux", config=OperationConfig(hooks=(B,), order=1, params=params)
        )
        profile = OperationProfile(
            profile_id="p", name="P", operation_profile_session_id="s1", operations=(entry,)
        )
        return [issue.message for issue in self.catalog.validate(profile)]

    async def run(
        self, params: dict[str, Any], *, hook: Hook = B, user: str = "hello there", **config: Any
    ) -> RunResult:
        entry = ProfileOperation(
            operation_id="aux",
            config=OperationConfig(hooks=(hook,), order=1, params=params, **config),
        )
        await self.stores.profiles.save_profile(
            OperationProfile(
                profile_id="p", name="P", operation_profile_session_id="s1", operations=(entry,)
            )
        )
        return await self.runner.run(
            RunRequest(trigger=Trigger.GENERATE, chat_id="c", profile_id="p", user_message=user)
        )

    async def artifacts(self, result: RunResult) -> dict[str, Artifact]:
        return await session_artifacts(self.stores, result.run)


def aux(result: RunResult) -> OperationRun:
    return result.operation("aux")


def aux_error(result: RunResult) -> OperationError:
    error = aux(result).error
    assert error is not None
    return error


def error_details(result: RunResult) -> JsonObject:
    details = aux_error(result).details
    assert details is not None
    return details


def error_code(result: RunResult) -> str | None:
    op = aux(result)
    return None if op.error is None else op.error.code


# -- the happy paths -----------------------------------------------------------------------


async def test_text_reply_is_written_and_sent_to_the_prompt() -> None:
    h = Harness(ScriptedProvider(["- the door is locked"]))
    params = llm_params(
        system="You take notes for {{ run.chatId }}.",
        samplers={"temperature": 0.2, "topP": 0.9, "seed": 7},
        maxOutputTokens=64,
        stop=["END"],
        promptEffect={"type": "prompt.append_after_last_user", "role": "developer"},
    )
    result = await h.run(params, user="open the door")

    assert aux(result).status == OperationStatus.DONE
    request = h.provider.last_request
    assert request is not None
    assert [(m.role, m.content) for m in request.messages] == [
        ("system", "You take notes for c."),
        ("user", "Summarise: open the door"),
    ]
    assert request.model == "aux-model"
    assert request.samplers.temperature == 0.2
    assert request.samplers.seed == 7
    assert request.max_output_tokens == 64
    assert request.stop == ("END",)
    assert request.response_format is None
    assert request.credential is None

    notes = (await h.artifacts(result))["notes"]
    assert notes.value == "- the door is locked"
    assert notes.format.value == "text"
    assert notes.persisted
    assert notes.written_by == "aux"

    main_request = h.main_llm.last_request
    assert main_request is not None
    contents = [(m.role, m.content) for m in main_request.messages]
    user_at = contents.index(("user", "open the door"))
    # The main LLM does not accept developer messages, so the note goes as system.
    assert contents[user_at + 1] == ("system", "- the door is locked")


async def test_summaries_follow_the_seed() -> None:
    reply = LlmResponse(
        text="fine",
        usage=Usage(input_tokens=10, output_tokens=2, total_tokens=12, cost_usd=0.001),
        request_id="req-42",
        raw_finish_reason="end_turn",
    )
    creds = StaticCredentials({"never-shown": "credential-value-123"})
    h = Harness(ScriptedProvider([reply]), credentials=creds)
    stop = [f"{i}" * 200 for i in range(12)]
    params = llm_params(
        system="sys",
        samplers={"temperature": 0.5, "topK": 40},
        maxOutputTokens=10,
        stop=stop,
        timeoutMs=5000,
        retry={"maxAttempts": 2, "backoffMs": 5, "retryOn": ["timeout"]},
        strictVariables=True,
        credentialRef="never-shown",
    )
    result = await h.run(params)
    op = aux(result)
    assert op.status == OperationStatus.DONE, op.error
    inputs = op.inputs_summary
    assert set(inputs) == {
        "providerRef",
        "model",
        "outputMode",
        "samplers",
        "maxOutputTokens",
        "stop",
        "timeoutMs",
        "retry",
        "strictVariables",
        "renderedSystemHash",
        "renderedPromptHash",
    }
    assert inputs["samplers"] == {"temperature": 0.5, "topK": 40}
    assert len(inputs["stop"]) == 10
    assert all(len(s) == 120 for s in inputs["stop"])
    assert inputs["retry"] == {"maxAttempts": 2, "backoffMs": 5, "retryOn": ["timeout"]}
    assert len(inputs["renderedSystemHash"]) == 64
    assert "never-shown" not in str(inputs)
    outputs = op.outputs_summary
    assert outputs["attempts"] == 1
    assert outputs["providerRequestId"] == "req-42"
    assert outputs["finishReason"] == "stop"
    assert outputs["usage"] == {
        "inputTokens": 10,
        "outputTokens": 2,
        "totalTokens": 12,
        "costUsd": 0.001,
    }
    assert outputs["durationMs"] >= 0
    assert "rawTextPreview" not in outputs  # text mode keeps no reply text


async def test_json_reply_is_parsed_into_the_artifact() -> None:
    h = Harness(ScriptedProvider(['```json\n{"hp": 10, "items": ["rope"]}\n```']))
    result = await h.run(llm_params(output={"mode": "json"}))
    op = aux(result)
    assert op.status == OperationStatus.DONE
    notes = (await h.artifacts(result))["notes"]
    assert notes.value == {"hp": 10, "items": ["rope"]}
    assert notes.format.value == "json"
    assert len(op.outputs_summary["rawTextHash"]) == 64
    assert op.outputs_summary["rawTextPreview"].startswith("```json")
    assert "parseErrorMessage" not in op.outputs_summary


async def test_json_value_goes_to_the_prompt_serialised() -> None:
    h = Harness(ScriptedProvider(['{"mood": "tense"}']))
    params = llm_params(
        output={"mode": "json"},
        promptEffect={"type": "prompt.system_update", "mode": "append"},
    )
    await h.run(params)
    main_request = h.main_llm.last_request
    assert main_request is not None
    assert main_request.messages[0].role == "system"
    assert main_request.messages[0].content.endswith('{"mood": "tense"}')


async def test_schema_valid_reply_passes() -> None:
    schema = {"type": "object", "required": ["hp"], "properties": {"hp": {"type": "integer"}}}
    h = Harness(ScriptedProvider(['{"hp": 3}']), schemas={"state": schema})
    result = await h.run(llm_params(output={"mode": "json", "schemaRef": "state"}))
    assert aux(result).status == OperationStatus.DONE
    assert aux(result).inputs_summary["schemaRef"] == "state"


@pytest.mark.parametrize(
    ("level", "expected"),
    [
        (
            "json_schema_strict",
            ResponseFormat(type="json_schema", schema={"type": "object"}, name="obj", strict=True),
        ),
        (
            "json_schema",
            ResponseFormat(type="json_schema", schema={"type": "object"}, name="obj", strict=False),
        ),
        ("json_object", ResponseFormat(type="json")),
        ("none", None),
    ],
)
async def test_response_format_follows_the_capabilities(
    level: Any, expected: ResponseFormat | None
) -> None:
    provider = ScriptedProvider(
        default="{}", capabilities=ProviderCapabilities(structured_output=level)
    )
    h = Harness(provider, schemas={"obj": {"type": "object"}})
    await h.run(llm_params(output={"mode": "json", "schemaRef": "obj"}))
    assert provider.last_request is not None
    assert provider.last_request.response_format == expected


@pytest.mark.parametrize(
    ("level", "second"),
    [
        (
            "json_schema_strict",
            ResponseFormat(type="json_schema", schema={"type": "object"}, name="obj", strict=False),
        ),
        ("json_schema", ResponseFormat(type="json")),
        ("json_object", None),
    ],
)
async def test_rejected_response_format_steps_down_one_level_once(
    level: Any, second: ResponseFormat | None
) -> None:
    def fn(request: LlmRequest) -> str:
        if len(provider.requests) == 1:
            raise ResponseFormatRejected("response_format is not supported by this model")
        return '{"ok": true}'

    provider = FunctionProvider(fn, capabilities=ProviderCapabilities(structured_output=level))
    h = Harness(provider, schemas={"obj": {"type": "object"}})
    result = await h.run(llm_params(output={"mode": "json", "schemaRef": "obj"}))
    op = aux(result)
    assert op.status == OperationStatus.DONE
    assert [r.response_format for r in provider.requests][1:] == [second]
    assert op.outputs_summary["attempts"] == 2


async def test_rejected_twice_is_a_provider_error() -> None:
    provider = ScriptedProvider(
        [ResponseFormatRejected("no schema"), ResponseFormatRejected("no json either")],
        capabilities=ProviderCapabilities(structured_output="json_schema"),
    )
    h = Harness(provider, schemas={"obj": {"type": "object"}})
    result = await h.run(llm_params(output={"mode": "json", "schemaRef": "obj"}))
    assert error_code(result) == "provider_error"
    assert provider.calls == 2


# -- error codes ---------------------------------------------------------------------------


async def test_invalid_json_is_output_parse_error_with_bounded_preview() -> None:
    reply = "Sure! Here it is: {" + "x" * 3000
    h = Harness(ScriptedProvider([reply]))
    result = await h.run(llm_params(output={"mode": "json"}), required=True)
    op = aux(result)
    assert error_code(result) == "output_parse_error"
    assert result.run.status.value == "failed"  # required before-op stops the run
    outputs = op.outputs_summary
    assert outputs["rawTextPreview"] == reply[:1024]
    assert len(outputs["parseErrorMessage"]) <= 512
    assert outputs["parseErrorMessage"].startswith("the reply is not valid JSON")
    assert "notes" not in await h.artifacts(result)


async def test_nan_is_not_json() -> None:
    h = Harness(ScriptedProvider(['{"x": NaN}']))
    assert error_code(await h.run(llm_params(output={"mode": "json"}))) == "output_parse_error"


async def test_schema_mismatch_is_output_parse_error() -> None:
    schema = {"type": "object", "required": ["hp"], "properties": {"hp": {"type": "integer"}}}
    h = Harness(ScriptedProvider(['{"hp": "lots"}']), schemas={"state": schema})
    result = await h.run(llm_params(output={"mode": "json", "schemaRef": "state"}))
    op = aux(result)
    assert error_code(result) == "output_parse_error"
    assert op.error is not None
    assert op.error.details == {
        "schemaRef": "state",
        "path": "$.hp",
        "schemaPath": "/properties/hp/type",
        "validator": "type",
    }
    assert "is not of type 'integer'" in op.outputs_summary["parseErrorMessage"]


async def test_an_unknown_schema_ref_is_refused_before_any_call() -> None:
    """With no schemas given, or other ones: the profile is invalid when saved, and a
    run refuses it before any call."""
    for schemas in (None, {"hp": HP_SCHEMA}):
        h = Harness(schemas=schemas)
        params = llm_params(output={"mode": "json", "schemaRef": "missing"})
        (problem,) = h.issues(params)
        assert "output.schemaRef 'missing' is not a registered schema" in problem
        with pytest.raises(ProfileInvalid):
            await h.run(params)
        assert h.provider.calls == 0


async def test_an_invalid_schema_is_refused_when_the_profile_is_saved() -> None:
    h = Harness(schemas={"bad": {"type": "no-such-type"}})
    params = llm_params(output={"mode": "json", "schemaRef": "bad"})
    (problem,) = h.issues(params)
    assert "not a valid JSON Schema" in problem
    with pytest.raises(ProfileInvalid):
        await h.run(params)


def context_for(params: LlmParams) -> OperationContext[LlmParams]:
    """The context of ``aux`` in before_main_llm, for calling ``execute`` directly."""
    return OperationContext(
        run=RunMeta(
            run_id="r",
            trigger=Trigger.GENERATE,
            chat_id="c",
            branch_id="main",
            user_message_id="u",
            profile_id=None,
            session_key=None,
        ),
        hook=B,
        definition=OperationDefinition(operation_id="aux", name="Aux", kind="llm"),
        config=OperationConfig(hooks=(B,), order=1),
        params=params,
        history=(),
        artifacts={},
        write_tag="notes",
    )


HP_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["hp"],
    "properties": {"hp": {"$ref": "#/$defs/HP"}},
    "$defs": {"HP": {"type": "integer"}},
}


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"hp": {"$ref": "#/$defs/HP"}}},
        {"properties": {"hp": {"anyOf": [{"$ref": "#/$defs/missing"}, {"type": "integer"}]}}},
        {"$defs": {"a": {"$anchor": "hp"}}, "properties": {"hp": {"$ref": "#elsewhere"}}},
        {"properties": {"hp": {"$dynamicRef": "#nowhere"}}},
        {"properties": {"hp": {"$ref": "https://example.com/hp.json"}}},
        {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "properties": {"hp": {"$ref": "#/definitions/HP"}},
        },
    ],
    ids=["pointer", "inside-anyOf", "anchor", "dynamic", "remote", "draft-07"],
)
async def test_a_ref_that_does_not_resolve_is_refused_before_any_call(
    schema: dict[str, Any],
) -> None:
    h = Harness(ScriptedProvider(['{"hp": 3}']), schemas={"state": schema})
    params = llm_params(output={"mode": "json", "schemaRef": "state"})
    (problem,) = h.issues(params)
    assert "does not resolve" in problem
    with pytest.raises(ProfileInvalid):
        await h.run(params)
    assert h.provider.calls == 0


async def test_a_ref_that_does_not_resolve_is_a_config_error_at_run_time_too() -> None:
    """Without a catalog's save-time check, the operation refuses it before calling."""
    provider = ScriptedProvider(['{"hp": 3}'])
    schemas = {"state": {"properties": {"hp": {"$ref": "#/$defs/HP"}}}}
    operation = LlmOperation(
        OperationDefinition(operation_id="aux", name="Aux", kind="llm"),
        providers=ProviderRegistry({"test": provider}),
        schemas=schemas,
    )
    params = LlmParams.model_validate(llm_params(output={"mode": "json", "schemaRef": "state"}))
    result = await operation.execute(context_for(params))
    assert result.error is not None
    assert result.error.code == "config_error"
    assert "'#/$defs/HP'" in result.error.message
    assert result.inputs_summary["schemaRef"] == "state"
    assert provider.calls == 0


async def test_refs_inside_the_schema_resolve() -> None:
    tree = {
        "$id": "https://example.com/tree",
        "$dynamicAnchor": "node",
        "type": "object",
        "properties": {"children": {"type": "array", "items": {"$dynamicRef": "#node"}}},
    }
    embedded = {
        "$id": "https://example.com/root.json",
        "$defs": {"hp": {"$id": "hp.json", "type": "integer"}},
        "properties": {"hp": {"$ref": "hp.json"}},
    }
    schemas = {"hp": HP_SCHEMA, "tree": tree, "embedded": embedded}
    for ref, reply in [("hp", '{"hp": 3}'), ("tree", '{"children": [{}]}'), ("embedded", "{}")]:
        h = Harness(ScriptedProvider([reply, '{"hp": "x", "children": [1]}']), schemas=schemas)
        params = llm_params(output={"mode": "json", "schemaRef": ref})
        assert h.issues(params) == []
        assert aux(await h.run(params)).status == OperationStatus.DONE
        if ref != "embedded":
            assert error_code(await h.run(params, user="again")) == "output_parse_error"


async def test_a_schema_that_cannot_be_applied_to_the_reply_is_a_config_error() -> None:
    """A schema changed in place after its validator was built (its $defs removed): the
    reference error while checking the reply is a config_error, summaries kept."""
    schema = {
        "type": "object",
        "properties": {"hp": {"$ref": "#/$defs/HP"}},
        "$defs": {"HP": {"type": "integer"}},
    }
    h = Harness(ScriptedProvider(['{"hp": 3}', '{"hp": 4}']), schemas={"state": schema})
    params = llm_params(output={"mode": "json", "schemaRef": "state"})
    assert aux(await h.run(params)).status == OperationStatus.DONE
    del schema["$defs"]
    result = await h.run(params, user="again")
    assert error_code(result) == "config_error"
    assert "could not be applied" in aux_error(result).message
    assert aux(result).outputs_summary["attempts"] == 1


# -- JSON replies: depth and masking ----------------------------------------------------------


async def test_a_reply_nested_too_deeply_to_parse_is_output_parse_error() -> None:
    deep = "[" * 100_000 + "1" + "]" * 100_000
    h = Harness(ScriptedProvider([deep]))
    result = await h.run(llm_params(output={"mode": "json"}))
    assert error_code(result) == "output_parse_error"
    assert "nested deeper" in aux_error(result).message
    summary = aux(result).outputs_summary
    assert summary["attempts"] == 1
    assert "nested deeper" in summary["parseErrorMessage"]


async def test_a_deeply_nested_reply_is_written_unchanged() -> None:
    depth = 100  # deeper than the redactor's max_depth (32)
    reply = "[" * depth + '"' + KEY_SHAPED + '"' + "]" * depth
    h = Harness(ScriptedProvider([reply]))
    params = llm_params(
        output={"mode": "json"}, promptEffect={"type": "prompt.append_after_last_user"}
    )
    result = await h.run(params)
    assert aux(result).status == OperationStatus.DONE
    value: Any = (await h.artifacts(result))["notes"].value
    for _ in range(depth):
        assert isinstance(value, list)
        assert len(value) == 1
        value = value[0]
    assert value == MASKED_KEY  # a key is still masked, however deep
    sent = h.main_llm.requests[-1].messages[-1].content
    assert sent == "[" * depth + json.dumps(MASKED_KEY, ensure_ascii=False) + "]" * depth


KEY_SHAPED = "sk-proj-" + "Zx9Yw8Vu7Ts6" * 4
MASKED_KEY = "sk-proj-…[REDACTED]"


async def test_masking_keeps_a_validated_json_reply_valid() -> None:
    """Values are masked for what they are (a key, the credential), not for the name of
    their key: a game's ``token`` stays the number the schema asked for."""
    schema = {
        "type": "object",
        "required": ["token", "password", "apiKey"],
        "properties": {"token": {"type": "integer"}, "password": {"type": "string"}},
    }
    reply = json.dumps({"token": 3, "password": "swordfish", "apiKey": KEY_SHAPED, "hp": 10})
    h = Harness(ScriptedProvider([reply]), schemas={"game": schema})
    params = llm_params(
        output={"mode": "json", "schemaRef": "game"},
        promptEffect={"type": "prompt.append_after_last_user"},
    )
    result = await h.run(params)
    assert aux(result).status == OperationStatus.DONE
    expected = {"token": 3, "password": "swordfish", "apiKey": MASKED_KEY, "hp": 10}
    assert (await h.artifacts(result))["notes"].value == expected
    assert json.loads(h.main_llm.requests[-1].messages[-1].content) == expected


async def test_a_reply_that_masking_makes_invalid_is_output_parse_error() -> None:
    schema = {"type": "object", "properties": {"apiKey": {"pattern": "^sk-proj-[A-Za-z0-9]+$"}}}
    h = Harness(ScriptedProvider([json.dumps({"apiKey": KEY_SHAPED})]), schemas={"s": schema})
    result = await h.run(llm_params(output={"mode": "json", "schemaRef": "s"}))
    assert error_code(result) == "output_parse_error"
    message = aux_error(result).message
    assert message.startswith("masking secrets in the reply leaves a value that does not match")
    assert KEY_SHAPED not in message
    assert "notes" not in await h.artifacts(result)


async def test_an_unknown_provider_ref_is_refused_when_the_profile_is_saved() -> None:
    h = Harness()
    (problem,) = h.issues(llm_params(providerRef="elsewhere"))
    assert "elsewhere" in problem
    with pytest.raises(ProfileInvalid):
        await h.run(llm_params(providerRef="elsewhere"))


class Vanishing:
    """A provider lookup whose provider goes away after the profile was validated."""

    def __init__(self) -> None:
        self.gone = False

    def get(self, provider_ref: str) -> LlmProvider:
        if self.gone:
            raise ConfigError(f"no provider {provider_ref!r} any more")
        return ScriptedProvider()


async def test_a_provider_that_went_away_is_a_config_error_at_run_time() -> None:
    registry = Vanishing()
    catalog = OperationCatalog(kinds=builtin_kinds(providers=registry))
    catalog.add_definition(OperationDefinition(operation_id="aux", name="Aux", kind="llm"))
    stores = InMemoryStores()
    entry = ProfileOperation(
        operation_id="aux", config=OperationConfig(hooks=(B,), order=1, params=llm_params())
    )
    await stores.profiles.save_profile(
        OperationProfile(
            profile_id="p", name="P", operation_profile_session_id="s1", operations=(entry,)
        )
    )
    runner = make_runner(stores=stores, catalog=catalog)
    first = await runner.run(
        RunRequest(trigger=Trigger.GENERATE, chat_id="c", profile_id="p", user_message="hi")
    )
    assert aux(first).status == OperationStatus.DONE  # the profile was validated then
    registry.gone = True
    result = await runner.run(
        RunRequest(trigger=Trigger.GENERATE, chat_id="c", profile_id="p", user_message="again")
    )
    assert error_code(result) == "config_error"


async def test_timeout_cuts_a_slow_provider() -> None:
    h = Harness(ScriptedProvider([Delayed(10, "too late")]))
    with anyio.fail_after(5):  # safety bound only
        result = await h.run(llm_params(timeoutMs=30))
    op = aux(result)
    assert error_code(result) == "timeout"
    assert op.outputs_summary["attempts"] == 1
    assert op.inputs_summary["timeoutMs"] == 30


async def test_provider_timeout_error_is_timeout() -> None:
    h = Harness(ScriptedProvider([ProviderTimeout("upstream timed out")]))
    assert error_code(await h.run(llm_params())) == "timeout"


async def test_timeout_is_retried_when_listed() -> None:
    h = Harness(ScriptedProvider([Delayed(10, "late"), "in time"]))
    params = llm_params(timeoutMs=30, retry={"maxAttempts": 3, "retryOn": ["timeout"]})
    with anyio.fail_after(5):
        result = await h.run(params)
    op = aux(result)
    assert op.status == OperationStatus.DONE
    assert op.outputs_summary["attempts"] == 2
    assert (await h.artifacts(result))["notes"].value == "in time"


async def test_rate_limit_without_retry_is_rate_limited() -> None:
    h = Harness(ScriptedProvider([RateLimited("slow down", retry_after=0.01), "never"]))
    params = llm_params(retry={"maxAttempts": 3, "retryOn": ["timeout"]})
    result = await h.run(params)
    assert error_code(result) == "rate_limited"
    assert aux(result).outputs_summary["attempts"] == 1
    assert h.provider.calls == 1


@pytest.mark.parametrize(
    ("backoff_ms", "retry_after", "at_least"),
    [(0, 0.02, 0.02), (30, 0.001, 0.03), (0, None, 0.0)],
)
async def test_rate_limit_retry_waits_for_retry_after_or_backoff(
    backoff_ms: int, retry_after: float | None, at_least: float
) -> None:
    seen: list[tuple[float, int]] = []
    replies: list[Any] = [RateLimited("429", retry_after=retry_after), "second"]

    def fn(request: LlmRequest) -> Any:
        seen.append((anyio.current_time(), len(seen) + 1))
        reply = replies.pop(0)
        if isinstance(reply, BaseException):
            raise reply
        return reply

    h = Harness(FunctionProvider(fn))
    params = llm_params(
        retry={"maxAttempts": 2, "backoffMs": backoff_ms, "retryOn": ["rate_limit"]}
    )
    with anyio.fail_after(5):
        result = await h.run(params)
    assert aux(result).status == OperationStatus.DONE
    assert aux(result).outputs_summary["attempts"] == 2
    assert [n for _, n in seen] == [1, 2]
    # anyio.sleep never wakes early by more than the clock's resolution.
    assert seen[1][0] - seen[0][0] >= at_least - 0.001


async def test_exhausted_retries_report_the_last_error() -> None:
    provider = ScriptedProvider(
        [ProviderError("boom 1"), ProviderError("boom 2"), ProviderError("boom 3"), "late"]
    )
    h = Harness(provider)
    params = llm_params(retry={"maxAttempts": 3, "retryOn": ["provider_error"]})
    result = await h.run(params)
    op = aux(result)
    assert error_code(result) == "provider_error"
    assert op.error is not None
    assert op.error.message == "boom 3"
    assert op.outputs_summary["attempts"] == 3
    assert provider.calls == 3


async def test_errors_not_listed_in_retry_on_are_not_retried() -> None:
    h = Harness(ScriptedProvider([RuntimeError("socket closed"), "ok"]))
    params = llm_params(retry={"maxAttempts": 3, "retryOn": ["rate_limit", "timeout"]})
    result = await h.run(params)
    assert error_code(result) == "provider_error"
    assert aux_error(result).message == "RuntimeError: socket closed"
    assert h.provider.calls == 1


async def test_finish_reason_error_is_a_retryable_provider_error() -> None:
    h = Harness(
        ScriptedProvider(
            [LlmResponse(text="", finish_reason="error", raw_finish_reason="overloaded"), "ok"]
        )
    )
    once = await h.run(llm_params())
    assert error_code(once) == "provider_error"
    h.provider.push(LlmResponse(text="", finish_reason="error"), "recovered")
    retried = await h.run(
        llm_params(retry={"maxAttempts": 2, "retryOn": ["provider_error"]}), user="again"
    )
    assert aux(retried).status == OperationStatus.DONE


async def test_content_filter_is_a_policy_error() -> None:
    h = Harness(ScriptedProvider([LlmResponse(text="", finish_reason="content_filter")]))
    assert error_code(await h.run(llm_params())) == "policy_error"


async def test_prompt_effect_after_the_main_llm_is_a_policy_error_without_a_call() -> None:
    # Profile validation already rejects this at save time; the operation checks it again
    # at run time for hosts that build contexts themselves.
    provider = ScriptedProvider()
    definition = OperationDefinition(operation_id="aux", name="Aux", kind="llm")
    operation = LlmOperation(definition, providers=ProviderRegistry({"test": provider}))
    params = LlmParams.model_validate(
        llm_params(promptEffect={"type": "prompt.append_after_last_user"})
    )
    ctx = OperationContext(
        run=RunMeta(
            run_id="r",
            trigger=Trigger.GENERATE,
            chat_id="c",
            branch_id="main",
            user_message_id="u",
            profile_id=None,
            session_key=None,
        ),
        hook=A,
        definition=definition,
        config=OperationConfig(hooks=(A,), order=1),
        params=params,
        history=(),
        artifacts={},
        write_tag="notes",
    )
    result = await operation.execute(ctx)
    assert result.error is not None
    assert result.error.code == "policy_error"
    assert result.inputs_summary["providerRef"] == "test"
    assert provider.calls == 0


async def test_max_input_tokens_is_budget_exceeded_before_the_call() -> None:
    h = Harness()
    result = await h.run(llm_params(prompt="x" * 400, maxInputTokens=99))
    op = aux(result)
    assert error_code(result) == "budget_exceeded"
    assert op.error is not None
    assert op.error.details == {"inputTokens": 100, "maxInputTokens": 99}
    assert h.provider.calls == 0
    assert approximate_tokens("x" * 400) == 100


async def test_a_custom_token_counter_decides() -> None:
    h = Harness(token_counter=lambda text: len(text.split()))
    result = await h.run(llm_params(prompt="one two three", maxInputTokens=3))
    assert aux(result).status == OperationStatus.DONE


async def test_reported_cost_above_the_budget_is_budget_exceeded() -> None:
    costly = LlmResponse(text="expensive", usage=Usage(cost_usd=0.25))
    h = Harness(ScriptedProvider([costly]))
    result = await h.run(llm_params(budget={"maxCostUsd": 0.1}))
    op = aux(result)
    assert error_code(result) == "budget_exceeded"
    assert op.outputs_summary["usage"] == {"costUsd": 0.25}
    assert "notes" not in await h.artifacts(result)


async def test_failed_attempts_over_the_budget_are_not_retried() -> None:
    """The cost is summed after every attempt: once over the budget, no further call is
    made and the operation ends budget_exceeded, even though every attempt failed."""
    failed = LlmResponse(text="", finish_reason="error", usage=Usage(cost_usd=0.006))
    waits = Waits()
    h = Harness(ScriptedProvider([failed] * 5), sleep=waits)
    params = llm_params(
        budget={"maxCostUsd": 0.01},
        retry={"maxAttempts": 5, "backoffMs": 10, "retryOn": ["provider_error"]},
    )
    result = await h.run(params)
    op = aux(result)
    assert h.provider.calls == 2  # 0.006 is within the budget, 0.012 is not
    assert len(waits.seconds) == 1
    assert error_code(result) == "budget_exceeded"
    assert error_details(result) == {"costUsd": 0.012, "maxCostUsd": 0.01, "attempts": 2}
    assert op.outputs_summary["attempts"] == 2
    assert op.outputs_summary["usage"] == {"costUsd": 0.012}


async def test_a_failed_attempt_over_the_budget_is_budget_exceeded_without_retries() -> None:
    failed = LlmResponse(text="", finish_reason="error", usage=Usage(cost_usd=0.02))
    h = Harness(ScriptedProvider([failed] * 3), sleep=Waits())
    params = llm_params(
        budget={"maxCostUsd": 0.01}, retry={"maxAttempts": 3, "retryOn": ["provider_error"]}
    )
    result = await h.run(params)
    assert error_code(result) == "budget_exceeded"
    assert h.provider.calls == 1


async def test_strict_variables_is_template_render_error() -> None:
    h = Harness()
    strict = await h.run(llm_params(prompt="{{ art.missing.value }}", strictVariables=True))
    assert error_code(strict) == "template_render_error"
    assert error_details(strict)["field"] == "prompt"
    assert h.provider.calls == 0
    lenient = await h.run(llm_params(prompt="[{{ art.missing.value }}]"), user="two")
    assert aux(lenient).status == OperationStatus.DONE
    assert h.provider.last_request is not None
    assert h.provider.last_request.messages[-1].content == "[]"


async def test_template_errors_are_refused_at_save_time_naming_the_field() -> None:
    h = Harness()
    (problem,) = h.issues(llm_params(system="{% if %}"))
    assert problem.startswith("system: ")
    (problem,) = h.issues(llm_params(prompt="ok {% endfor %}"))
    assert problem.startswith("prompt: ")


async def test_template_loop_limit_is_template_render_error() -> None:
    engine = TemplateEngine(limits=TemplateLimits(loop_iteration_limit=50))
    h = Harness(engine=engine)
    result = await h.run(llm_params(prompt="{% for i in (1..1000) %}{{ i }}{% endfor %}"))
    op = aux(result)
    assert error_code(result) == "template_render_error"
    assert op.error is not None
    assert op.error.details is not None
    assert op.error.details["limit"] == "loop_iteration_limit"


async def test_credential_is_resolved_and_passed_only_in_the_request() -> None:
    creds = StaticCredentials({"main-key": "s3cr3t-value-for-tests"})
    h = Harness(credentials=creds)
    result = await h.run(llm_params(credentialRef="main-key"))
    assert aux(result).status == OperationStatus.DONE
    request = h.provider.last_request
    assert request is not None
    assert request.credential == "s3cr3t-value-for-tests"
    assert "s3cr3t" not in repr(request)
    assert creds.resolved == ["main-key"]


async def test_unresolvable_credential_is_a_config_error() -> None:
    h = Harness(credentials=StaticCredentials({}))
    result = await h.run(llm_params(credentialRef="who-knows"))
    assert error_code(result) == "config_error"
    assert "who-knows" not in result.model_dump_json()
    no_resolver = Harness()
    assert no_resolver.issues(llm_params(credentialRef="who-knows")) == [
        "credentialRef is set but no credential resolver was given"
    ]


async def test_runs_without_a_registry_end_in_config_error() -> None:
    catalog = OperationCatalog(kinds=builtin_kinds())
    operation = catalog.add_definition(OperationDefinition(operation_id="x", name="X", kind="llm"))
    assert type(operation).__name__ == "LlmOperation"
    stores = InMemoryStores()
    runner = make_runner(stores=stores, catalog=catalog)
    entry = ProfileOperation(
        operation_id="x", config=OperationConfig(hooks=(B,), order=1, params=llm_params())
    )
    await stores.profiles.save_profile(
        OperationProfile(
            profile_id="p", name="P", operation_profile_session_id="s", operations=(entry,)
        )
    )
    result = await runner.run(
        RunRequest(trigger=Trigger.GENERATE, chat_id="c", profile_id="p", user_message="u")
    )
    error = result.operation("x").error
    assert error is not None
    assert error.code == "config_error"


async def test_a_retry_that_would_pass_the_deadline_is_not_made() -> None:
    h = Harness(ScriptedProvider([RateLimited("429", retry_after=30), "never"]))
    params = llm_params(retry={"maxAttempts": 3, "retryOn": ["rate_limit"]})
    with anyio.fail_after(5):  # safety bound: the operation must not sleep 30 s
        result = await h.run(params, timeout_ms=2000)
    op = aux(result)
    assert error_code(result) == "rate_limited"
    assert op.error is not None
    assert "no retry" in op.error.message
    assert op.outputs_summary["attempts"] == 1
    assert h.provider.calls == 1


async def test_the_backoff_doubles_from_backoff_ms_with_jitter() -> None:
    waits = Waits()
    errors = [ProviderError("boom 1"), ProviderError("boom 2"), ProviderError("boom 3")]
    h = Harness(ScriptedProvider([*errors, "fine"]), sleep=waits)
    retry = {"maxAttempts": 4, "backoffMs": 100, "retryOn": ["provider_error"]}
    result = await h.run(llm_params(retry=retry))
    assert aux(result).status == OperationStatus.DONE
    assert aux(result).outputs_summary["attempts"] == 4
    first, second, third = waits.seconds
    # 100 ms doubling, plus a jitter of up to one backoffMs: never earlier than backoffMs.
    assert 0.1 <= first <= 0.2
    assert 0.2 <= second <= 0.3
    assert 0.4 <= third <= 0.5


async def test_the_backoff_is_capped() -> None:
    waits = Waits()
    h = Harness(ScriptedProvider([ProviderTimeout("late")] * 3 + ["fine"]), sleep=waits)
    retry = {"maxAttempts": 4, "backoffMs": 20_000, "retryOn": ["timeout"]}
    result = await h.run(llm_params(retry=retry))
    assert aux(result).status == OperationStatus.DONE
    first, *later = waits.seconds
    assert 20 <= first <= MAX_BACKOFF_SECONDS
    assert later == [MAX_BACKOFF_SECONDS, MAX_BACKOFF_SECONDS]


async def test_a_retry_after_longer_than_the_backoff_wins() -> None:
    waits = Waits()
    h = Harness(ScriptedProvider([RateLimited("429", retry_after=2.5), "fine"]), sleep=waits)
    retry = {"maxAttempts": 2, "backoffMs": 10, "retryOn": ["rate_limit"]}
    result = await h.run(llm_params(retry=retry))
    assert aux(result).status == OperationStatus.DONE
    assert waits.seconds == [2.5]


async def test_the_format_step_down_neither_waits_nor_uses_up_a_retry() -> None:
    waits = Waits()
    provider = ScriptedProvider(
        [ResponseFormatRejected("no schema"), ProviderTimeout("late"), '{"ok": true}'],
        capabilities=ProviderCapabilities(structured_output="json_schema"),
    )
    h = Harness(provider, schemas={"obj": {"type": "object"}}, sleep=waits)
    retry = {"maxAttempts": 2, "backoffMs": 50, "retryOn": ["timeout"]}
    result = await h.run(llm_params(output={"mode": "json", "schemaRef": "obj"}, retry=retry))
    op = aux(result)
    assert op.status == OperationStatus.DONE
    assert op.outputs_summary["attempts"] == 3
    assert len(waits.seconds) == 1  # only before the retry of the timeout


async def test_an_abort_during_the_backoff_ends_the_operation_aborted() -> None:
    signal = AbortSignal()
    asked: list[float] = []

    async def sleep(seconds: float) -> None:
        asked.append(seconds)
        signal.abort()
        await anyio.sleep(seconds)  # a real wait: only the abort can end it in time

    h = Harness(ScriptedProvider([RateLimited("429", retry_after=30), "never"]), sleep=sleep)
    retry = {"maxAttempts": 3, "retryOn": ["rate_limit"]}
    entry = ProfileOperation(
        operation_id="aux",
        config=OperationConfig(hooks=(B,), order=1, params=llm_params(retry=retry)),
    )
    await h.stores.profiles.save_profile(
        OperationProfile(
            profile_id="p", name="P", operation_profile_session_id="s1", operations=(entry,)
        )
    )
    with anyio.fail_after(5):
        result = await h.runner.run(
            RunRequest(trigger=Trigger.GENERATE, chat_id="c", profile_id="p", user_message="x"),
            abort=signal,
        )
    assert asked == [30]
    assert aux(result).status == OperationStatus.ABORTED
    assert result.status.value == "aborted"
    assert h.provider.calls == 1


async def test_abort_during_the_call_ends_the_operation_aborted() -> None:
    signal = AbortSignal()

    async def slow(request: LlmRequest) -> str:
        signal.abort()
        await anyio.sleep(30)
        return "never"

    h = Harness(FunctionProvider(slow))
    entry = ProfileOperation(
        operation_id="aux", config=OperationConfig(hooks=(B,), order=1, params=llm_params())
    )
    await h.stores.profiles.save_profile(
        OperationProfile(
            profile_id="p", name="P", operation_profile_session_id="s1", operations=(entry,)
        )
    )
    with anyio.fail_after(5):
        result = await h.runner.run(
            RunRequest(trigger=Trigger.GENERATE, chat_id="c", profile_id="p", user_message="x"),
            abort=signal,
        )
    assert aux(result).status == OperationStatus.ABORTED
    assert result.status.value == "aborted"
