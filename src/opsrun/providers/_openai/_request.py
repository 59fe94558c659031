"""What the OpenAI adapter sends: endpoint rules, capabilities, messages, settings, formats."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from openai.types.chat import (
    ChatCompletionAssistantMessageParam,
    ChatCompletionDeveloperMessageParam,
    ChatCompletionMessageParam,
    ChatCompletionSystemMessageParam,
    ChatCompletionUserMessageParam,
)
from openai.types.chat.completion_create_params import ResponseFormat as WireResponseFormat
from openai.types.shared_params.response_format_json_schema import JSONSchema

from ...errors import ProviderError
from ...ports import LlmRequest, ProviderCapabilities, ProviderMessage, ResponseFormat

__all__ = [
    "SETTINGS",
    "create_kwargs",
    "default_capabilities",
    "is_openai_endpoint",
    "messages_param",
    "request_settings",
    "response_format_param",
    "schema_name",
    "settings_from",
    "supports_developer_role",
]

OPENAI_HOST = "api.openai.com"

SETTINGS: tuple[str, ...] = (
    "model",
    "temperature",
    "top_p",
    "top_k",
    "frequency_penalty",
    "presence_penalty",
    "seed",
    "max_output_tokens",
    "max_tokens",
    "max_completion_tokens",
    "stop",
    "reasoning_effort",
)
"""Generation settings the adapter passes on, by their snake_case names."""

_ALIASES: dict[str, str] = {
    "topP": "top_p",
    "topK": "top_k",
    "frequencyPenalty": "frequency_penalty",
    "presencePenalty": "presence_penalty",
    "maxOutputTokens": "max_output_tokens",
    "maxTokens": "max_tokens",
    "maxCompletionTokens": "max_completion_tokens",
    "reasoningEffort": "reasoning_effort",
}
"""camelCase spellings accepted for the settings (the profile JSON's style)."""

IGNORED: frozenset[str] = frozenset({"provider"})
"""Keys a host may keep in ``main_llm_params`` for its own routing; not sent."""

_DEVELOPER = re.compile(r"^(?:openai/)?(?:o[1-9]\d*|gpt-4\.1|gpt-4\.5|gpt-[5-9])(?:$|[-.:_])", re.I)
_NO_DEVELOPER = re.compile(r"^(?:openai/)?o1-(?:mini|preview)", re.I)
_SCHEMA_NAME_CHARS = re.compile(r"[^A-Za-z0-9_-]")


def is_openai_endpoint(base_url: str | None) -> bool:
    """True for OpenAI's own API (no ``base_url``, or one on ``api.openai.com``)."""
    if base_url is None:
        return True
    return (urlsplit(base_url).hostname or "").lower() == OPENAI_HOST


def supports_developer_role(model: str) -> bool:
    """True for OpenAI models that take ``developer`` messages: the o-series reasoning
    models from o1 (not o1-mini or o1-preview), GPT-4.1, GPT-4.5 and GPT-5 onwards."""
    return _DEVELOPER.match(model) is not None and _NO_DEVELOPER.match(model) is None


def default_capabilities(
    model: str, base_url: str | None, developer_role: bool | None
) -> ProviderCapabilities:
    """What the adapter declares when the host gives no ``capabilities``.

    OpenAI's API: ``json_schema_strict``, and ``developer`` messages for the models of
    :func:`supports_developer_role`. Any other endpoint: ``json_schema`` (vLLM, Ollama,
    llama.cpp and LM Studio honour a schema; a refusal steps down) and ``system`` only.
    ``developer_role``, when given, decides that part alone.
    """
    openai = is_openai_endpoint(base_url)
    if developer_role is None:
        developer_role = openai and supports_developer_role(model)
    return ProviderCapabilities(
        structured_output="json_schema_strict" if openai else "json_schema",
        developer_role=developer_role,
    )


def messages_param(
    messages: Sequence[ProviderMessage], *, developer_role: bool
) -> list[ChatCompletionMessageParam]:
    """The wire messages; ``developer`` becomes ``system`` unless ``developer_role``.

    Raises:
        ProviderError: a message has a role the Chat Completions API does not know
            (code ``bad_request``).
    """
    out: list[ChatCompletionMessageParam] = []
    for message in messages:
        role, content = message.role, message.content
        if role == "developer" and not developer_role:
            role = "system"
        if role == "system":
            out.append(ChatCompletionSystemMessageParam(role="system", content=content))
        elif role == "developer":
            out.append(ChatCompletionDeveloperMessageParam(role="developer", content=content))
        elif role == "user":
            out.append(ChatCompletionUserMessageParam(role="user", content=content))
        elif role == "assistant":
            out.append(ChatCompletionAssistantMessageParam(role="assistant", content=content))
        else:
            raise ProviderError(
                f"a message has role {role!r}, which the Chat Completions API does not take",
                code="bad_request",
                details={"role": role[:64]},
            )
    return out


def settings_from(params: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """``params`` as settings by snake_case name, and the keys that are not settings.

    camelCase spellings are accepted; None values are dropped (left to the provider);
    ``provider`` is ignored.
    """
    settings: dict[str, Any] = {}
    unknown: list[str] = []
    for key, value in params.items():
        name = _ALIASES.get(key, key)
        if name in IGNORED:
            continue
        if name not in SETTINGS:
            unknown.append(str(key))
        elif value is not None:
            settings[name] = value
    return settings, unknown


def request_settings(request: LlmRequest) -> dict[str, Any]:
    """The settings an ``llm``-kind request carries (None fields left out)."""
    settings: dict[str, Any] = request.samplers.model_dump(by_alias=False, exclude_none=True)
    if request.max_output_tokens is not None:
        settings["max_output_tokens"] = request.max_output_tokens
    if request.stop:
        settings["stop"] = list(request.stop)
    return settings


def create_kwargs(settings: Mapping[str, Any], *, openai_endpoint: bool) -> dict[str, Any]:
    """Keyword arguments of ``chat.completions.create`` for ``settings`` (model excluded).

    ``max_output_tokens`` becomes ``max_completion_tokens`` on OpenAI's API (its
    reasoning models refuse ``max_tokens``) and ``max_tokens`` elsewhere; ``top_k``,
    which OpenAI does not know, travels as an extra body field.
    """
    kwargs: dict[str, Any] = {}
    extra_body: dict[str, Any] = {}
    for name, value in settings.items():
        if name == "model":
            continue
        if name == "top_k":
            extra_body["top_k"] = value
        elif name == "max_output_tokens":
            kwargs["max_completion_tokens" if openai_endpoint else "max_tokens"] = value
        elif name == "stop":
            kwargs["stop"] = [value] if isinstance(value, str) else list(value)
        else:
            kwargs[name] = value
    if extra_body:
        kwargs["extra_body"] = extra_body
    return kwargs


def schema_name(name: str | None) -> str:
    """A ``json_schema.name`` OpenAI accepts (``[A-Za-z0-9_-]{1,64}``), from ``schemaRef``."""
    cleaned = _SCHEMA_NAME_CHARS.sub("_", name or "")[:64]
    return cleaned or "response"


def response_format_param(response_format: ResponseFormat | None) -> WireResponseFormat | None:
    """The wire ``response_format``, or None to send none.

    ``text`` sends nothing (plain text is the default everywhere); ``json`` sends
    ``{"type": "json_object"}``; ``json_schema`` sends the schema under the sanitised
    name, with ``"strict": true`` when strict (a schema-less one falls back to
    ``json_object``).
    """
    if response_format is None or response_format.type == "text":
        return None
    if response_format.type == "json" or response_format.schema is None:
        return {"type": "json_object"}
    json_schema: JSONSchema = {
        "name": schema_name(response_format.name),
        "schema": dict(response_format.schema),
    }
    if response_format.strict:
        json_schema["strict"] = True
    return {"type": "json_schema", "json_schema": json_schema}
