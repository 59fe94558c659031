"""OpenTelemetry spans of runs: the tree, the attributes, errors, and what never leaks.

Each test exports to its own ``InMemorySpanExporter`` through a private
``TracerProvider`` given to ``Telemetry``; the global provider is never set.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

import anyio
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from _support import A, B, op, use_profile
from opsrun.errors import ConfigError, OperationFailed, ProviderError, RateLimited
from opsrun.kinds import builtin_kinds
from opsrun.model import (
    MainLlmDelta,
    OperationDefinition,
    OperationResult,
    RunRequest,
    RunResult,
    Usage,
)
from opsrun.operations import AbortSignal, OperationCatalog, OperationContext, SyncOperation
from opsrun.ports import LlmResponse, MainLlm, MainLlmDone
from opsrun.providers import ProviderRegistry
from opsrun.report import render_markdown
from opsrun.runner import MainLlmRetry, Runner, ThreadExecutor
from opsrun.stores import InMemoryStores
from opsrun.telemetry import Telemetry
from opsrun.testing import (
    FakeClock,
    ScriptedMainLlm,
    ScriptedProvider,
    SequentialIds,
    StaticCredentials,
)

pytestmark = pytest.mark.anyio

SECRET = "sk-proj-" + "A1b2C3d4" * 6
"""A key of the shape the default redactor masks (48 characters after the prefix)."""


class Traced:
    """A runner whose spans go to an in-memory exporter, with helpers to read them."""

    def __init__(
        self,
        *,
        capture_content: bool = False,
        max_content_chars: int = 4096,
        main_llm: MainLlm | None = None,
        provider: ScriptedProvider | None = None,
        executor: ThreadExecutor | None = None,
        schemas: dict[str, Any] | None = None,
    ) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider(shutdown_on_exit=False)
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.stores = InMemoryStores()
        self.aux = provider or ScriptedProvider([f"notes, with {SECRET}"])
        kinds = builtin_kinds(
            providers=ProviderRegistry({"openai": self.aux}),
            credentials=StaticCredentials({"key": SECRET}),
            schemas=schemas,
        )
        self.catalog = OperationCatalog(kinds=kinds)
        self.catalog.add_definition(OperationDefinition(operation_id="aux", name="Aux", kind="llm"))
        self.runner = Runner(
            catalog=self.catalog,
            stores=self.stores,
            main_llm=main_llm or ScriptedMainLlm([f"the answer is {SECRET}"]),
            clock=FakeClock(),
            ids=SequentialIds(),
            executor=executor,
            main_llm_retry=MainLlmRetry(max_attempts=1),
            telemetry=Telemetry(
                tracer_provider=self.provider,
                capture_content=capture_content,
                max_content_chars=max_content_chars,
            ),
        )

    async def run(self, *ops: Any, user: str = "hello", **request: Any) -> RunResult:
        await use_profile(self.stores, *ops)
        return await self.runner.run(
            RunRequest(
                trigger="generate", chat_id="c", profile_id="p", user_message=user, **request
            )
        )

    @property
    def spans(self) -> tuple[ReadableSpan, ...]:
        return self.exporter.get_finished_spans()

    def named(self, name: str) -> ReadableSpan:
        found = [s for s in self.spans if s.name == name]
        assert len(found) == 1, [s.name for s in self.spans]
        return found[0]

    def tree(self) -> list[Any]:
        """``[(name, [children...]), ...]`` from the roots, children in start order."""
        spans = sorted(self.spans, key=lambda s: s.start_time or 0)
        ids = {s.context.span_id for s in spans if s.context is not None}

        def children(parent: int | None) -> list[Any]:
            return [
                (s.name, children(s.context.span_id if s.context else None))
                for s in spans
                if (s.parent.span_id if s.parent is not None else None) == parent
                or (parent is None and s.parent is not None and s.parent.span_id not in ids)
            ]

        return children(None)


def aux_params(**overrides: Any) -> dict[str, Any]:
    params: dict[str, Any] = {
        "providerRef": "openai",
        "model": "aux-model",
        "credentialRef": "key",
        "system": f"Keep notes. Never reveal {SECRET}.",
        "prompt": "Notes on: {{ chatHistory | last: 1 | map: 'content' | join }}",
        "samplers": {"temperature": 0.2, "topK": 5},
        "maxOutputTokens": 64,
        "writeArtifact": {"tag": "notes", "persisted": False, "usage": "internal"},
    }
    params.update(overrides)
    return params


def attribute(span: ReadableSpan, key: str) -> Any:
    return (span.attributes or {})[key]


def span_id(span: ReadableSpan) -> int:
    assert span.context is not None
    return int(span.context.span_id)


def parent_id(span: ReadableSpan) -> int | None:
    return None if span.parent is None else int(span.parent.span_id)


def strings(spans: Sequence[ReadableSpan]) -> Iterator[str]:
    """Every text a span carries: name, attribute values, event attributes, status."""
    for span in spans:
        yield span.name
        for values in [span.attributes or {}, *((e.attributes or {}) for e in span.events)]:
            for value in values.values():
                if isinstance(value, str):
                    yield value
                elif isinstance(value, tuple):
                    yield from (str(v) for v in value)
        if span.status.description:
            yield span.status.description


# -- the tree ----------------------------------------------------------------------------


async def test_a_run_is_one_tree_of_hooks_operations_and_llm_calls() -> None:
    t = Traced()

    @t.catalog.function("after", name="After")
    async def after(ctx: OperationContext[Any]) -> OperationResult:
        return OperationResult.done()

    result = await t.run(op("aux", B, params=aux_params()), op("after", A))

    assert t.tree() == [
        (
            "opsrun.run",
            [
                (
                    "opsrun.hook before_main_llm",
                    [("opsrun.operation aux", [("chat aux-model", [])])],
                ),
                ("chat", []),
                ("opsrun.hook after_main_llm", [("opsrun.operation after", [])]),
            ],
        )
    ]
    run = t.named("opsrun.run")
    assert run.kind == SpanKind.INTERNAL
    assert run.status.status_code == StatusCode.UNSET
    assert dict(run.attributes or {}) == {
        "opsrun.run.id": result.run.run_id,
        "opsrun.run.trigger": "generate",
        "opsrun.run.status": "done",
        "opsrun.chat.id": "c",
        "opsrun.chat.branch_id": "main",
        "opsrun.profile.id": "p",
    }
    assert all(s.context.trace_id == run.context.trace_id for s in t.spans)


async def test_operation_and_hook_spans_say_what_ran() -> None:
    t = Traced()

    @t.catalog.function("skipper", name="Skipper", kind="compute")
    async def skipper(ctx: OperationContext[Any]) -> OperationResult:
        return OperationResult.skipped()

    await t.run(op("skipper", B, required=False))
    assert dict(t.named("opsrun.hook before_main_llm").attributes or {}) == {
        "opsrun.hook": "before_main_llm",
        "opsrun.hook.operations": 1,
    }
    span = t.named("opsrun.operation skipper")
    assert dict(span.attributes or {}) == {
        "opsrun.operation.id": "skipper",
        "opsrun.operation.name": "Skipper",
        "opsrun.operation.kind": "compute",
        "opsrun.operation.required": False,
        "opsrun.operation.status": "skipped",
        "opsrun.operation.skipped_reason": "condition_false",
        "opsrun.hook": "before_main_llm",
    }
    assert span.status.status_code == StatusCode.UNSET
    names = [s.name for s in t.spans]
    assert "opsrun.hook after_main_llm" not in names  # nothing to execute: no span


async def test_llm_spans_follow_the_genai_conventions() -> None:
    main = ScriptedMainLlm([MainLlmDone(text="hi", usage=Usage(input_tokens=12, output_tokens=3))])
    aux = ScriptedProvider(
        [
            LlmResponse(
                text="notes",
                finish_reason="length",
                raw_finish_reason="max_tokens",
                usage=Usage(input_tokens=20, output_tokens=64),
                model="aux-model-2024",
                request_id="req-1",
            )
        ]
    )
    t = Traced(main_llm=main, provider=aux)
    params = {"model": "main-model", "provider": "anthropic", "temperature": 0.7, "maxTokens": 99}
    await t.run(op("aux", B, params=aux_params()), main_llm_params=params)

    main_span = t.named("chat main-model")
    assert main_span.kind == SpanKind.CLIENT
    assert dict(main_span.attributes or {}) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "anthropic",
        "gen_ai.request.model": "main-model",
        "gen_ai.request.temperature": 0.7,
        "gen_ai.request.max_tokens": 99,
        "gen_ai.conversation.id": "c",
        "gen_ai.response.finish_reasons": ("stop",),
        "gen_ai.usage.input_tokens": 12,
        "gen_ai.usage.output_tokens": 3,
        "opsrun.llm.call": "main",
        "opsrun.llm.status": "done",
        "opsrun.llm.finish_reason": "completed",
        "opsrun.llm.attempts": 1,
    }
    aux_span = t.named("chat aux-model")
    assert aux_span.kind == SpanKind.CLIENT
    assert dict(aux_span.attributes or {}) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "aux-model",
        "gen_ai.request.temperature": 0.2,
        "gen_ai.request.top_k": 5,
        "gen_ai.request.max_tokens": 64,
        "gen_ai.output.type": "text",
        "gen_ai.conversation.id": "c",
        "gen_ai.response.model": "aux-model-2024",
        "gen_ai.response.id": "req-1",
        "gen_ai.response.finish_reasons": ("max_tokens",),
        "gen_ai.usage.input_tokens": 20,
        "gen_ai.usage.output_tokens": 64,
        "opsrun.llm.call": "aux",
        "opsrun.llm.attempts": 1,
    }


# -- errors ------------------------------------------------------------------------------


async def test_a_failed_run_and_its_failing_operation_are_errors() -> None:
    t = Traced()

    @t.catalog.function("gate", name="Gate")
    async def gate(ctx: OperationContext[Any]) -> OperationResult:
        raise OperationFailed(f"refused key {SECRET}", code="gate_closed")

    await t.run(op("gate", B, required=True))

    span = t.named("opsrun.operation gate")
    assert span.status.status_code == StatusCode.ERROR
    assert span.attributes is not None
    assert span.attributes["error.type"] == "gate_closed"
    assert span.attributes["opsrun.operation.status"] == "error"
    assert span.status.description == "refused key sk-proj-…[REDACTED]"
    assert span.events == ()  # no exception events: a traceback may hold secrets
    run = t.named("opsrun.run")
    assert run.status.status_code == StatusCode.ERROR
    assert run.attributes is not None
    assert run.attributes["opsrun.run.status"] == "failed"
    assert run.attributes["opsrun.run.failed_type"] == "before_barrier"
    assert run.attributes["opsrun.run.failed_operation_id"] == "gate"
    assert run.attributes["opsrun.run.error_code"] == "gate_closed"
    assert run.attributes["error.type"] == "before_barrier"
    assert "chat" not in [s.name for s in t.spans]  # the main LLM never ran


async def test_an_operation_exception_is_an_error_with_its_message_masked() -> None:
    t = Traced()

    @t.catalog.function("boom", name="Boom")
    async def boom(ctx: OperationContext[Any]) -> OperationResult:
        raise ValueError(f"cannot use {SECRET}")

    await t.run(op("boom", B))
    span = t.named("opsrun.operation boom")
    assert span.attributes is not None
    assert span.attributes["error.type"] == "operation_exception"
    assert span.status.description == "ValueError: cannot use sk-proj-…[REDACTED]"


async def test_a_main_llm_error_fails_its_span_and_the_run() -> None:
    main = ScriptedMainLlm([ProviderError(f"denied for {SECRET}", code="provider_error")])
    t = Traced(main_llm=main)
    await t.run()
    span = t.named("chat")
    assert span.status.status_code == StatusCode.ERROR
    assert span.attributes is not None
    assert span.attributes["error.type"] == "provider_error"
    assert span.attributes["opsrun.llm.status"] == "error"
    assert span.status.description is not None
    assert SECRET not in span.status.description
    run = t.named("opsrun.run")
    assert run.attributes is not None
    assert run.attributes["opsrun.run.failed_type"] == "main_llm"
    assert run.attributes["opsrun.run.error_code"] == "provider_error"


async def test_an_aux_llm_error_fails_its_span_and_its_operation() -> None:
    t = Traced(provider=ScriptedProvider([RateLimited(f"slow down {SECRET}")]))
    await t.run(op("aux", B, params=aux_params(retry={"maxAttempts": 1})))
    llm = t.named("chat aux-model")
    assert llm.status.status_code == StatusCode.ERROR
    assert llm.attributes is not None
    assert llm.attributes["error.type"] == "rate_limited"
    assert llm.status.description == "slow down [REDACTED]"  # the credential, masked whole
    operation = t.named("opsrun.operation aux")
    assert operation.attributes is not None
    assert operation.attributes["error.type"] == "rate_limited"


PRIVATE_REPLY = '{"summary": "Alice Smith lives at 12 Main Street"}'
SUMMARY_SCHEMA = {"type": "object", "properties": {"summary": {"type": "array"}}}


@pytest.mark.parametrize("capture", [False, True])
async def test_an_output_parse_error_quoting_the_reply_is_described_without_it(
    capture: bool,
) -> None:
    """The llm kind's output_parse_error message quotes the reply value its schema
    refused; without content capture the status description leaves it out."""
    t = Traced(
        capture_content=capture,
        provider=ScriptedProvider([PRIVATE_REPLY]),
        schemas={"summary": SUMMARY_SCHEMA},
    )
    params = aux_params(output={"mode": "json", "schemaRef": "summary"})
    result = await t.run(op("aux", B, params=params))
    error = result.operation("aux").error
    assert error is not None
    assert "Alice Smith" in error.message  # the run's own record keeps it
    span = t.named("opsrun.operation aux")
    assert attribute(span, "error.type") == "output_parse_error"
    if capture:
        assert span.status.description is not None
        assert "Alice Smith" in span.status.description
        return
    assert span.status.description == (
        "output_parse_error (schemaRef=summary, validator=type, "
        "schemaPath=/properties/summary/type); the message may quote content and is "
        "recorded only with capture_content=True"
    )
    assert not [text for text in strings(t.spans) if "Alice" in text or "Main Street" in text]


async def test_an_aborted_run_is_not_an_error() -> None:
    t = Traced(main_llm=ScriptedMainLlm(["a long reply " * 20], chunk_size=4, delay=0.01))
    signal = AbortSignal()

    @t.catalog.function("slow", name="Slow")
    async def slow(ctx: OperationContext[Any]) -> OperationResult:
        signal.abort()
        await anyio.sleep(5)
        return OperationResult.done()

    await use_profile(t.stores, op("slow", B))
    request = RunRequest(trigger="generate", chat_id="c", profile_id="p", user_message="hi")
    result = await t.runner.run(request, abort=signal)
    assert result.run.status == "aborted"
    run = t.named("opsrun.run")
    assert run.status.status_code == StatusCode.UNSET
    assert run.attributes is not None
    assert run.attributes["opsrun.run.status"] == "aborted"
    assert run.attributes["opsrun.run.abort_reason"] == "user_abort"
    operation = t.named("opsrun.operation slow")
    assert operation.attributes is not None
    assert operation.attributes["opsrun.operation.status"] == "aborted"


# -- context propagation -----------------------------------------------------------------


async def test_spans_an_operation_makes_are_children_of_its_span() -> None:
    t = Traced()
    tracer = t.provider.get_tracer("host")

    @t.catalog.function("lookup", name="Lookup")
    async def lookup(ctx: OperationContext[Any]) -> OperationResult:
        with tracer.start_as_current_span("db.query"):
            await anyio.lowlevel.checkpoint()
        return OperationResult.done()

    await t.run(op("lookup", B))
    assert t.tree()[0][1][0] == (
        "opsrun.hook before_main_llm",
        [("opsrun.operation lookup", [("db.query", [])])],
    )


class Blocking(SyncOperation[Any]):
    definition = OperationDefinition(operation_id="blocking", name="Blocking", kind="compute")

    def run_sync(self, ctx: OperationContext[Any]) -> OperationResult:
        with trace.get_tracer("host", tracer_provider=self.provider).start_as_current_span("cpu"):
            return OperationResult.done()

    provider: TracerProvider


async def test_a_thread_operation_sees_its_span_too() -> None:
    t = Traced(executor=ThreadExecutor(max_threads=1))
    blocking = Blocking()
    blocking.provider = t.provider
    t.catalog.add(blocking)
    await t.run(op("blocking", B))
    assert t.tree()[0][1][0][1] == [("opsrun.operation blocking", [("cpu", [])])]


async def test_the_main_llm_adapter_runs_under_the_main_llm_span() -> None:
    t = Traced()
    seen: list[str] = []

    class Adapter(ScriptedMainLlm):
        def stream(self, request: Any) -> Any:
            span = trace.get_current_span()
            seen.append(getattr(span, "name", "?"))
            return super().stream(request)

    t.runner.main_llm = Adapter()
    await t.run()
    assert seen == ["chat"]


# -- content -----------------------------------------------------------------------------


@pytest.mark.parametrize("capture", [False, True])
async def test_no_secret_reaches_any_attribute_or_event(capture: bool) -> None:
    t = Traced(capture_content=capture)

    @t.catalog.function("fails", name="Fails")
    async def fails(ctx: OperationContext[Any]) -> OperationResult:
        raise OperationFailed(f"bad key {SECRET}", code="bad_key", details={"key": SECRET})

    await t.run(
        op("aux", B, params=aux_params(stop=[SECRET])),
        op("fails", A),
        user=f"my key is {SECRET}, keep it",
        main_llm_params={"model": "main-model", "apiKey": SECRET},
    )
    texts = list(strings(t.spans))
    assert texts
    assert [text for text in texts if SECRET in text or SECRET[8:30] in text] == []
    inputs = [s.attributes.get("gen_ai.input.messages") for s in t.spans if s.attributes]
    captured = [text for text in inputs if text is not None]
    if not capture:
        assert captured == []
        assert not any("keep it" in text for text in texts)
    else:
        assert len(captured) == 2  # the main and the aux call
        main = t.named("chat main-model")
        main_input = json.loads(attribute(main, "gen_ai.input.messages"))
        assert main_input[-1] == {
            "role": "user",
            "parts": [{"type": "text", "content": "my key is sk-proj-…[REDACTED], keep it"}],
        }
        output = json.loads(attribute(main, "gen_ai.output.messages"))
        assert output == [
            {
                "role": "assistant",
                "parts": [{"type": "text", "content": "the answer is sk-proj-…[REDACTED]"}],
                "finish_reason": "stop",
            }
        ]


async def test_captured_content_is_bounded() -> None:
    t = Traced(capture_content=True, max_content_chars=300)
    huge = "word " * 400_000  # 2 MB
    await t.run(user=huge)
    span = t.named("chat")
    assert span.attributes is not None
    text = span.attributes["gen_ai.input.messages"]
    assert isinstance(text, str)
    assert len(text) <= 300
    messages = json.loads(text)
    assert messages[-1]["role"] == "user"
    assert messages[-1]["parts"][0]["content"].endswith("…")
    assert span.attributes["opsrun.content.truncated"] is True
    assert max(len(str(v)) for s in t.spans for v in (s.attributes or {}).values()) <= 300


# -- configuration -----------------------------------------------------------------------


async def test_a_no_op_tracer_provider_runs_as_usual() -> None:
    stores = InMemoryStores()
    runner = Runner(
        catalog=OperationCatalog(),
        stores=stores,
        main_llm=ScriptedMainLlm(),
        telemetry=Telemetry(tracer_provider=trace.NoOpTracerProvider(), capture_content=True),
    )
    result = await runner.run(RunRequest(trigger="generate", chat_id="c", user_message="hi"))
    assert result.run.status == "done"


@pytest.mark.parametrize("chars", [0, 63, -1, 100.5, True])
def test_max_content_chars_is_a_positive_integer(chars: Any) -> None:
    with pytest.raises(ConfigError) as info:
        Telemetry(max_content_chars=chars)
    assert info.value.details["field"] == "max_content_chars"


def test_telemetry_is_off_by_default() -> None:
    runner = Runner(catalog=OperationCatalog(), stores=InMemoryStores(), main_llm=ScriptedMainLlm())
    assert runner.telemetry is None


async def test_a_hook_with_many_operations_has_one_span_each() -> None:
    t = Traced()
    for i in range(5):
        t.catalog.function(f"op{i}", name=f"Op {i}")(_done)
    await t.run(op("op0", B, A), *(op(f"op{i}", B, order=i) for i in range(1, 5)))
    hooks = {s.name: span_id(s) for s in t.spans if s.name.startswith("opsrun.hook")}
    parents = [parent_id(s) for s in t.spans if s.name.startswith("opsrun.operation op")]
    assert parents.count(hooks["opsrun.hook before_main_llm"]) == 5
    assert parents.count(hooks["opsrun.hook after_main_llm"]) == 1  # op0 runs in both hooks


async def _done(ctx: OperationContext[Any]) -> OperationResult:
    return OperationResult.done()


class CutOff:
    """A main LLM whose reply breaks off inside a key: a provider error after two
    deltas that hold only the start of the key."""

    capabilities = ScriptedMainLlm().capabilities

    def __init__(self) -> None:
        self.requests: list[Any] = []

    async def _reply(self) -> Any:
        yield "Use the key sk-proj-Zq8LmN3v"
        yield "Xr7TyU2w"
        raise ProviderError("the connection broke", code="provider_unavailable")

    def stream(self, request: Any) -> Any:
        self.requests.append(request)
        return self._reply()


async def test_a_reply_cut_off_inside_a_key_records_none_of_it() -> None:
    t = Traced(capture_content=True, main_llm=CutOff())
    result = await t.run()
    assert result.status == "failed"
    events = await t.stores.runs.events(result.run.run_id)
    deltas = "".join(e.text for e in events if isinstance(e, MainLlmDelta))
    report = render_markdown(await t.runner.explain(result.run.run_id))
    output = attribute(t.named("chat"), "gen_ai.output.messages")
    for place in (deltas, result.run.main_llm.text or "", report, output):
        assert "Zq8LmN3v" not in place
    assert deltas == result.run.main_llm.text == "Use the key [REDACTED]"
    assert json.loads(output)[0]["finish_reason"] == "provider_error"
