"""One Messages API call, shaped from an opsrun request; and the reply read back."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...errors import ConfigError, ProviderError, ResponseFormatRejected
from ...model import Samplers, Usage
from ...ports import (
    LlmRequest,
    MainLlmRequest,
    ProviderFinishReason,
    ResponseFormat,
)
from ._messages import JSON_INSTRUCTION, Conversation, SystemPlacement, to_conversation

if TYPE_CHECKING:
    from anthropic.types import OutputConfigParam, ToolChoiceToolParam, ToolParam

__all__ = [
    "RESERVED_PARAMS",
    "Call",
    "Defaults",
    "finish_reason",
    "llm_call",
    "main_call",
    "reply_text",
    "usage_of",
]

RESERVED_PARAMS = frozenset(
    {"model", "max_tokens", "messages", "system", "stream", "tools", "tool_choice"}
)
"""Request fields the adapter sets itself; ``default_params`` may not hold them."""

DEFAULT_TOOL_NAME = "json_reply"
"""The forced tool's name when the response format has none."""

_TOOL_DESCRIPTION = "Give your reply as this tool's input; it must match the input schema."

_FINISH: dict[str, ProviderFinishReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "pause_turn": "length",
    "refusal": "content_filter",
}

_MAIN_PARAMS: dict[str, str] = {
    "model": "model",
    "max_tokens": "max_tokens",
    "maxTokens": "max_tokens",
    "max_output_tokens": "max_tokens",
    "maxOutputTokens": "max_tokens",
    "temperature": "temperature",
    "top_p": "top_p",
    "topP": "top_p",
    "top_k": "top_k",
    "topK": "top_k",
    "stop_sequences": "stop_sequences",
    "stopSequences": "stop_sequences",
    "stop": "stop_sequences",
}
"""``MainLlmRequest.params`` keys the adapter reads (snake or camel case); others are ignored."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Defaults:
    """What the provider was constructed with."""

    model: str
    max_tokens: int
    params: Mapping[str, Any] = field(default_factory=dict)
    system_in_conversation: SystemPlacement = "user"

    @staticmethod
    def checked_params(params: Mapping[str, Any] | None) -> dict[str, Any]:
        """A copy of ``default_params``.

        Raises:
            ConfigError: it sets a field the adapter sets itself.
        """
        out = dict(params or {})
        reserved = sorted(RESERVED_PARAMS & set(out))
        if reserved:
            raise ConfigError(
                f"default_params may not set {', '.join(reserved)}: "
                "the provider sets them (model and max_tokens are constructor arguments)"
            )
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class Call:
    """Everything one ``messages.create`` call sends."""

    model: str
    max_tokens: int
    conversation: Conversation
    stop_sequences: list[str]
    tools: list[ToolParam] | None = None
    tool_choice: ToolChoiceToolParam | None = None
    output_config: OutputConfigParam | None = None
    extra_body: dict[str, Any] = field(default_factory=dict)
    """Samplers and ``default_params`` fields the SDK has no argument for."""
    tool_name: str | None = None
    """The forced tool whose input is the reply (tool-based JSON output)."""

    @property
    def format_requested(self) -> bool:
        """The call asks the API itself for structured output (a tool or a format)."""
        return self.tools is not None or (
            self.output_config is not None and "format" in self.output_config
        )


def _bad(message: str) -> ProviderError:
    return ProviderError(message, code="bad_request")


def _samplers(samplers: Samplers) -> dict[str, Any]:
    """The samplers the Messages API knows; penalties and ``seed`` have no equivalent."""
    values = {"temperature": samplers.temperature, "top_p": samplers.top_p, "top_k": samplers.top_k}
    return {key: value for key, value in values.items() if value is not None}


def _split_defaults(
    defaults: Defaults,
) -> tuple[dict[str, Any], list[str], dict[str, Any]]:
    """``default_params`` as (extra body, stop sequences, output_config)."""
    extra = dict(defaults.params)
    stop = extra.pop("stop_sequences", None) or []
    config = extra.pop("output_config", None) or {}
    return extra, [str(s) for s in stop], dict(config)


def llm_call(request: LlmRequest, defaults: Defaults) -> Call:
    """The call for an ``llm`` operation's request.

    Raises:
        ResponseFormatRejected: a non-strict JSON Schema whose root is not an object
            (a tool's input must be one); no call is made.
        ProviderError: a message role the API has no equivalent for (``bad_request``).
    """
    extra, stop, config = _split_defaults(defaults)
    extra.update(_samplers(request.samplers))
    fmt = _response_format(request.response_format)
    if fmt.output_format is not None:
        config["format"] = fmt.output_format
    conversation = to_conversation(
        request.messages,
        system_in_conversation=defaults.system_in_conversation,
        instruction=fmt.instruction,
    )
    return Call(
        model=request.model or defaults.model,
        max_tokens=request.max_output_tokens or defaults.max_tokens,
        conversation=conversation,
        stop_sequences=list(request.stop) or stop,
        tools=fmt.tools,
        tool_choice=fmt.tool_choice,
        output_config=_output_config(config),
        extra_body=extra,
        tool_name=fmt.tool_name,
    )


def _output_config(config: dict[str, Any]) -> OutputConfigParam | None:
    if not config:
        return None
    out: OutputConfigParam = {}
    out.update(config)  # type: ignore[typeddict-item]  # host-given keys pass through as JSON
    return out


@dataclass(frozen=True, slots=True)
class _Format:
    """How one response format is asked for."""

    instruction: str | None = None
    tools: list[ToolParam] | None = None
    tool_choice: ToolChoiceToolParam | None = None
    output_format: dict[str, Any] | None = None
    tool_name: str | None = None


def _response_format(response_format: ResponseFormat | None) -> _Format:
    """How the API is asked for ``response_format`` (see :class:`AnthropicProvider`)."""
    if response_format is None or response_format.type == "text":
        return _Format()
    schema = response_format.schema
    if response_format.type == "json" or schema is None:
        return _Format(instruction=JSON_INSTRUCTION)
    if response_format.strict:
        return _Format(output_format={"type": "json_schema", "schema": dict(schema)})
    if schema.get("type") != "object":
        raise ResponseFormatRejected(
            "a tool's input schema must describe an object; this JSON Schema's root is "
            f"{schema.get('type', 'untyped')!r}",
            details={"schemaRef": response_format.name},
        )
    name = re.sub(r"[^A-Za-z0-9_-]", "_", response_format.name or "")[:64] or DEFAULT_TOOL_NAME
    tool: ToolParam = {
        "name": name,
        "description": _TOOL_DESCRIPTION,
        "input_schema": dict(schema),
    }
    choice: ToolChoiceToolParam = {"type": "tool", "name": name, "disable_parallel_tool_use": True}
    return _Format(tools=[tool], tool_choice=choice, tool_name=name)


def main_call(request: MainLlmRequest, defaults: Defaults) -> Call:
    """The call for the run's main generation; ``request.params`` may set the model,
    ``max_tokens``, ``temperature``, ``top_p``, ``top_k`` and stop sequences.

    Raises:
        ProviderError: a parameter has the wrong type, or a message role the API has no
            equivalent for (code ``bad_request``).
    """
    extra, stop, config = _split_defaults(defaults)
    params: dict[str, Any] = {}
    for key, value in request.params.items():
        name = _MAIN_PARAMS.get(key)
        if name is not None and value is not None:
            params[name] = value
    model = params.pop("model", defaults.model)
    if not isinstance(model, str) or not model:
        raise _bad("main LLM param model must be a non-empty string")
    max_tokens = params.pop("max_tokens", defaults.max_tokens)
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise _bad("main LLM param max_tokens must be a positive integer")
    stops = params.pop("stop_sequences", stop)
    if isinstance(stops, str):
        stops = [stops]
    if not isinstance(stops, list | tuple) or not all(isinstance(s, str) for s in stops):
        raise _bad("main LLM param stop_sequences must be a list of strings")
    for key, value in params.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _bad(f"main LLM param {key} must be a number")
    extra.update(params)
    conversation = to_conversation(
        request.messages, system_in_conversation=defaults.system_in_conversation
    )
    return Call(
        model=model,
        max_tokens=max_tokens,
        conversation=conversation,
        stop_sequences=list(stops),
        output_config=_output_config(config),
        extra_body=extra,
    )


def finish_reason(stop_reason: str | None) -> ProviderFinishReason:
    """The normalised finish reason of an Anthropic ``stop_reason`` (``stop`` when unknown)."""
    return _FINISH.get(stop_reason or "", "stop")


def usage_of(
    *,
    input_tokens: int | None,
    output_tokens: int | None,
    cache_creation: int | None = None,
    cache_read: int | None = None,
) -> Usage | None:
    """opsrun usage: input counts cache writes and reads too, as the API bills them."""
    if input_tokens is None and output_tokens is None:
        return None
    total_in = None
    if input_tokens is not None:
        total_in = input_tokens + (cache_creation or 0) + (cache_read or 0)
    total = None if total_in is None or output_tokens is None else total_in + output_tokens
    return Usage(input_tokens=total_in, output_tokens=output_tokens, total_tokens=total)


def reply_text(blocks: list[Any], tool_name: str | None) -> str:
    """The reply: the forced tool's input as JSON when a tool was forced, else every text
    block joined."""
    if tool_name is not None:
        for block in blocks:
            if getattr(block, "type", None) == "tool_use":
                return json.dumps(getattr(block, "input", None), ensure_ascii=False)
    return "".join(
        str(getattr(block, "text", ""))
        for block in blocks
        if getattr(block, "type", None) == "text"
    )
