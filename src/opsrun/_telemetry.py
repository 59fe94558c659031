"""OpenTelemetry spans of runs.

Spans exist only for a runner built with ``Runner(telemetry=Telemetry(...))``; without
it no span is made and ``opentelemetry`` is never imported (it is an optional extra,
``opsrun[otel]``, of which only ``opentelemetry-api`` is needed at run time). The span
tree of one run::

    opsrun.run
    ├── opsrun.hook before_main_llm
    │   └── opsrun.operation <operationId>       (one per executed operation)
    │       └── chat <model>                     (the llm kind's provider call)
    ├── chat <model>                             (the main LLM call)
    └── opsrun.hook after_main_llm
        └── opsrun.operation <operationId>

LLM spans follow the OpenTelemetry GenAI semantic conventions (the attribute names are
constants here, not taken from the unstable ``opentelemetry-semantic-conventions``
package). Prompt and completion text is recorded only with ``capture_content=True``:
masked by the run's redactor and cut (never dropped) to ``max_content_chars`` per
attribute, see :func:`bounded_messages`. Without it,
an error whose message may quote a model's reply (``output_parse_error``) is described
by its code and content-free details instead of its message.

Run ids on log records are :mod:`opsrun._logs`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from contextvars import ContextVar, Token
from dataclasses import dataclass
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from ._config import require_whole
from ._redact import Redactor
from .errors import ConfigError
from .model import (
    FailedDetails,
    Hook,
    OperationDefinition,
    OperationError,
    OperationStatus,
    Run,
    RunStatus,
    SkippedReason,
    Usage,
)

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span, TracerProvider
    from opentelemetry.util.types import AttributeValue

__all__ = ["Activation", "Telemetry", "Tracing", "bounded_messages", "current_tracing"]

# -- attribute names ---------------------------------------------------------------------
# GenAI semantic conventions (development status; names as of semconv 1.37+).
GEN_AI_OPERATION_NAME = "gen_ai.operation.name"
GEN_AI_PROVIDER_NAME = "gen_ai.provider.name"
GEN_AI_CONVERSATION_ID = "gen_ai.conversation.id"
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
GEN_AI_REQUEST_TEMPERATURE = "gen_ai.request.temperature"
GEN_AI_REQUEST_TOP_P = "gen_ai.request.top_p"
GEN_AI_REQUEST_TOP_K = "gen_ai.request.top_k"
GEN_AI_REQUEST_SEED = "gen_ai.request.seed"
GEN_AI_REQUEST_FREQUENCY_PENALTY = "gen_ai.request.frequency_penalty"
GEN_AI_REQUEST_PRESENCE_PENALTY = "gen_ai.request.presence_penalty"
GEN_AI_OUTPUT_TYPE = "gen_ai.output.type"
GEN_AI_RESPONSE_MODEL = "gen_ai.response.model"
GEN_AI_RESPONSE_ID = "gen_ai.response.id"
GEN_AI_RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"
GEN_AI_USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
GEN_AI_INPUT_MESSAGES = "gen_ai.input.messages"
GEN_AI_OUTPUT_MESSAGES = "gen_ai.output.messages"
ERROR_TYPE = "error.type"
# opsrun's own.
RUN_ID = "opsrun.run.id"
RUN_TRIGGER = "opsrun.run.trigger"
RUN_STATUS = "opsrun.run.status"
RUN_FAILED_TYPE = "opsrun.run.failed_type"
RUN_ERROR_CODE = "opsrun.run.error_code"
RUN_FAILED_OPERATION = "opsrun.run.failed_operation_id"
RUN_ABORT_REASON = "opsrun.run.abort_reason"
CHAT_ID = "opsrun.chat.id"
CHAT_BRANCH_ID = "opsrun.chat.branch_id"
PROFILE_ID = "opsrun.profile.id"
HOOK = "opsrun.hook"
HOOK_OPERATIONS = "opsrun.hook.operations"
OPERATION_ID = "opsrun.operation.id"
OPERATION_NAME = "opsrun.operation.name"
OPERATION_KIND = "opsrun.operation.kind"
OPERATION_REQUIRED = "opsrun.operation.required"
OPERATION_STATUS = "opsrun.operation.status"
OPERATION_SKIPPED_REASON = "opsrun.operation.skipped_reason"
LLM_CALL = "opsrun.llm.call"
LLM_STATUS = "opsrun.llm.status"
LLM_FINISH_REASON = "opsrun.llm.finish_reason"
LLM_ATTEMPTS = "opsrun.llm.attempts"
CONTENT_TRUNCATED = "opsrun.content.truncated"

_NAME_CHARS = 256
"""Characters kept of a name-like attribute value (a model, a provider)."""
_DESCRIPTION_CHARS = 512
"""Characters kept of a span status description (an error message)."""
_REDACT_MARGIN = 16_384
"""Characters past the longest kept text that are redacted with it, so that a secret the
bound cuts through is still masked whole (longer than any credential the rules know)."""
_ELLIPSIS = "…"
_ESCAPE_CHARS = 6
"""Characters at most that one character of a text takes in JSON (a control character
as a ``\\u`` escape), so a text ``n`` characters over loses ``n // 6`` characters at
once, never one it could keep."""
_CONTENT_QUOTING_CODES = frozenset({"output_parse_error"})
"""Error codes whose message may quote what a model wrote (the llm kind's
``output_parse_error`` quotes the reply value its schema refused)."""
_CONTENT_FREE_DETAILS = ("schemaRef", "validator", "schemaPath")
"""Details of such an error that come from the host's configuration, not from content."""


