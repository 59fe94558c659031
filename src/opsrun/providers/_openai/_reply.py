"""What the OpenAI adapter reads back: completions, finish reasons, usage."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from openai.types.chat import ChatCompletion

from ...model import Usage
from ...ports import LlmResponse, ProviderFinishReason
from ._errors import not_a_completion

__all__ = ["REFUSAL", "finish_reason", "llm_response", "usage_of"]

_FINISH: dict[str, ProviderFinishReason] = {
    "stop": "stop",
    "tool_calls": "stop",
    "function_call": "stop",
    "eos": "stop",
    "eos_token": "stop",
    "stop_sequence": "stop",
    "end_turn": "stop",
    "length": "length",
    "max_tokens": "length",
    "model_length": "length",
    "content_filter": "content_filter",
}
"""Finish reasons of OpenAI and of compatible servers (TGI, vLLM…), normalised."""

REFUSAL = "refusal"
"""The raw finish reason recorded for a reply the model refused (``message.refusal``)."""


def finish_reason(raw: str | None) -> ProviderFinishReason:
    """The normalised finish reason: unknown values are ``error``, a missing one ``stop``."""
    if raw is None:
        return "stop"
    return _FINISH.get(raw, "error")


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _get(obj: object, name: str) -> Any:
    return obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name, None)


def usage_of(usage: object) -> Usage | None:
    """Token usage from a ``usage`` object or dict; a ``cost`` (OpenRouter's, in USD) is kept."""
    if usage is None:
        return None
    cost = _get(usage, "cost")
    if isinstance(cost, bool) or not isinstance(cost, int | float):
        cost = None
    return Usage(
        input_tokens=_count(_get(usage, "prompt_tokens")),
        output_tokens=_count(_get(usage, "completion_tokens")),
        total_tokens=_count(_get(usage, "total_tokens")),
        cost_usd=None if cost is None else float(cost),
    )


def llm_response(completion: object, *, secrets: Iterable[str | None] = ()) -> LlmResponse:
    """The port's response for what a non-streamed call returned.

    Raises:
        ProviderError: it is not a completion with a choice, such as an error object
            or an HTML page answered with HTTP 200 (code ``provider_error``; the body's
            ``error.message`` is quoted, with ``secrets`` masked).
    """
    if not isinstance(completion, ChatCompletion) or not completion.choices:
        body = completion.to_dict() if isinstance(completion, ChatCompletion) else completion
        raise not_a_completion(body, secrets=secrets)
    choice = completion.choices[0]
    message = getattr(choice, "message", None)
    content = getattr(message, "content", None)
    text = content if isinstance(content, str) else ""
    raw = getattr(choice, "finish_reason", None)
    raw = raw if isinstance(raw, str) else None
    reason = finish_reason(raw)
    refusal = getattr(message, "refusal", None)
    if refusal:
        text, reason, raw = str(refusal), "content_filter", REFUSAL
    return LlmResponse(
        text=text,
        finish_reason=reason,
        raw_finish_reason=raw,
        usage=usage_of(getattr(completion, "usage", None)),
        model=getattr(completion, "model", None) or None,
        request_id=completion._request_id or getattr(completion, "id", None) or None,
    )
