"""The Anthropic SDK's exceptions → opsrun's provider errors, once, at the boundary.

==============================================  =========================================
What the SDK raised                             What opsrun raises
==============================================  =========================================
429, ``rate_limit_error``                       ``RateLimited`` (``retry_after`` from
                                                ``retry-after-ms`` / ``retry-after``)
529, ``overloaded_error``, other 5xx,           ``ProviderUnavailable``
``api_error``, a connection error, a stream
cut off
408, 504, ``timeout_error``, a client timeout   ``ProviderTimeout``
401, 403                                        ``ProviderError`` ``provider_auth``
400 "prompt is too long"                        ``ProviderError`` ``context_length_exceeded``
400 "content filtering"                         ``ProviderError`` ``content_filter``
400 about the schema, a tool or                 ``ResponseFormatRejected`` (only when
``output_config``                               the request asked for a format)
any other 4xx (for an error sent with HTTP      ``ProviderError`` ``bad_request``
200, its type: ``invalid_request_error``,
``not_found_error``…)
anything else                                   ``ProviderError`` ``provider_error``
==============================================  =========================================

Error events in a stream and error bodies sent with HTTP 200 map the same way
(:func:`body_error`); a 200 whose body is not a message is a ``provider_error``
(:func:`not_a_message`).
"""

from __future__ import annotations

import email.utils
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import anthropic

from ..._redact import DEFAULT_REDACTOR
from ...errors import (
    ProviderError,
    ProviderTimeout,
    ProviderUnavailable,
    RateLimited,
    ResponseFormatRejected,
    bound_text,
)

__all__ = ["body_error", "mask", "not_a_message", "parse_retry_after", "translate"]

_CONTEXT_LENGTH = re.compile(
    r"prompt is too long|context (?:window|length)|too many (?:input )?tokens", re.IGNORECASE
)
_CONTENT_FILTER = re.compile(r"content filter|content polic|output blocked", re.IGNORECASE)
_FORMAT = re.compile(
    r"schema|\btools?\b|tool_choice|output_config|output_format|structured output", re.IGNORECASE
)
_MIN_SECRET = 4
"""Shorter literals cannot be masked without masking ordinary text."""
_REQUEST_ERRORS = frozenset(
    {"invalid_request_error", "not_found_error", "billing_error", "request_too_large"}
)
"""Error types of a 4xx, for an error that came with HTTP 200 (in a stream, or a body)."""
_SPEND_LIMITS = frozenset({"contract_spend_limit_reached", "enforced_spend_limit_reached"})
"""429 error codes that waiting does not cure."""


def mask(text: str, secrets: Sequence[str]) -> str:
    """``text`` with ``secrets`` and every key-shaped string masked (opsrun's redactor)."""
    usable = [secret for secret in secrets if len(secret) >= _MIN_SECRET]
    redactor = DEFAULT_REDACTOR.with_secrets(*usable) if usable else DEFAULT_REDACTOR
    return redactor.redact(text)