Activation: TypeAlias = "tuple[Token[Context], Token[Tracing | None]]"
"""What :meth:`Tracing.activate` returns and :meth:`Tracing.deactivate` takes back."""


# -- configuration ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Telemetry:
    """How a runner traces its runs with OpenTelemetry: ``Runner(telemetry=Telemetry())``.

    Needs ``opentelemetry-api`` (``pip install 'opsrun[otel]'``); an SDK or a
    distribution configured by the host decides where the spans go.

    Attributes:
        tracer_provider: Where the spans go. ``None`` (the default) uses the global
            provider (``opentelemetry.trace.set_tracer_provider``), read when each span
            starts, so the host may configure it after building the runner.
        capture_content: Record prompts and completions of LLM calls
            (``gen_ai.input.messages``, ``gen_ai.output.messages``), and the messages of
            errors that may quote them. Off by default: a prompt holds the user's words.
            The text is masked by the runner's redactor first.
        max_content_chars: Characters at most of one captured attribute. Longer content
            is cut, never dropped: the newest messages are kept, the oldest kept one is
            cut to end in ``…``, and the newest one is always kept (a reply's
            ``finish_reason`` is left out of it when it leaves no room for any of its
            text).

    Raises:
        ConfigError: ``max_content_chars`` is not an integer of at least 64 (room for
            one message's JSON with a little text).
    """

    tracer_provider: TracerProvider | None = None
    capture_content: bool = False
    max_content_chars: int = 4096

    def __post_init__(self) -> None:
        require_whole(self, "max_content_chars", self.max_content_chars, 64)


# -- spans --------------------------------------------------------------------------------

_current: ContextVar[Tracing | None] = ContextVar("opsrun_tracing", default=None)
"""The tracing of the run executing now (set with its spans by :meth:`Tracing.activate`)."""


def current_tracing() -> Tracing | None:
    """The tracing of the run executing now, or None (no run, or no telemetry)."""
    return _current.get()


@cache
def _opsrun_version() -> str | None:
    try:
        return version("opsrun")
    except PackageNotFoundError:  # running from a source tree
        return None


