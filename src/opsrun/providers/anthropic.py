"""Anthropic's Messages API as the run's main LLM and as an ``llm``-kind provider.

Needs the official SDK: ``pip install 'opsrun[anthropic]'``. One
:class:`AnthropicProvider` serves both ports: :class:`~opsrun.ports.MainLlm` (streamed
text) and :class:`~opsrun.ports.LlmProvider` (one completion). The SDK's own retries are
off; opsrun retries what is retryable (the main LLM call through ``MainLlmRetry``, an
``llm`` operation through its ``retry`` policy).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from typing import Any

import anyio

try:
    from anthropic import AsyncAnthropic, omit
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "opsrun.providers.anthropic needs the Anthropic SDK: pip install 'opsrun[anthropic]'"
    ) from exc
from anthropic.types import Message

from ..errors import ConfigError
from ..ports import (
    STRUCTURED_OUTPUT_LEVELS,
    LlmRequest,
    LlmResponse,
    MainLlmDone,
    MainLlmRequest,
    ProviderCapabilities,
    StructuredOutput,
)
from ._anthropic._errors import not_a_message, translate
from ._anthropic._messages import SystemPlacement
from ._anthropic._request import (
    Call,
    Defaults,
    finish_reason,
    llm_call,
    main_call,
    reply_text,
    usage_of,
)
from ._anthropic._stream import MessageReader
from ._owned import OwnsClient, shown_url

__all__ = ["AnthropicProvider"]


class AnthropicProvider(OwnsClient):
    """The Anthropic Messages API behind opsrun's main LLM and ``llm``-kind ports.

    As the main LLM, :meth:`stream` yields text deltas and a final
    :class:`~opsrun.ports.MainLlmDone` with usage and the normalised stop reason
    (``end_turn``/``stop_sequence`` → ``stop``, ``max_tokens`` → ``length``, ``refusal``
    → ``content_filter``; the API's value is kept as ``raw_finish_reason``). As an
    ``llm`` provider, :meth:`complete` makes one call, with the request's resolved
    credential (``LlmRequest.credential``) as the API key of that call only.

    JSON output (see ``capabilities``): ``json_schema_strict`` sends the schema as the
    API's output format (``output_config.format``, for models with structured outputs);
    ``json_schema`` forces a single tool whose input schema is the JSON Schema and
    returns the tool's input as the reply; ``json_object`` appends a JSON-only
    instruction to the system prompt. A schema or format the API rejects raises
    :class:`~opsrun.errors.ResponseFormatRejected`, so the ``llm`` kind steps down.

    Args:
        model: The model used unless a request names one (``LlmRequest.model``,
            ``MainLlmRequest.params["model"]``).
        api_key: The API key of calls without a request credential (the main LLM's);
            None lets the SDK find one (``ANTHROPIC_API_KEY``…).
        base_url: Another API address (a proxy, :class:`opsrun.testing.FakeAnthropicServer`).
        client: An ``anthropic.AsyncAnthropic`` to use instead (not with ``api_key`` or
            ``base_url``); it is used with its retries off and is not closed by
            :meth:`aclose`.
        max_tokens: ``max_tokens`` unless a request sets its own.
        timeout: Seconds a call may wait for the API (for a stream: between two
            chunks) unless a request sets its own.
        default_params: Further Messages API fields for every call (``temperature``,
            ``metadata``, ``thinking``, ``stop_sequences``, ``output_config``…);
            a request's own values win.
        structured_output: The strongest JSON output level to declare.
        system_in_conversation: Where a system message after the first user or
            assistant message goes: ``user`` keeps its place as a user turn prefixed
            ``[system]``; ``system`` moves it into the top-level system prompt.

    Raises:
        ConfigError: conflicting or invalid arguments.
    """

    _client: AsyncAnthropic

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        client: AsyncAnthropic | None = None,
        max_tokens: int = 1024,
        timeout: float = 60.0,
        default_params: Mapping[str, Any] | None = None,
        structured_output: StructuredOutput = "json_schema",
        system_in_conversation: SystemPlacement = "user",
    ) -> None:
        if not model:
            raise ConfigError("model must not be empty")
        if client is not None and (api_key is not None or base_url is not None):
            raise ConfigError("pass either client or api_key/base_url, not both")
        if max_tokens < 1 or not timeout > 0:
            raise ConfigError("max_tokens and timeout must be positive")
        if structured_output not in STRUCTURED_OUTPUT_LEVELS:
            raise ConfigError(f"structured_output must be one of {STRUCTURED_OUTPUT_LEVELS}")
        if system_in_conversation not in ("user", "system"):
            raise ConfigError("system_in_conversation must be 'user' or 'system'")
        self._defaults = Defaults(
            model=model,
            max_tokens=max_tokens,
            params=Defaults.checked_params(default_params),
            system_in_conversation=system_in_conversation,
        )
        self._timeout = timeout
        self._capabilities = ProviderCapabilities(structured_output=structured_output)
        self._owns_client = client is None
        self._client = (
            client.with_options(max_retries=0)
            if client is not None
            else AsyncAnthropic(api_key=api_key, base_url=base_url, max_retries=0, timeout=timeout)
        )

    @property
    def model(self) -> str:
        """The default model."""
        return self._defaults.model

    @property
    def capabilities(self) -> ProviderCapabilities:
        """The declared structured-output level; ``developer`` messages arrive as system."""
        return self._capabilities

    # -- LlmProvider -----------------------------------------------------------------------

    async def complete(self, request: LlmRequest) -> LlmResponse:
        """Make one Messages API call for an ``llm`` operation.

        Raises:
            ProviderTimeout: no answer within the request's (or the provider's) timeout.
            RateLimited: HTTP 429; ``retry_after`` from the response headers.
            ProviderUnavailable: overloaded (529), another server error, or the
                connection failed.
            ResponseFormatRejected: the API refused the schema or output format.
            ProviderError: ``provider_auth`` (401/403), ``context_length_exceeded``,
                ``content_filter``, ``bad_request`` (other 4xx), ``provider_error`` (also
                a 200 that is not a message) or ``provider_closed`` (after
                :meth:`aclose`).
        """
        self._check_open()
        call = llm_call(request, self._defaults)
        credential = request.credential
        client = self._client if not credential else self._client.with_options(api_key=credential)
        secrets = self._secrets(credential)
        try:
            message: object = await client.messages.create(
                **_arguments(call), timeout=request.timeout or self._timeout
            )
        except Exception as exc:
            raise translate(exc, secrets=secrets, format_requested=call.format_requested) from exc
        if not isinstance(message, Message) or not isinstance(message.content, list):
            body = message.to_dict() if isinstance(message, Message) else message
            raise not_a_message(body, secrets=secrets)
        usage = message.usage
        stop = message.stop_reason
        return LlmResponse(
            text=reply_text(list(message.content), call.tool_name),
            finish_reason=finish_reason(stop),
            raw_finish_reason=stop,
            usage=None
            if usage is None
            else usage_of(
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                cache_creation=usage.cache_creation_input_tokens,
                cache_read=usage.cache_read_input_tokens,
            ),
            model=message.model or None,
            request_id=getattr(message, "_request_id", None) or message.id,
        )

    # -- MainLlm ---------------------------------------------------------------------------

    def stream(self, request: MainLlmRequest) -> AsyncIterator[str | MainLlmDone]:
        """Stream the run's main generation: text deltas, then one ``MainLlmDone``.

        Closing the iterator early (an abort, a deadline) closes the HTTP stream.
        Reading stops at ``message_stop``; events and deltas of types the adapter does
        not know are skipped. A server that answers with a whole JSON body instead of
        an event stream is read as well: a message gives its text and the finish, an
        error body its error.

        Raises:
            ProviderTimeout: no answer, or no next chunk, within ``timeout``.
            RateLimited: HTTP 429; ``retry_after`` from the response headers.
            ProviderUnavailable: overloaded, another server error, a failed connection,
                or a stream that ended before ``message_stop``.
            ProviderError: ``provider_auth``, ``context_length_exceeded``,
                ``content_filter``, ``bad_request`` (also for invalid ``params``),
                ``provider_error`` or ``provider_closed``.
        """
        return self._stream(request)

    async def _stream(self, request: MainLlmRequest) -> AsyncGenerator[str | MainLlmDone, None]:
        self._check_open()
        call = main_call(request, self._defaults)
        secrets = self._secrets(None)
        streaming = self._client.messages.with_streaming_response.create(
            **_arguments(call), stream=True, timeout=self._timeout
        )
        try:
            response = await streaming.__aenter__()
        except Exception as exc:
            raise translate(exc, secrets=secrets) from exc
        reader = MessageReader(response.http_response, secrets)
        try:
            while (piece := await reader.next_piece()) is not None:
                yield piece
        finally:
            await reader.close()
            with anyio.CancelScope(shield=True):
                await streaming.__aexit__(None, None, None)
        yield reader.done()

    # -- lifecycle -------------------------------------------------------------------------

    def __repr__(self) -> str:
        base_url = shown_url(str(self._client.base_url))
        return f"AnthropicProvider(model={self.model!r}, base_url={base_url!r})"

    def _secrets(self, credential: str | None) -> tuple[str, ...]:
        """Keys that must not appear in an error message."""
        return tuple(s for s in (credential, self._client.api_key, self._client.auth_token) if s)


def _arguments(call: Call) -> dict[str, Any]:
    """``messages.create`` keyword arguments (without ``stream`` and ``timeout``)."""
    conversation = call.conversation
    return {
        "model": call.model,
        "max_tokens": call.max_tokens,
        "messages": conversation.messages,
        "system": conversation.system if conversation.system is not None else omit,
        "stop_sequences": call.stop_sequences or omit,
        "tools": call.tools if call.tools is not None else omit,
        "tool_choice": call.tool_choice if call.tool_choice is not None else omit,
        "output_config": call.output_config if call.output_config is not None else omit,
        "extra_body": call.extra_body or None,
    }
