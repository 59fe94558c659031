"""OpenAI-compatible chat models through the official ``openai`` SDK (``opsrun[openai]``).

One :class:`OpenAIProvider` is both a run's main LLM (:class:`~opsrun.ports.MainLlm`,
streamed) and a provider for ``kind="llm"`` operations
(:class:`~opsrun.ports.LlmProvider`). With ``base_url`` it talks to any server that
speaks the Chat Completions API: OpenAI, vLLM, Ollama (``/v1``), the llama.cpp server,
LM Studio, OpenRouter. The SDK's own retries are off: opsrun retries (the main LLM call
through ``MainLlmRetry``, ``llm`` operations through their ``retry`` settings).

Example::

    from opsrun.providers.openai import OpenAIProvider

    async with OpenAIProvider("gpt-4o-mini", api_key=key) as model:
        runner = Runner(..., main_llm=model,
                        catalog=OperationCatalog(kinds=builtin_kinds(
                            providers=ProviderRegistry({"openai": model}))))
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from typing import Any

import anyio

try:
    import openai
except ImportError as exc:  # the extra is not installed
    raise ImportError(
        "opsrun.providers.openai needs the openai package: pip install 'opsrun[openai]'"
    ) from exc

from ..errors import ConfigError, ProviderError
from ..ports import (
    LlmRequest,
    LlmResponse,
    MainLlmDone,
    MainLlmRequest,
    ProviderCapabilities,
)
from ._openai._errors import translate
from ._openai._reply import llm_response
from ._openai._request import (
    SETTINGS,
    create_kwargs,
    default_capabilities,
    is_openai_endpoint,
    messages_param,
    request_settings,
    response_format_param,
    settings_from,
)
from ._openai._stream import ChunkReader
from ._owned import OwnsClient, shown_url

__all__ = ["OpenAIProvider"]

_NO_KEY = "no-key"
"""What the SDK client is given when there is no key; the header is then left out."""

_Headers = Mapping[str, str | openai.Omit]


class OpenAIProvider(OwnsClient):
    """An OpenAI-compatible chat model: the main LLM and an ``llm``-kind provider in one.

    Args:
        model: The model of main LLM calls (``llm`` operations name their own, in
            ``LlmRequest.model``). ``main_llm_params["model"]`` overrides it per run.
        base_url: The API root (``http://localhost:11434/v1`` for Ollama); default
            OpenAI's (or ``OPENAI_BASE_URL``).
        api_key: The key of calls that bring no credential of their own; default
            ``OPENAI_API_KEY``. Without either, requests carry no ``Authorization``
            header (fine for local servers). An ``llm`` operation's resolved
            ``credentialRef`` (``LlmRequest.credential``) replaces it for that call.
        client: An ``openai.AsyncOpenAI`` to use instead of building one (not with
            ``base_url``, ``api_key`` or ``organization``; its own timeout applies); the
            adapter uses a copy with ``max_retries=0`` and never closes it.
        capabilities: What to declare; default: ``json_schema_strict`` on OpenAI's
            API and ``json_schema`` elsewhere, ``developer_role`` as below.
        developer_role: Whether ``developer`` messages are sent as such; default: on
            OpenAI's API for the o-series from o1 (not o1-mini or o1-preview),
            GPT-4.1, GPT-4.5 and GPT-5 onwards, else off (sent as ``system``).
        timeout: Seconds one HTTP request of the client the adapter builds may take
            (connect, each read); None: no limit.
        organization: OpenAI organization header (default ``OPENAI_ORG_ID``).
        default_params: Settings for every call, overridden by the run's
            ``main_llm_params`` and by an ``llm`` request's own values: ``model`` (main
            LLM only), ``temperature``, ``top_p``, ``top_k``, ``frequency_penalty``,
            ``presence_penalty``, ``seed``, ``max_output_tokens``, ``max_tokens``,
            ``max_completion_tokens``, ``stop``, ``reasoning_effort`` (camelCase too).
        stream_usage: Ask streams for token usage (``stream_options.include_usage``);
            turn off for servers that refuse ``stream_options``.

    Raises:
        ConfigError: ``model`` is empty, ``default_params`` has a key that is not a
            setting, or ``client`` comes with connection arguments.
    """

    _client: openai.AsyncOpenAI

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        client: openai.AsyncOpenAI | None = None,
        capabilities: ProviderCapabilities | None = None,
        developer_role: bool | None = None,
        timeout: float | None = 60.0,
        organization: str | None = None,
        default_params: Mapping[str, Any] | None = None,
        stream_usage: bool = True,
    ) -> None:
        if not model:
            raise ConfigError("OpenAIProvider needs a model name")
        defaults, unknown = settings_from(default_params or {})
        if unknown:
            raise ConfigError(
                f"default_params has keys that are not settings: {', '.join(sorted(unknown))} "
                f"(settings: {', '.join(SETTINGS)})"
            )
        self.model = model
        self._defaults = defaults
        self._stream_usage = stream_usage
        if client is not None:
            given = {"base_url": base_url, "api_key": api_key, "organization": organization}
            clashes = sorted(name for name, value in given.items() if value is not None)
            if clashes:
                raise ConfigError(
                    f"pass {', '.join(clashes)} to your client, not beside client= "
                    "(base_url, api_key and organization belong to the client)"
                )
            self._client = client.with_options(max_retries=0)
            self._owns_client, self._keyless = False, False
        else:
            key = api_key or os.environ.get("OPENAI_API_KEY")
            self._client = openai.AsyncOpenAI(
                api_key=key or _NO_KEY,
                base_url=base_url,
                organization=organization,
                timeout=timeout,
                max_retries=0,
            )
            self._owns_client, self._keyless = True, not key
        self._openai_endpoint = is_openai_endpoint(self.base_url)
        self._capabilities = capabilities or default_capabilities(
            model, self.base_url, developer_role
        )

    # -- both ports ------------------------------------------------------------------------

    @property
    def capabilities(self) -> ProviderCapabilities:
        """What the endpoint accepts (structured output level, ``developer`` messages)."""
        return self._capabilities

    @property
    def base_url(self) -> str:
        """The API root requests go to."""
        return str(self._client.base_url)

    @property
    def client(self) -> openai.AsyncOpenAI:
        """The SDK client (a copy of the one given, with the SDK's retries off)."""
        return self._client

    def __repr__(self) -> str:
        return f"OpenAIProvider(model={self.model!r}, base_url={shown_url(self.base_url)!r})"

    # -- kind="llm" ------------------------------------------------------------------------

    async def complete(self, request: LlmRequest) -> LlmResponse:
        """Run one non-streamed completion for an ``llm`` operation.

        ``request.timeout`` bounds the HTTP request; ``request.credential``, when set,
        is the key of this call.

        Raises:
            ProviderTimeout: no answer in time (code ``timeout``).
            RateLimited: HTTP 429, with ``retry_after`` from ``retry-after-ms`` or
                ``Retry-After``.
            ResponseFormatRejected: the provider refused the ``response_format`` sent.
            ProviderUnavailable: a server error, an overload or a failed connection.
            ProviderError: ``provider_auth`` (401, 403), ``context_length_exceeded``,
                ``content_filter``, ``bad_request`` (other 4xx), ``provider_error`` (also
                a 200 that is not a completion), ``provider_closed`` (after
                :meth:`aclose`).
        """
        self._check_open()
        settings = {**self._defaults, **request_settings(request)}
        response_format = response_format_param(request.response_format)
        kwargs = create_kwargs(settings, openai_endpoint=self._openai_endpoint)
        if response_format is not None:
            kwargs["response_format"] = response_format
        if request.timeout is not None:
            kwargs["timeout"] = request.timeout
        headers = self._headers(request.credential)
        if headers is not None:
            kwargs["extra_headers"] = headers
        messages = messages_param(
            request.messages, developer_role=self._capabilities.developer_role
        )
        try:
            completion = await self._client.chat.completions.create(
                model=request.model or str(settings.get("model") or self.model),
                messages=messages,
                stream=False,
                **kwargs,
            )
        except openai.OpenAIError as exc:
            raise self._translate(exc, request.credential, response_format is not None) from exc
        except json.JSONDecodeError as exc:  # the SDK parses a JSON content type itself
            raise ProviderError(
                "the provider answered HTTP 200 with a body that is not JSON"
            ) from exc
        return llm_response(completion, secrets=self._secrets(request.credential))

    # -- the main LLM ----------------------------------------------------------------------

    def stream(self, request: MainLlmRequest) -> AsyncIterator[str | MainLlmDone]:
        """Stream the main LLM's reply: text deltas, then one :class:`MainLlmDone`.

        ``request.params`` (the run's ``main_llm_params``) may set ``model`` and the
        other settings; ``provider`` is ignored. Closing the iterator (an abort, a
        deadline, a cancelled caller) closes the HTTP stream.

        Raises:
            ProviderError: ``bad_request`` for a key of ``params`` that is not a
                setting (before any request), and every error :meth:`complete` raises.
            ProviderUnavailable: also when the stream ends before the provider sent a
                finish reason (a cut connection); the text so far was already yielded.

        A server that answers with a whole JSON body instead of an event stream is
        read as well: a completion gives its text and the finish, an error object
        its error.
        """
        return self._stream(request)

    async def _stream(self, request: MainLlmRequest) -> AsyncGenerator[str | MainLlmDone, None]:
        self._check_open()
        settings = self._main_settings(request.params)
        kwargs = create_kwargs(settings, openai_endpoint=self._openai_endpoint)
        if self._stream_usage:
            kwargs["stream_options"] = {"include_usage": True}
        headers = self._headers(None)
        if headers is not None:
            kwargs["extra_headers"] = headers
        messages = messages_param(
            request.messages, developer_role=self._capabilities.developer_role
        )
        call = self._client.chat.completions.with_streaming_response.create(
            model=str(settings.get("model") or self.model),
            messages=messages,
            stream=True,
            **kwargs,
        )
        try:
            response = await call.__aenter__()
        except openai.OpenAIError as exc:
            raise self._translate(exc, None, False) from exc
        reader = ChunkReader(response.http_response, secrets=self._secrets(None))
        try:
            while (piece := await reader.next_piece()) is not None:
                yield piece
        finally:
            await reader.close()
            with anyio.CancelScope(shield=True):
                await call.__aexit__(None, None, None)
        yield reader.reply.done()

    def _main_settings(self, params: Mapping[str, Any]) -> dict[str, Any]:
        settings, unknown = settings_from(params)
        if unknown:
            raise ProviderError(
                f"main_llm_params has keys the OpenAI adapter does not send: "
                f"{', '.join(sorted(unknown))} (it sends: {', '.join(SETTINGS)})",
                code="bad_request",
                details={"unknown": sorted(unknown)},
            )
        model = settings.get("model")
        if model is not None and not (isinstance(model, str) and model):
            raise ProviderError("main_llm_params.model must be a model name", code="bad_request")
        return {**self._defaults, **settings}

    # -- helpers ---------------------------------------------------------------------------

    def _headers(self, credential: str | None) -> _Headers | None:
        """Per-call ``Authorization``: the call's credential, none at all, or the client's."""
        if credential:
            return {"Authorization": f"Bearer {credential}"}
        if self._keyless:
            return {"Authorization": openai.omit}
        return None

    def _secrets(self, credential: str | None) -> tuple[str | None, ...]:
        """Keys that must not appear in an error message."""
        return (credential, None if self._keyless else self._client.api_key)

    def _translate(
        self, exc: openai.OpenAIError, credential: str | None, format_sent: bool
    ) -> ProviderError:
        return translate(exc, format_sent=format_sent, secrets=self._secrets(credential))