class Tracing:
    """The spans of one runner's runs (built once, by ``Runner(telemetry=...)``).

    Spans start as children of the current OpenTelemetry context; :meth:`activate`
    makes one the current span, so that the engine's own spans and whatever the
    operations and providers trace nest under it.

    Raises:
        ConfigError: ``opentelemetry-api`` is not installed.
    """

    def __init__(self, settings: Telemetry) -> None:
        try:
            from opentelemetry import context, trace  # optional: opsrun[otel]
        except ImportError as exc:
            raise ConfigError(
                "Runner(telemetry=...) needs opentelemetry-api: pip install 'opsrun[otel]'",
                details={"field": "telemetry"},
            ) from exc
        self.settings = settings
        self._tracer = trace.get_tracer(
            "opsrun", _opsrun_version(), tracer_provider=settings.tracer_provider
        )
        self._span_context = trace.set_span_in_context
        self._attach = context.attach
        self._detach = context.detach
        self._status = trace.Status
        self._error = trace.StatusCode.ERROR
        self._internal = trace.SpanKind.INTERNAL
        self._client = trace.SpanKind.CLIENT

    # -- plumbing

    def activate(self, span: Span) -> Activation:
        """Make ``span`` the current span of this context, and this tracing the current
        one (:func:`current_tracing`), until :meth:`deactivate`."""
        return self._attach(self._span_context(span)), _current.set(self)

    def deactivate(self, activation: Activation) -> None:
        """Undo :meth:`activate` (in the same context)."""
        context, current = activation
        _current.reset(current)
        self._detach(context)

    def _fail(self, span: Span, error_type: str, description: str | None) -> None:
        span.set_attribute(ERROR_TYPE, error_type)
        text = None if description is None else description[:_DESCRIPTION_CHARS]
        span.set_status(self._status(self._error, text))

    def _describe(self, error: OperationError, redactor: Redactor) -> str:
        """The status description of ``error``: its message, masked by ``redactor``.

        Without content capture, an error whose message may quote content (an
        ``output_parse_error``) is described by its code and the details that come
        from configuration (the schema, the failing keyword, where in the schema).
        """
        if self.settings.capture_content or error.code not in _CONTENT_QUOTING_CODES:
            return redactor.redact(error.message)
        details = error.details or {}
        found = [
            f"{key}={details[key]}"
            for key in _CONTENT_FREE_DETAILS
            if isinstance(details.get(key), str)
        ]
        where = f" ({', '.join(found)})" if found else ""
        return redactor.redact(
            f"{error.code}{where}; the message may quote content and is recorded only "
            "with capture_content=True"
        )

    # -- run, hook, operation

    def start_run(self, run: Run) -> Span:
        """The span of one run (its status is set by :meth:`end_run`)."""
        attributes: dict[str, AttributeValue] = {
            RUN_ID: run.run_id,
            RUN_TRIGGER: run.trigger.value,
            CHAT_ID: run.chat_id,
            CHAT_BRANCH_ID: run.branch_id,
        }
        if run.profile_id is not None:
            attributes[PROFILE_ID] = run.profile_id
        return self._tracer.start_span("opsrun.run", kind=self._internal, attributes=attributes)

    def end_run(self, span: Span, run: Run) -> None:
        """Record how the run ended and end its span; a failed run is an error."""
        span.set_attribute(RUN_STATUS, run.status.value)
        if run.abort_reason is not None:
            span.set_attribute(RUN_ABORT_REASON, run.abort_reason)
        failed = run.failed_type
        if run.status == RunStatus.FAILED and failed is not None:
            span.set_attribute(RUN_FAILED_TYPE, failed.value)
            details: FailedDetails | None = run.failed_details
            if details is not None and details.error_code is not None:
                span.set_attribute(RUN_ERROR_CODE, details.error_code)
            if details is not None and details.operation_id is not None:
                span.set_attribute(RUN_FAILED_OPERATION, details.operation_id)
            self._fail(span, failed.value, f"the run failed ({failed.value})")
        span.end()

    def start_hook(self, hook: Hook, operations: int) -> Span:
        """The span of one hook's execution (``operations`` will execute)."""
        attributes: dict[str, AttributeValue] = {HOOK: hook.value, HOOK_OPERATIONS: operations}
        return self._tracer.start_span(
            f"opsrun.hook {hook.value}", kind=self._internal, attributes=attributes
        )

    def start_operation(self, definition: OperationDefinition, hook: Hook, required: bool) -> Span:
        """The span of one operation's execution."""
        attributes: dict[str, AttributeValue] = {
            OPERATION_ID: definition.operation_id,
            OPERATION_NAME: definition.name,
            OPERATION_KIND: definition.kind,
            OPERATION_REQUIRED: required,
            HOOK: hook.value,
        }
        return self._tracer.start_span(
            f"opsrun.operation {definition.operation_id}",
            kind=self._internal,
            attributes=attributes,
        )

    def end_operation(
        self,
        span: Span,
        status: OperationStatus,
        skipped_reason: SkippedReason | None,
        error: OperationError | None,
        redactor: Redactor,
    ) -> None:
        """Record how the operation ended and end its span; an ``error`` is an error.

        An operation still running here was cut off by the run's abort or the caller's
        cancellation: it ends ``aborted``, as the run records it.
        """
        shown = status if status.is_terminal else OperationStatus.ABORTED
        span.set_attribute(OPERATION_STATUS, shown.value)
        if skipped_reason is not None:
            span.set_attribute(OPERATION_SKIPPED_REASON, skipped_reason.value)
        if status == OperationStatus.ERROR and error is not None:
            self._fail(span, error.code, self._describe(error, redactor))
        span.end()

    # -- LLM calls

    def start_llm(
        self,
        call: Literal["main", "aux"],
        *,
        model: str | None,
        provider: str | None,
        conversation_id: str,
        request: Mapping[str, AttributeValue],
        redactor: Redactor,
    ) -> Span:
        """The span of one LLM call (all its attempts), named ``chat <model>``.

        ``request`` holds the ``gen_ai.request.*`` and ``gen_ai.output.type`` attributes;
        ``model`` and ``provider`` are masked by ``redactor`` and bounded.
        """
        attributes: dict[str, AttributeValue] = {
            GEN_AI_OPERATION_NAME: "chat",
            GEN_AI_CONVERSATION_ID: conversation_id,
            LLM_CALL: call,
            **request,
        }
        if model:
            model = redactor.redact(model)[:_NAME_CHARS]
            attributes[GEN_AI_REQUEST_MODEL] = model
        if provider:
            attributes[GEN_AI_PROVIDER_NAME] = redactor.redact(provider)[:_NAME_CHARS]
        name = f"chat {model}" if model else "chat"
        return self._tracer.start_span(name, kind=self._client, attributes=attributes)

    def end_llm(
        self,
        span: Span,
        *,
        redactor: Redactor,
        attempts: int,
        status: str | None = None,
        finish_reason: str | None = None,
        provider_finish_reason: str | None = None,
        usage: Usage | None = None,
        response_model: str | None = None,
        response_id: str | None = None,
        error: OperationError | None = None,
        messages: Sequence[tuple[str, str]] = (),
        reply: str | None = None,
    ) -> None:
        """Record the outcome of an LLM call and end its span; an ``error`` is an error.

        ``messages`` (role, text) and ``reply`` are recorded only when content capture is
        on, masked by ``redactor`` and bounded; so are the error's message and the
        response's model and id.
        """
        span.set_attribute(LLM_ATTEMPTS, attempts)
        if status is not None:
            span.set_attribute(LLM_STATUS, status)
        if finish_reason is not None:
            span.set_attribute(LLM_FINISH_REASON, finish_reason)
        if provider_finish_reason is not None:
            span.set_attribute(GEN_AI_RESPONSE_FINISH_REASONS, (provider_finish_reason,))
        if usage is not None:
            if usage.input_tokens is not None:
                span.set_attribute(GEN_AI_USAGE_INPUT_TOKENS, usage.input_tokens)
            if usage.output_tokens is not None:
                span.set_attribute(GEN_AI_USAGE_OUTPUT_TOKENS, usage.output_tokens)
        if response_model:
            span.set_attribute(GEN_AI_RESPONSE_MODEL, redactor.redact(response_model)[:_NAME_CHARS])
        if response_id:
            span.set_attribute(GEN_AI_RESPONSE_ID, redactor.redact(response_id)[:_NAME_CHARS])
        if self.settings.capture_content and span.is_recording():
            # The provider's reason; else opsrun's (a call cut off by a deadline, an error).
            self._capture(span, redactor, messages, reply, provider_finish_reason or finish_reason)
        if error is not None:
            self._fail(span, error.code, self._describe(error, redactor))
        span.end()

    def _capture(
        self,
        span: Span,
        redactor: Redactor,
        messages: Sequence[tuple[str, str]],
        reply: str | None,
        finish_reason: str | None,
    ) -> None:
        limit = self.settings.max_content_chars
        truncated = False
        if messages:
            text, cut = bounded_messages(messages, redactor=redactor, limit=limit)
            span.set_attribute(GEN_AI_INPUT_MESSAGES, text)
            truncated |= cut
        if reply is not None:
            text, cut = bounded_messages(
                (("assistant", reply),),
                redactor=redactor,
                limit=limit,
                finish_reason=finish_reason or "stop",
            )
            span.set_attribute(GEN_AI_OUTPUT_MESSAGES, text)
            truncated |= cut
        if truncated:
            span.set_attribute(CONTENT_TRUNCATED, True)


