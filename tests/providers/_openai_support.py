"""Builders shared by the OpenAI adapter's tests: requests, a stream collector, keys."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from contextlib import aclosing, asynccontextmanager
from typing import Any

import openai

from opsrun.model import Trigger
from opsrun.ports import LlmRequest, MainLlmDone, MainLlmRequest, ProviderMessage
from opsrun.providers.openai import OpenAIProvider

KEY = "sk-proj-adapterKEY0123456789abcdefXYZ"
"""The key the adapters of these tests are built with."""

_TLS = ssl.create_default_context()
"""One TLS context for every test client: building one costs tens of milliseconds."""


@asynccontextmanager
async def adapter_for(
    base_url: str, model: str = "gpt-test", *, timeout: float = 60.0, **options: Any
) -> AsyncIterator[OpenAIProvider]:
    """An ``OpenAIProvider`` on ``base_url`` with key :data:`KEY`, over a client that
    reuses one TLS context; the client is closed on exit."""
    client = openai.AsyncOpenAI(
        api_key=KEY,
        base_url=base_url,
        timeout=timeout,
        http_client=openai.DefaultAsyncHttpxClient(verify=_TLS),
    )
    try:
        async with OpenAIProvider(model, client=client, **options) as adapter:
            yield adapter
    finally:
        await client.close()


def main_request(text: str = "hello", **params: Any) -> MainLlmRequest:
    """A main LLM request with one system and one user message."""
    return MainLlmRequest(
        messages=(
            ProviderMessage(role="system", content="You are terse."),
            ProviderMessage(role="user", content=text),
        ),
        run_id="run-1",
        chat_id="chat-1",
        user_message_id="msg-1",
        trigger=Trigger.GENERATE,
        params=params,
    )


def llm_request(text: str = "hello", **fields: Any) -> LlmRequest:
    """An ``llm``-kind request for model ``aux-model`` with one user message."""
    fields.setdefault("model", "aux-model")
    return LlmRequest(messages=(ProviderMessage(role="user", content=text),), **fields)


async def collect(
    stream: AsyncIterator[str | MainLlmDone], deltas: list[str] | None = None
) -> tuple[list[str], MainLlmDone]:
    """The deltas of a main LLM stream and its final item; the deltas are also appended
    to ``deltas`` as they come, so a test sees them when the stream raises."""
    seen = [] if deltas is None else deltas
    async with aclosing(stream) as items:  # type: ignore[type-var]  # an async generator
        async for item in items:
            if isinstance(item, MainLlmDone):
                return seen, item
            seen.append(item)
    raise AssertionError("the stream ended without a MainLlmDone")
