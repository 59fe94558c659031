"""Every exception opsrun raises, under one root.

Each error carries a stable string ``code`` that callers may branch on, a human
``message`` and bounded, JSON-safe ``details``. Codes never change meaning
between releases; messages may be reworded.

The tree::

    OpsrunError
    ├── ConfigError                 bad configuration passed in by the host
    ├── ProfileInvalid              an OperationProfile failed save-time validation
    ├── StoreError                  a store refused or could not serve a request
    │   ├── NotFound                the requested record does not exist
    │   └── ArtifactConflict        optimistic concurrency: basedOnVersion is stale
    ├── RunError                    a run could not be started or driven
    ├── OperationFailed             an operation implementation's own error (has a code)
    ├── TemplateError               a Liquid template failed to parse or render
    ├── ProviderError               an LLM provider call failed
    │   ├── ProviderTimeout         retryable
    │   ├── ProviderUnavailable     a server error or overload; retryable
    │   ├── RateLimited             retryable; carries ``retry_after`` seconds when known
    │   └── ResponseFormatRejected  the provider refused the requested response format
    └── PlanError                   an LLM edit plan is malformed or invalid (ERR_* codes)
        ├── PatchError              a unified diff is malformed or does not apply
        └── ApplyError              a plan could not be applied; the tree was rolled back
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from ._redact_rules import redact_builtin

__all__ = [
    "ApplyError",
    "ArtifactConflict",
    "ConfigError",
    "NotFound",
    "OperationFailed",
    "OpsrunError",
    "PatchError",
    "PlanError",
    "ProfileInvalid",
    "ProviderError",
    "ProviderTimeout",
    "ProviderUnavailable",
    "RateLimited",
    "ResponseFormatRejected",
    "RunError",
    "StoreError",
    "TemplateError",
    "bound_details",
    "bound_text",
]

_MAX_DETAIL_STR = 1024
MAX_TEXT_CHARS = _MAX_DETAIL_STR
"""Characters kept of one recorded message or preview (error messages, raw replies)."""
_MAX_DETAIL_ITEMS = 50
_MAX_DETAIL_DEPTH = 4


class _Redactor(Protocol):
    """What bounding needs of an ``opsrun.redaction.Redactor`` (imported by it, not here)."""

    def redact(self, text: str) -> str: ...

    def redact_value(self, value: Any) -> Any: ...


def _mask(text: str, redactor: _Redactor | None) -> str:
    return redact_builtin(text) if redactor is None else redactor.redact(text)


def _cut(text: str, limit: int, redactor: _Redactor | None) -> str:
    """``text`` masked, then cut: a cut must never leave half a key the rules miss."""
    if len(text) > limit:
        text = _mask(text, redactor)
    return text[:limit] if len(text) > limit else text


def _bound(value: Any, depth: int, redactor: _Redactor | None, masked: bool) -> Any:
    if isinstance(value, str):
        if len(value) > _MAX_DETAIL_STR:
            if not masked:
                value = _mask(value, redactor)
            if len(value) > _MAX_DETAIL_STR:
                return value[:_MAX_DETAIL_STR] + f"…[+{len(value) - _MAX_DETAIL_STR} chars]"
        return value
    if value is None or isinstance(value, bool | int | float):
        return value
    if depth >= _MAX_DETAIL_DEPTH:
        return "…"
    if isinstance(value, Mapping):
        items = list(value.items())
        out = {str(k): _bound(v, depth + 1, redactor, masked) for k, v in items[:_MAX_DETAIL_ITEMS]}
        if len(items) > _MAX_DETAIL_ITEMS:
            out["…"] = f"+{len(items) - _MAX_DETAIL_ITEMS} more"
        return out
    if isinstance(value, list | tuple | set | frozenset):
        seq = list(value)
        bounded = [_bound(v, depth + 1, redactor, masked) for v in seq[:_MAX_DETAIL_ITEMS]]
        if len(seq) > _MAX_DETAIL_ITEMS:
            bounded.append(f"…+{len(seq) - _MAX_DETAIL_ITEMS} more")
        return bounded
    text = repr(value)
    if redactor is not None:
        text = redactor.redact(text)
    return _bound(text, depth, redactor, masked or redactor is not None)


def bound_text(text: str, limit: int = MAX_TEXT_CHARS, *, redactor: _Redactor | None = None) -> str:
    """``text`` masked, then cut to ``limit`` characters: messages and previews a run records.

    Masking comes first, so a cut cannot leave half a key that no rule recognises any
    more. With ``redactor`` the whole text is masked; without one, a text longer than
    ``limit`` is masked with the built-in rules before it is cut (a shorter one is
    returned as it is, for the caller to mask).
    """
    if redactor is not None:
        text = redactor.redact(text)
    return _cut(text, limit, redactor)


def bound_details(
    details: Mapping[str, Any] | None, *, redactor: _Redactor | None = None
) -> dict[str, Any]:
    """Return a JSON-safe copy of ``details`` with strings, lists and depth bounded.

    Strings are cut at 1024 characters, collections at 50 items, nesting at 4
    levels; anything that is not a JSON scalar or container becomes its ``repr``.
    Masking comes before any cut: with ``redactor`` everything is masked first
    (:meth:`~opsrun.redaction.Redactor.redact_value`, reprs too); without one, each
    string longer than the bound is masked with the built-in rules before it is cut.
    """
    if not details:
        return {}
    source: Any = dict(details) if redactor is None else redactor.redact_value(dict(details))
    bounded = _bound(source, 0, redactor, redactor is not None)
    assert isinstance(bounded, dict)
    return bounded


class OpsrunError(Exception):
    """Root of every error opsrun raises.

    Attributes:
        code: A stable machine-readable code (``"artifact_conflict"``, ``"ERR_SCHEMA"``…).
        message: A human-readable explanation; may change between releases.
        details: Bounded JSON-safe context (see :func:`bound_details`).
    """

    default_code = "opsrun_error"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code: str = code or self.default_code
        self.message: str = message
        self.details: dict[str, Any] = bound_details(details)

    def __str__(self) -> str:
        return f"[{self.code}] {self.message}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, message={self.message!r})"

    def to_dict(self) -> dict[str, Any]:
        """Return ``{"code", "message", "details"}`` for logs and API responses."""
        return {"code": self.code, "message": self.message, "details": self.details}


class ConfigError(OpsrunError):
    """The host passed configuration opsrun cannot use."""

    default_code = "config_error"


class ProfileInvalid(OpsrunError):
    """An OperationProfile failed save-time validation.

    Attributes:
        issues: Every problem found, as ``opsrun.model.ProfileIssue`` values.
    """

    default_code = "profile_invalid"

    def __init__(self, message: str, *, issues: list[Any]) -> None:
        super().__init__(
            message,
            details={"issues": [getattr(i, "code", str(i)) for i in issues]},
        )
        self.issues: list[Any] = list(issues)


class StoreError(OpsrunError):
    """A store could not serve a request."""

    default_code = "store_error"


class NotFound(StoreError):
    """The requested record does not exist."""

    default_code = "not_found"


class ArtifactConflict(StoreError):
    """A persisted artifact write named a ``basedOnVersion`` that is no longer the latest."""

    default_code = "artifact_conflict"


class RunError(OpsrunError):
    """A run could not be started or driven (bad request, unknown profile…)."""

    default_code = "run_error"


class OperationFailed(OpsrunError):
    """Raised by an operation implementation to end its OperationRun as ``error``.

    The runner records ``code`` and ``message`` on the OperationRun; any other
    exception an operation raises is recorded as ``operation_exception``.
    """

    default_code = "operation_error"


class TemplateError(OpsrunError):
    """A Liquid template failed to parse or render (``template_render_error``)."""

    default_code = "template_render_error"


class ProviderError(OpsrunError):
    """An LLM provider call failed (``provider_error``).

    Adapters map their client's failures to a subclass or to a stable ``code`` here:
    ``provider_auth`` (bad or missing credentials), ``context_length_exceeded`` (the
    prompt is too long for the model), ``content_filter`` (the provider refused the
    content), ``bad_request`` (any other rejected request), ``provider_error``.

    Attributes:
        retryable: True when the same call may succeed later (a timeout, a rate limit,
            an unavailable or overloaded server); retries only repeat such failures.
    """

    default_code = "provider_error"
    default_retryable = False

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        details: Mapping[str, Any] | None = None,
        retryable: bool | None = None,
    ) -> None:
        super().__init__(message, code=code, details=details)
        self.retryable: bool = self.default_retryable if retryable is None else retryable


class ProviderTimeout(ProviderError):
    """The provider did not answer in time (``timeout``); retryable."""

    default_code = "timeout"
    default_retryable = True


class ProviderUnavailable(ProviderError):
    """The provider could not serve the call now (``provider_unavailable``): a server
    error, an overloaded service or a dropped connection; retryable."""

    default_code = "provider_unavailable"
    default_retryable = True


class RateLimited(ProviderError):
    """The provider rate-limited the call (``rate_limited``); retryable.

    Attributes:
        retry_after: Seconds the provider asked to wait, when it said.
    """

    default_code = "rate_limited"
    default_retryable = True

    def __init__(
        self,
        message: str,
        *,
        retry_after: float | None = None,
        code: str | None = None,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message, code=code, details=details)
        self.retry_after: float | None = retry_after


class ResponseFormatRejected(ProviderError):
    """The provider refused the requested response format or schema.

    Callers step down one structured-output capability level and try again.
    """

    default_code = "response_format_rejected"


class PlanError(OpsrunError):
    """An LLM edit plan is malformed or invalid; ``code`` is an ``ERR_*`` string."""

    default_code = "ERR_PLAN"


class PatchError(PlanError):
    """A unified diff is malformed or does not apply (``ERR_PATCH_*``, ``ERR_BASE_*``…)."""

    default_code = "ERR_PATCH_APPLY_FAILED"


class ApplyError(PlanError):
    """A plan could not be applied to a directory; the tree was rolled back."""

    default_code = "ERR_APPLY_FAILED"