# -- content ------------------------------------------------------------------------------


def _message_json(role: str, content: str, finish_reason: str | None) -> str:
    message: dict[str, Any] = {"role": role, "parts": [{"type": "text", "content": content}]}
    if finish_reason is not None:
        message["finish_reason"] = finish_reason
    return json.dumps(message, ensure_ascii=False, separators=(",", ":"))


def _fitted(
    role: str, text: str, finish_reason: str | None, room: int, *, whole: bool, least: int
) -> tuple[str, bool] | None:
    """The message in at most ``room`` characters, and whether it is whole.

    Whole when ``whole`` (``text`` is all of the message) and it fits; else with ``text``
    cut to end in ``…``, keeping at least ``least`` characters of it. None when even that
    does not fit.
    """
    if whole:
        item = _message_json(role, text, finish_reason)
        if len(item) <= room:
            return item, True
    empty = len(_message_json(role, _ELLIPSIS, finish_reason))
    cut = text[: max(room - empty, 0)]
    while len(cut) >= least:
        item = _message_json(role, cut + _ELLIPSIS, finish_reason)
        over = len(item) - room
        if over <= 0:
            return item, False
        if not cut:
            break
        cut = cut[: len(cut) - max(over // _ESCAPE_CHARS, 1)]
    return None


def bounded_messages(
    messages: Sequence[tuple[str, str]],
    *,
    redactor: Redactor,
    limit: int,
    finish_reason: str | None = None,
) -> tuple[str, bool]:
    """``messages`` (role, text) as GenAI message JSON of at most ``limit`` characters.

    Each text is masked by ``redactor`` first. The newest messages are kept: going back
    from the last one, the first message that does not fit is cut to fit (ending in
    ``…``) and the older ones are left out; an older message that would keep none of its
    text is left out too. The newest message is left out only when not even its role
    fits in ``limit`` (never at ``Telemetry``'s minimum of 64 for the roles opsrun
    sends): when ``finish_reason`` leaves no room for any of its text, the finish reason
    is left out of it, and its text may be cut down to ``…`` alone. Only the part of a
    text that could be kept is redacted (plus a wide margin), so a multi-megabyte message
    costs no more than a short one. Returns the JSON and whether anything was cut or left
    out.
    """
    room = limit - 2  # the brackets
    kept: list[str] = []
    truncated = False
    for role, content in reversed(messages):
        head = (
            content if len(content) <= room + _REDACT_MARGIN else content[: room + _REDACT_MARGIN]
        )
        text = redactor.redact(head)
        whole = head is content  # a head cut off for redaction is never whole
        separator = 1 if kept else 0
        fitted = _fitted(role, text, finish_reason, room - separator, whole=whole, least=1)
        if fitted is None and not kept:
            # The newest message is never left out: its finish reason goes before its text.
            fitted = _fitted(role, text, None, room, whole=whole, least=0)
            fitted = None if fitted is None else (fitted[0], False)
        if fitted is None:
            truncated = True
            break
        item, complete = fitted
        kept.append(item)
        room -= len(item) + separator
        if not complete:
            truncated = True
            break
    return "[" + ",".join(reversed(kept)) + "]", truncated
