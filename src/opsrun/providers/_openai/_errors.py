"""The OpenAI SDK's exceptions translated, once, into opsrun's provider errors."""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterable, Mapping
from email.utils import parsedate_to_datetime
from typing import Any

import openai

from ..._redact import DEFAULT_REDACTOR
from ...errors import (
    ProviderError,
    ProviderTimeout,
    ProviderUnavailable,
    RateLimited,
    ResponseFormatRejected,
    bound_text,
)

__all__ = ["event_error", "not_a_completion", "retry_after_seconds", "translate"]

_CONTEXT = re.compile(
    r"context[ _-]?(?:length|window|size)|maximum context|too many tokens|prompt is too long"
    r"|exceeds? the (?:available )?context",
    re.I,
)
_CONTENT_FILTER = re.compile(r"content[ _-]?(?:filter|management polic|polic)|safety system", re.I)
_FORMAT = re.compile(r"response[ _]format|json[ _]schema|json[ _]object|structured output", re.I)
_CONTEXT_CODES = frozenset({"context_length_exceeded", "exceed_context_size_error"})
_FILTER_CODES = frozenset({"content_filter", "content_policy_violation"})
_FORMAT_CODES = frozenset({"invalid_json_schema", "response_format_unsupported"})


def retry_after_seconds(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """Seconds a response asks to wait: ``retry-after-ms``, else ``Retry-After`` as
    seconds or as an HTTP date (a date in the past gives 0). None when absent or unreadable.
    """
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            value = float(millis) / 1000
        except ValueError:
            value = math.nan
        if math.isfinite(value) and value >= 0:
            return value
    raw = headers.get("retry-after")
    if not raw:
        return None
    try:
        seconds = float(raw)
    except ValueError:
        try:
            when = parsedate_to_datetime(raw)
        except (TypeError, ValueError, IndexError):
            return None
        current = time.time() if now is None else now
        return max(0.0, when.timestamp() - current)
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def _field(body: object, name: str) -> str | None:
    value = body.get(name) if isinstance(body, Mapping) else None
    return str(value) if value is not None else None


def _api_message(exc: openai.APIError) -> str:
    """The provider's own words: ``error.message`` of the body, else the SDK's message."""
    message = _field(exc.body, "message")
    return message if message else exc.message


class _Masker:
    """Masks the call's keys and every key-shaped string in what a provider said."""

    def __init__(self, secrets: Iterable[str | None]) -> None:
        usable = [s for s in secrets if s is not None and len(s) >= 4]
        self._redactor = DEFAULT_REDACTOR.with_secrets(*usable) if usable else DEFAULT_REDACTOR

    def __call__(self, text: str) -> str:
        return bound_text(self._redactor.redact(text))


def _details(body: object, status: int | None, request_id: str | None) -> dict[str, Any]:
    details: dict[str, Any] = {
        "status": status,
        "type": _field(body, "type"),
        "code": _field(body, "code"),
        "param": _field(body, "param"),
        "requestId": request_id,
    }
    return {k: v for k, v in details.items() if v is not None}


def _names(pattern: re.Pattern[str], codes: frozenset[str], *values: str | None) -> bool:
    return any(v is not None and (v in codes or pattern.search(v) is not None) for v in values)


def _format_rejected(exc: openai.APIError, message: str) -> bool:
    param = _field(exc.body, "param") or ""
    code = _field(exc.body, "code")
    return (
        param.startswith("response_format")
        or code in _FORMAT_CODES
        or _FORMAT.search(message) is not None
    )


def translate(
    exc: openai.OpenAIError, *, format_sent: bool, secrets: Iterable[str | None] = ()
) -> ProviderError:
    """The provider error ``exc`` means (raise it ``from exc``).

    ``format_sent`` says the request carried a ``response_format``: only then can a
    refusal naming it be a :class:`ResponseFormatRejected`. ``secrets`` (the keys of the
    call) are masked in the message, with every key-shaped string.
    """
    mask = _Masker(secrets)
    if isinstance(exc, openai.APITimeoutError):
        return ProviderTimeout("the provider did not answer in time (the client's timeout)")
    if isinstance(exc, openai.APIConnectionError):
        cause = type(exc.__cause__).__name__ if exc.__cause__ is not None else "connection error"
        return ProviderUnavailable(f"the connection to the provider failed ({cause})")
    if isinstance(exc, openai.APIStatusError):
        return _status_error(exc, format_sent=format_sent, mask=mask)
    if isinstance(exc, openai.APIResponseValidationError):
        return ProviderError("the provider's reply is not a valid chat completion")
    if isinstance(exc, openai.APIError):
        return _event_error(exc.body, _api_message(exc), mask)
    return ProviderError(mask(f"{type(exc).__name__}: {exc}"))


def _status_error(exc: openai.APIStatusError, *, format_sent: bool, mask: _Masker) -> ProviderError:
    status = exc.status_code
    said = _api_message(exc)
    message = mask(f"the provider answered HTTP {status}: {said}")
    details = _details(exc.body, status, exc.request_id)
    code = _field(exc.body, "code")
    if status in (401, 403):
        return ProviderError(message, code="provider_auth", details=details)
    if status == 429:
        limited = RateLimited(
            message, retry_after=retry_after_seconds(exc.response.headers), details=details
        )
        if code == "insufficient_quota":
            limited.retryable = False  # no wait refills a quota
        return limited
    if status == 408:
        return ProviderTimeout(message, details=details)
    if format_sent and _format_rejected(exc, said):
        return ResponseFormatRejected(message, details=details)
    kind = _field(exc.body, "type")
    if _names(_CONTEXT, _CONTEXT_CODES, code, kind, said):
        return ProviderError(message, code="context_length_exceeded", details=details)
    if _names(_CONTENT_FILTER, _FILTER_CODES, code, kind, said):
        return ProviderError(message, code="content_filter", details=details)
    if status == 409 or status >= 500:
        return ProviderUnavailable(message, details=details)
    return ProviderError(message, code="bad_request", details=details)


def event_error(
    error: object, *, secrets: Iterable[str | None] = (), status: int | None = None
) -> ProviderError:
    """The provider error of an error event in a stream (``{"error": {...}}``, no HTTP
    status), or of an error object in a 200 body (``status``) to a streamed request:
    ``rate_limited``, ``context_length_exceeded``, ``content_filter``, ``bad_request``
    (``invalid_request_error``), else ``provider_unavailable``."""
    said = _field(error, "message") or (error if isinstance(error, str) else None)
    return _event_error(
        error, said or "an error occurred during streaming", _Masker(secrets), status
    )


def _event_error(
    error: object, said: str, mask: _Masker, status: int | None = None
) -> ProviderError:
    where = "in the stream" if status is None else f"with HTTP {status}"
    message = mask(f"the provider sent an error {where}: {said}")
    details = _details(error, status, None)
    code, kind = _field(error, "code"), _field(error, "type")
    if any(v is not None and "rate_limit" in v for v in (code, kind)):
        return RateLimited(message, details=details)
    if _names(_CONTEXT, _CONTEXT_CODES, code, kind, said):
        return ProviderError(message, code="context_length_exceeded", details=details)
    if _names(_CONTENT_FILTER, _FILTER_CODES, code, kind, said):
        return ProviderError(message, code="content_filter", details=details)
    if kind == "invalid_request_error":
        return ProviderError(message, code="bad_request", details=details)
    return ProviderUnavailable(message, details=details)


def not_a_completion(
    body: object, *, secrets: Iterable[str | None] = (), content_type: str | None = None
) -> ProviderError:
    """The error of a 200 whose body is not a chat completion: for an error object the
    error :func:`event_error` gives it (as in a stream), else ``provider_error`` (an
    HTML page, other JSON…).

    ``body`` is the parsed JSON, or the text of a body that is not JSON.
    """
    mask = _Masker(secrets)
    error = body.get("error") if isinstance(body, Mapping) else None
    if error is not None:
        return event_error(error, secrets=secrets, status=200)
    details: dict[str, Any] = {"status": 200}
    if content_type:
        details["contentType"] = content_type
    if isinstance(body, str):
        shown = f"text {body[:80]!r}"
    elif isinstance(body, Mapping):
        shown = "a JSON object without choices"
    else:
        shown = f"JSON {type(body).__name__}"
    return ProviderError(
        mask(f"the provider answered HTTP 200 with something that is not a completion: {shown}"),
        details=details,
    )
