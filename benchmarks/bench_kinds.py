"""Built-in kind benchmarks: what ``template`` and ``llm`` add around their real work.

    python benchmarks/bench_kinds.py [--quick]

1. ``TemplateOperation.execute`` rendering a cached template against 50 artifacts and 200
   history messages (context building, sandbox limits, redaction of the output, the
   artifact write and summaries included) vs a bare python-liquid render of the same
   template and data. Target: at most 3x.
2. ``LlmOperation.execute`` around a zero-latency provider: microseconds per call that
   are not the provider's (rendering two small templates, hashing, request and result
   building, redaction, summaries).

Timings are CPU time of this process (``time.process_time``); the two sides of each
comparison are measured in interleaved rounds.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import anyio
import liquid

from opsrun import Hook, OperationConfig, OperationContext, OperationDefinition
from opsrun.kinds import LlmOperation, TemplateOperation
from opsrun.kinds.liquid import TemplateEngine
from opsrun.model import (
    Artifact,
    ArtifactUsage,
    ChatMessage,
    ChatRole,
    LlmParams,
    MessageVariant,
    TemplateParams,
    Trigger,
)
from opsrun.operations import RunMeta
from opsrun.providers import LlmRequest, LlmResponse, ProviderCapabilities, ProviderRegistry

NOW = datetime(2026, 1, 1, tzinfo=UTC)


class ZeroLatencyProvider:
    """Returns one prebuilt response at once."""

    capabilities = ProviderCapabilities()
    _response = LlmResponse(text="- a short note", request_id="r")

    async def complete(self, request: LlmRequest) -> LlmResponse:
        return self._response


def history(n: int) -> tuple[ChatMessage, ...]:
    messages = []
    for i in range(n):
        role = ChatRole.USER if i % 2 == 0 else ChatRole.ASSISTANT
        text = f"message {i}: the lantern flickers as the tide comes in, step {i}."
        messages.append(
            ChatMessage(
                message_id=f"m{i}",
                chat_id="c",
                branch_id="main",
                role=role,
                variants=(MessageVariant(variant_id=f"v{i}", content=text),),
                selected_variant_id=f"v{i}",
            )
        )
    return tuple(messages)


def artifacts(n: int) -> dict[str, Artifact]:
    out = {}
    for i in range(n):
        value: Any = (
            {"hp": i, "name": f"npc {i}", "items": ["rope", "lamp"]}
            if i % 2
            else f"fact number {i} about the lighthouse"
        )
        out[f"a{i}"] = Artifact(
            tag=f"a{i}",
            usage=ArtifactUsage.INTERNAL,
            persisted=True,
            value=value,
            version=3,
            updated_at=NOW,
        )
    return out


def context(definition: OperationDefinition, params: Any, arts: dict[str, Artifact],
            hist: tuple[ChatMessage, ...]) -> OperationContext:  # fmt: skip
    return OperationContext(
        run=RunMeta(
            run_id="r",
            trigger=Trigger.GENERATE,
            chat_id="c",
            branch_id="main",
            user_message_id="m0",
            profile_id="p",
            session_key=None,
        ),
        hook=Hook.BEFORE_MAIN_LLM,
        definition=definition,
        config=OperationConfig(hooks=(Hook.BEFORE_MAIN_LLM,), order=1),
        params=params,
        history=hist,
        artifacts=arts,
        write_tag="out",
    )


TEMPLATE = (
    # Standard Liquid only (``offset``, not opsrun's ``last: n``) so that bare python-liquid
    # renders the very same text.
    "{% for m in chatHistory offset: 160 %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
    "Facts:\n"
    + "".join(
        f"- {{{{ art.a{i}.value.name }}}} hp {{{{ art.a{i}.value.hp }}}}\n"
        if i % 2
        else f"- {{{{ art.a{i}.value }}}}\n"
        for i in range(50)
    )
    + "Messages: {{ chatHistory | size }}"
)


async def compare(
    ours: Callable[[], Awaitable[Any]],
    theirs: Callable[[], Awaitable[Any]],
    repeat: int,
    rounds: int = 7,
) -> tuple[float, float]:
    """Median CPU seconds per call of each, best round; rounds alternate so load hits both."""
    best: dict[int, float] = {0: float("inf"), 1: float("inf")}
    for _ in range(rounds):
        for index, fn in enumerate((ours, theirs)):
            samples = []
            for _ in range(repeat):
                t0 = time.process_time()
                await fn()
                samples.append(time.process_time() - t0)
            best[index] = min(best[index], statistics.median(samples))
    return best[0], best[1]


async def bench_template(repeat: int) -> None:
    arts, hist = artifacts(50), history(200)
    definition = OperationDefinition(operation_id="t", name="T", kind="template")
    params = TemplateParams.model_validate({"template": TEMPLATE, "writeArtifact": {"tag": "out"}})
    operation = TemplateOperation(definition, engine=TemplateEngine())
    ctx = context(definition, params, arts, hist)
    result = await operation.execute(ctx)
    assert result.status.value == "done", result.error
    data = ctx.template_context()
    bare = liquid.Environment().from_string(TEMPLATE)
    assert bare.render(**data) == result.effects.artifact.value  # type: ignore[union-attr]

    async def through_operation() -> None:
        await operation.execute(ctx)

    async def bare_render() -> None:
        bare.render(**data)

    ours, theirs = await compare(through_operation, bare_render, repeat)
    print("1. template: 50 artifacts, 200 history messages, cached template (CPU time)")
    print(f"   TemplateOperation.execute  {ours * 1e6:9.1f} µs")
    print(f"   bare python-liquid render  {theirs * 1e6:9.1f} µs")
    print(f"   ratio                      {ours / theirs:9.2f}x  (target <= 3x)")


async def bench_llm(repeat: int) -> None:
    provider = ZeroLatencyProvider()
    definition = OperationDefinition(operation_id="n", name="N", kind="llm")
    params = LlmParams.model_validate(
        {
            "providerRef": "zero",
            "model": "m",
            "system": "You keep notes for {{ run.chatId }}.",
            "prompt": "Last: {{ chatHistory | last: 1 | map: 'content' | join }}",
            "samplers": {"temperature": 0.2},
            "timeoutMs": 1000,
            "writeArtifact": {"tag": "out"},
            "promptEffect": {"type": "prompt.append_after_last_user"},
        }
    )
    operation = LlmOperation(definition, providers=ProviderRegistry({"zero": provider}))
    ctx = context(definition, params, artifacts(5), history(10))
    result = await operation.execute(ctx)
    assert result.status.value == "done", result.error
    request = LlmRequest(messages=(), model="m")

    async def through_operation() -> None:
        await operation.execute(ctx)

    async def provider_only() -> None:
        await provider.complete(request)

    ours, bare = await compare(through_operation, provider_only, repeat)
    print("2. llm: overhead around a zero-latency provider call (CPU time)")
    print(f"   LlmOperation.execute       {ours * 1e6:9.1f} µs per call")
    print(f"   provider.complete alone    {bare * 1e6:9.1f} µs per call")
    print(f"   overhead                   {(ours - bare) * 1e6:9.1f} µs per call")


async def main(quick: bool) -> None:
    repeat = 50 if quick else 300
    await bench_template(repeat)
    await bench_llm(repeat * 4)


if __name__ == "__main__":
    anyio.run(main, "--quick" in sys.argv)