def parse_retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``retry-after`` (seconds or an HTTP
    date), or None when neither says."""
    millis = headers.get("retry-after-ms")
    if millis is not None:
        seconds = _number(millis)
        if seconds is not None:
            return seconds / 1000
    value = headers.get("retry-after")
    if value is None:
        return None
    seconds = _number(value)
    if seconds is not None:
        return seconds
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def _number(text: str) -> float | None:
    try:
        value = float(text.strip())
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


def translate(
    exc: Exception, *, secrets: Sequence[str] = (), format_requested: bool = False
) -> ProviderError:
    """The opsrun error for what the SDK (or its HTTP client) raised.

    ``secrets`` are masked in the message; ``format_requested`` says the request carried
    a response format, so a 400 about it becomes :class:`ResponseFormatRejected`.
    """
    if isinstance(exc, ProviderError):
        return exc
    if isinstance(exc, anthropic.APITimeoutError):
        return ProviderTimeout("the Anthropic API did not answer in time")
    if isinstance(exc, anthropic.APIConnectionError):
        return ProviderUnavailable(mask(f"could not reach the Anthropic API: {exc}", secrets))
    if isinstance(exc, anthropic.APIStatusError):
        return _from_status(exc, secrets, format_requested)
    http = _http_failure(exc)
    text = mask(f"{type(exc).__name__}: {exc}", secrets)
    if http == "timeout":
        return ProviderTimeout(f"the Anthropic API stopped answering in time ({text})")
    if http == "transport":
        return ProviderUnavailable(f"the connection to the Anthropic API failed ({text})")
    if isinstance(exc, anthropic.CredentialsError) or (
        isinstance(exc, TypeError) and "authentication" in str(exc)
    ):
        return ProviderError(f"no usable Anthropic credential ({text})", code="provider_auth")
    return ProviderError(f"the Anthropic client failed ({text})")


def _http_failure(exc: Exception) -> str | None:
    """``timeout`` or ``transport`` for the HTTP client's own errors (httpx or httpx2,
    whichever the SDK uses), else None."""
    for cls in type(exc).__mro__:
        if cls.__module__.split(".")[0] not in ("httpx", "httpx2"):
            continue
        if cls.__name__ == "TimeoutException":
            return "timeout"
        if cls.__name__ == "TransportError":
            return "transport"
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class _Said:
    """What an error response (or an error event) said."""

    status: int
    error_type: str | None
    api_message: str
    error_code: str | None
    request_id: str | None
    headers: Mapping[str, str]
    where: str
    """``HTTP 429``, ``in the stream``…"""


def _from_status(
    exc: anthropic.APIStatusError, secrets: Sequence[str], format_requested: bool
) -> ProviderError:
    status = exc.status_code
    said = _Said(
        status=status,
        error_type=str(exc.type) if exc.type is not None else None,
        api_message=exc.api_message or exc.message,
        error_code=exc.error_code,
        request_id=exc.request_id,
        headers=exc.response.headers,
        where=f"HTTP {status}" if status != 200 else "in the stream",
    )
    return _from_said(said, secrets, format_requested)


def body_error(
    body: object,
    *,
    headers: Mapping[str, str],
    secrets: Sequence[str] = (),
    where: str = "in the stream",
) -> ProviderError:
    """The opsrun error of an error body (``{"type": "error", "error": {...}}``) that
    came with HTTP 200: an ``error`` event in a stream, or a whole JSON body."""
    error = body.get("error") if isinstance(body, Mapping) else None
    if isinstance(error, str):
        error = {"message": error}
    error = error if isinstance(error, Mapping) else {}
    details = error.get("details")
    code = details.get("error_code") if isinstance(details, Mapping) else None
    said = _Said(
        status=200,
        error_type=_text(error.get("type")),
        api_message=_text(error.get("message")) or "the API sent an error without a message",
        error_code=_text(code),
        request_id=headers.get("request-id"),
        headers=headers,
        where=where,
    )
    return _from_said(said, secrets, False)


def not_a_message(
    body: object, *, secrets: Sequence[str] = (), content_type: str | None = None
) -> ProviderError:
    """The error of a 200 whose body is not a message: for an error body the error
    :func:`body_error` gives it (as in a stream), else ``provider_error`` (an HTML page,
    other JSON…).

    ``body`` is the parsed JSON, or the text of a body that is not JSON.
    """
    if isinstance(body, Mapping) and body.get("error") is not None:
        return body_error(body, headers={}, secrets=secrets, where="in an HTTP 200 body")
    details: dict[str, Any] = {"status": 200}
    if content_type:
        details["contentType"] = content_type
    if isinstance(body, str):
        text = f"the Anthropic API answered HTTP 200 with text, not a message: {body[:80]!r}"
    else:
        shown = type(body).__name__
        text = f"the Anthropic API answered HTTP 200 with JSON that is not a message ({shown})"
    return ProviderError(bound_text(mask(text, secrets)), details=details)


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _from_said(said: _Said, secrets: Sequence[str], format_requested: bool) -> ProviderError:
    status, error_type, api_message = said.status, said.error_type, said.api_message
    message = bound_text(
        mask(
            f"Anthropic API error {said.where} ({error_type or 'unknown'}): {api_message}",
            secrets,
        )
    )
    details: dict[str, Any] = {
        key: value
        for key, value in (
            ("status", status),
            ("type", error_type),
            ("errorCode", said.error_code),
            ("requestId", said.request_id),
        )
        if value is not None
    }
    if status == 429 or error_type == "rate_limit_error":
        limited = RateLimited(message, retry_after=parse_retry_after(said.headers), details=details)
        if said.error_code in _SPEND_LIMITS:
            limited.retryable = False
        return limited
    if status == 529 or error_type == "overloaded_error":
        return ProviderUnavailable(message, details=details)
    if status in (408, 504) or error_type == "timeout_error":
        return ProviderTimeout(message, details=details)
    if status >= 500 or error_type == "api_error":
        return ProviderUnavailable(message, details=details)
    if status in (401, 403) or error_type in ("authentication_error", "permission_error"):
        return ProviderError(message, code="provider_auth", details=details)
    if _CONTEXT_LENGTH.search(api_message):
        return ProviderError(message, code="context_length_exceeded", details=details)
    if _CONTENT_FILTER.search(api_message):
        return ProviderError(message, code="content_filter", details=details)
    if format_requested and status == 400 and _FORMAT.search(api_message):
        return ResponseFormatRejected(message, details=details)
    if 400 <= status < 500 or error_type in _REQUEST_ERRORS:
        return ProviderError(message, code="bad_request", details=details)
    return ProviderError(message, details=details)
