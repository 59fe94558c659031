"""Chat with any OpenAI-compatible model, with the "notes and stats" profile around it.

One :class:`~opsrun.providers.openai.OpenAIProvider` is both the main LLM (its reply
streams to the terminal) and the provider of the profile's ``llm`` operation, which
writes working notes before the main model answers. Point it at a model with::

    OPSRUN_OPENAI_BASE_URL=http://localhost:11434/v1 OPSRUN_OPENAI_MODEL=llama3.1 \\
        python examples/chat_openai.py              # Ollama; vLLM, llama.cpp, LM Studio alike
    OPENAI_API_KEY=sk-... OPSRUN_OPENAI_MODEL=gpt-4o-mini python examples/chat_openai.py

With none of these variables set it starts :class:`~opsrun.testing.FakeOpenAIServer`,
a local server that speaks the same wire format, and stays offline.
"""

from __future__ import annotations

import os
import sys
from contextlib import ExitStack
from typing import Any

import anyio
from notes_and_stats import PROFILE_PATH, artifacts_of, build_catalog  # the sibling example

from opsrun import InMemoryStores, OperationProfile, Runner, RunRequest
from opsrun.model import MainLlmDelta, RunEvent
from opsrun.providers import ProviderRegistry
from opsrun.providers.openai import OpenAIProvider
from opsrun.testing import FakeOpenAIServer

TURNS = ("We reach the old lighthouse at dusk.", "I climb the stairs, lantern raised.")


def offline_reply(request: FakeOpenAIServer.Request) -> str:
    """The fake server's model: notes for the aux call, a short narration for the chat."""
    users = [m["content"] for m in request.messages if m.get("role") == "user"]
    last = str(users[-1]) if users else ""
    if request.stream:
        return f"(offline model) The wind answers you: {last.splitlines()[-1]!r}"
    return "- Keep the scene dark and quiet.\n- The lighthouse keeper is missing."


def with_provider(profile: OperationProfile, model: str) -> OperationProfile:
    """``profile`` whose llm operation calls providerRef ``openai`` with ``model``."""
    operations = []
    for entry in profile.operations:
        if entry.operation_id == "notes:working_notes":
            params: dict[str, Any] = {
                **entry.config.params,
                "providerRef": "openai",
                "model": model,
            }
            entry = entry.model_copy(
                update={"config": entry.config.model_copy(update={"params": params})}
            )
        operations.append(entry)
    return profile.model_copy(update={"operations": tuple(operations)})


class PrintDeltas:
    """Prints the main model's reply as it streams."""

    async def emit(self, event: RunEvent) -> None:
        if isinstance(event, MainLlmDelta):
            print(event.text, end="", flush=True)


async def chat(provider: OpenAIProvider, model: str) -> int:
    """Two turns of the chat; prints the replies, the operations and the stats panel."""
    stores = InMemoryStores()
    profile = with_provider(
        OperationProfile.model_validate_json(PROFILE_PATH.read_text(encoding="utf-8")), model
    )
    await stores.profiles.save_profile(profile)
    runner = Runner(
        catalog=build_catalog(ProviderRegistry({"openai": provider})),
        stores=stores,
        main_llm=provider,
        events=PrintDeltas(),
    )
    result = None
    for text in TURNS:
        print(f"\n== you: {text}\n   model: ", end="")
        result = await runner.run(
            RunRequest(
                trigger="generate",
                chat_id="demo",
                profile_id=profile.profile_id,
                user_message=text,
                system_prompt="You are the narrator of a short mystery. Answer in two sentences.",
            )
        )
        call = result.run.main_llm
        usage = call.usage.total_tokens if call.usage is not None else "?"
        print(f"\n   run {result.status.value}; main LLM {call.finish_reason}, {usage} tokens")
        if call.error is not None:
            print(f"   main LLM error: {call.error.code}: {call.error.message}")
        for op in result.operation_runs:
            extra = f" ({op.error.code}: {op.error.message})" if op.error else ""
            print(f"   {op.operation_id:<22} {op.status.value}{extra}")
    assert result is not None
    panel = (await artifacts_of(stores, result)).get("stats_panel")
    print("\n== art.stats_panel")
    print(panel.value if panel is not None else "(missing)")
    return 0 if result.status.value == "done" else 1


async def main() -> int:
    """Talk to the configured endpoint, or to a local fake one when none is configured."""
    base_url = os.environ.get("OPSRUN_OPENAI_BASE_URL") or None
    model = os.environ.get("OPSRUN_OPENAI_MODEL") or "gpt-4o-mini"
    key = os.environ.get("OPENAI_API_KEY") or None
    with ExitStack() as stack:
        fake = None
        if base_url is None and key is None:
            fake = stack.enter_context(FakeOpenAIServer(default=offline_reply))
            base_url, key = fake.base_url, "sk-offline-demo-key"
            print(f"offline: FakeOpenAIServer at {base_url} stands in for a model")
        async with OpenAIProvider(model, base_url=base_url, api_key=key) as provider:
            status = await chat(provider, model)
        if fake is not None:
            streamed = sum(r.stream for r in fake.requests)
            print(
                f"\noffline: the fake server answered {len(fake.requests)} requests "
                f"({streamed} streamed)"
            )
    return status


if __name__ == "__main__":
    sys.exit(anyio.run(main))
