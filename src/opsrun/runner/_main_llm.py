"""The one main LLM call of a run: prompt, streaming, retries, errors and cancellation."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel

from .._redact import StreamRedactor
from .._retry import Sleep, call_with_retries, no_retry_message
from .._telemetry import (
    GEN_AI_REQUEST_FREQUENCY_PENALTY,
    GEN_AI_REQUEST_MAX_TOKENS,
    GEN_AI_REQUEST_PRESENCE_PENALTY,
    GEN_AI_REQUEST_SEED,
    GEN_AI_REQUEST_TEMPERATURE,
    GEN_AI_REQUEST_TOP_K,
    GEN_AI_REQUEST_TOP_P,
)
from ..errors import ProviderError, ProviderTimeout, RateLimited, bound_details
from ..model import (
    FinishReason,
    MainLlmCall,
    MainLlmStatus,
    OperationError,
)
from ..model._base import well_formed
from ..model._build import Builder, replaced
from ..ports import MainLlmDone, MainLlmRequest
from ..prompt import EffectivePrompt, prompt_hash, take_snapshot, to_provider_messages
from ._context import Cancellation, RunContext
from ._events import EventEmitter
from ._ledger import error_of, redact_error

if TYPE_CHECKING:
    from opentelemetry.util.types import AttributeValue

__all__ = ["MainLlmReply", "call_main_llm"]

_CALL = Builder(MainLlmCall).shape(("started", "started_at", "prompt_hash", "prompt", "params"))
"""Builds the started call from the snapshot and values the runner made."""

_FAILURES: tuple[tuple[type[ProviderError], FinishReason], ...] = (
    (ProviderTimeout, FinishReason.TIMEOUT),
    (RateLimited, FinishReason.RATE_LIMITED),
    (ProviderError, FinishReason.PROVIDER_ERROR),
)
"""Provider errors and the finish reason each means, most specific first."""


@dataclass(slots=True)
class _Stream:
    """What one streaming call produced."""

    parts: list[str] = field(default_factory=list)
    done: MainLlmDone | None = None
    error: OperationError | None = None
    reason: FinishReason = FinishReason.COMPLETED
    streamed: bool = False
    """A ``main_llm.delta`` was emitted: an error after it is final."""
    transient: bool = False
    """The error is one a retry may cure (``RateLimited``, ``ProviderTimeout``)."""
    retry_after: float | None = None
    """Seconds the provider asked to wait (``RateLimited.retry_after``)."""
    whole: str | None = None
    """The joined parts redacted in one piece, when the stream released them so (every
    part was held back until the end)."""


@dataclass(frozen=True, slots=True)
class MainLlmReply:
    """The recorded main LLM call, and its text as the run records it when known."""

    call: MainLlmCall
    """The call, its text as generated."""
    redacted_text: str | None = None
    """``call.text`` redacted, when the stream already redacted it whole; else None."""


async def call_main_llm(
    ctx: RunContext,
    emitter: EventEmitter,
    cancellation: Cancellation,
    prompt: EffectivePrompt,
    interrupted: Callable[[MainLlmCall], None],
) -> MainLlmReply:
    """Send ``prompt`` to the main LLM and return the recorded call.

    A transient failure before any text was streamed is retried as
    ``ctx.main_llm_retry`` says; one ``main_llm.started`` and one ``main_llm.finished``
    frame all the attempts. With telemetry, one span covers them all, as the current
    span while the main LLM streams. Cancelled from outside, the call ends ``aborted``
    with the text streamed so far, handed to ``interrupted``, and the cancellation
    goes on.
    """
    call, request = _prepare(ctx, prompt)
    tracing = ctx.tracing
    if tracing is None:
        return await _generate(ctx, emitter, cancellation, call, request, interrupted)
    span = tracing.start_llm(
        "main",
        model=_text_param(request.params, "model"),
        provider=_text_param(request.params, "provider"),
        conversation_id=request.chat_id,
        request=_request_attributes(request.params),
        redactor=ctx.redactor,
    )
    token = tracing.activate(span)
    ended = call

    def ended_early(early: MainLlmCall) -> None:
        nonlocal ended
        ended = early
        interrupted(early)

    redacted: str | None = None
    try:
        reply = await _generate(ctx, emitter, cancellation, call, request, ended_early)
        ended, redacted = reply.call, reply.redacted_text
    finally:
        tracing.deactivate(token)
        tracing.end_llm(
            span,
            redactor=ctx.redactor,
            attempts=ended.attempts,
            status=(ended.status or MainLlmStatus.ABORTED).value,
            finish_reason=ended.finish_reason.value if ended.finish_reason else None,
            provider_finish_reason=ended.provider_finish_reason,
            usage=ended.usage,
            error=ended.error,
            messages=[(m.role, m.content) for m in request.messages],
            reply=ended.text if redacted is None else redacted,
        )
    return reply


async def _generate(
    ctx: RunContext,
    emitter: EventEmitter,
    cancellation: Cancellation,
    call: MainLlmCall,
    request: MainLlmRequest,
    interrupted: Callable[[MainLlmCall], None],
) -> MainLlmReply:
    """Stream the reply, with retries; return the call as recorded."""
    emitter.main_llm_started()
    calls = 0
    current = _Stream()  # the attempt in progress, as far as it streamed

    async def attempt() -> _Stream:
        nonlocal calls, current
        if cancellation.aborted:  # aborted during the backoff: no further call
            return _Stream()
        calls += 1
        current = _Stream()
        return await _stream(ctx, emitter, cancellation, request, current)

    try:
        stream = await _attempts(ctx, cancellation, attempt)
    except anyio.get_cancelled_exc_class():
        # Cancelled from outside (the run is then aborted, reason "cancelled").
        status, reason = MainLlmStatus.ABORTED, FinishReason.USER_ABORT
        early = _ended(ctx, call, current, calls, status, reason, None)
        emitter.main_llm_finished(status, reason, None)
        interrupted(early)
        raise
    status, reason, error = _outcome(stream, cancellation)
    if error is not None:
        error = redact_error(ctx.redactor, error)
    call = _ended(ctx, call, stream, calls, status, reason, error)
    emitter.main_llm_finished(status, reason, error)
    return MainLlmReply(call, stream.whole if call.text == "".join(stream.parts) else None)


def _ended(
    ctx: RunContext,
    call: MainLlmCall,
    stream: _Stream,
    calls: int,
    status: MainLlmStatus,
    reason: FinishReason,
    error: OperationError | None,
) -> MainLlmCall:
    """``call`` as it ended: ``stream``'s text and usage, after ``calls`` attempts."""
    done = stream.done
    return replaced(
        call,
        {
            "status": status,
            "finish_reason": reason,
            "provider_finish_reason": _provider_reason(done),
            "error": error,
            # A JSON escape of half a surrogate pair per delta decodes to lone
            # surrogates: joined here, so the text has a UTF-8 form.
            "text": well_formed(done.text if done is not None else "".join(stream.parts)),
            "usage": done.usage if done else None,
            "attempts": calls,
            "finished_at": ctx.clock.now(),
        },
    )


async def _attempts(
    ctx: RunContext, cancellation: Cancellation, attempt: Callable[[], Awaitable[_Stream]]
) -> _Stream:
    """The first attempt, and retries of it as ``ctx.main_llm_retry`` says."""

    def should_retry(s: _Stream) -> bool:
        return s.transient and not s.streamed and not cancellation.aborted

    stream = await attempt()
    policy = ctx.main_llm_retry
    if policy.max_attempts > 1 and should_retry(stream):
        made = [stream]  # the first attempt, already made

        async def again() -> _Stream:
            return made.pop() if made else await attempt()

        retried = await call_with_retries(
            again,
            should_retry=should_retry,
            retry_after=lambda s: s.retry_after,
            max_attempts=policy.max_attempts,
            backoff=policy.backoff,
            deadline=ctx.deadline,
            sleep=_abortable(policy.sleep, cancellation),
        )
        stream = retried.value
        if stream.error is not None and retried.refused_wait is not None:
            message = no_retry_message(stream.error.message, retried.refused_wait)
            stream.error = error_of(stream.error.code, message, stream.error.details)
    return stream


_REQUEST_NUMBERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (GEN_AI_REQUEST_TEMPERATURE, ("temperature",)),
    (GEN_AI_REQUEST_TOP_P, ("top_p", "topP")),
    (GEN_AI_REQUEST_TOP_K, ("top_k", "topK")),
    (
        GEN_AI_REQUEST_MAX_TOKENS,
        ("max_tokens", "maxTokens", "max_output_tokens", "maxOutputTokens"),
    ),
    (GEN_AI_REQUEST_SEED, ("seed",)),
    (GEN_AI_REQUEST_FREQUENCY_PENALTY, ("frequency_penalty", "frequencyPenalty")),
    (GEN_AI_REQUEST_PRESENCE_PENALTY, ("presence_penalty", "presencePenalty")),
)
"""The ``gen_ai.request.*`` attributes and the ``main_llm_params`` keys they are read from."""


def _text_param(params: Mapping[str, Any], key: str) -> str | None:
    value = params.get(key)
    return value if isinstance(value, str) else None


def _request_attributes(params: Mapping[str, Any]) -> dict[str, AttributeValue]:
    """The request's numeric generation settings, as GenAI attributes (numbers only)."""
    found: dict[str, AttributeValue] = {}
    for attribute, keys in _REQUEST_NUMBERS:
        for key in keys:
            value = params.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool):
                found[attribute] = value
                break
    return found


def _abortable(sleep: Sleep, cancellation: Cancellation) -> Sleep:
    """``sleep`` that the run's abort ends at once (the wait then simply returns)."""

    async def wait(seconds: float) -> None:
        scope = anyio.CancelScope()
        cancellation.watch(scope)
        try:
            with scope:
                await sleep(seconds)
        finally:
            cancellation.unwatch(scope)

    return wait


def _prepare(ctx: RunContext, prompt: EffectivePrompt) -> tuple[MainLlmCall, MainLlmRequest]:
    """The started call record (hash, snapshot, params) and the request to send."""
    messages = prompt.messages
    developer = ctx.main_llm.capabilities.developer_role
    provider_messages = to_provider_messages(messages, supports_developer=developer)
    digest = prompt_hash(provider_messages)
    snapshot = take_snapshot(
        messages,
        provider_messages,
        prompt_hash=digest,
        policy=ctx.snapshot,
        redactor=ctx.redactor,
        window=ctx.window,
        trimmed=prompt.trimmed,
        inclusions=prompt.inclusions,
    )
    params = ctx.request.main_llm_params
    started_at = ctx.clock.now()
    # Built without validation unless the host clock's reading is of another type.
    values = {
        "started": True,
        "started_at": started_at,
        "prompt_hash": digest,
        "prompt": snapshot,
        "params": bound_details(params, redactor=ctx.redactor) if params else {},
    }
    call = _CALL.build(values) if type(started_at) is datetime else MainLlmCall(**values)
    meta = ctx.meta
    request = MainLlmRequest(
        messages=provider_messages,
        run_id=meta.run_id,
        chat_id=meta.chat_id,
        user_message_id=meta.user_message_id,
        trigger=meta.trigger,
        meta=ctx.host,
        params=params,
    )
    return call, request


async def _stream(
    ctx: RunContext,
    emitter: EventEmitter,
    cancellation: Cancellation,
    request: MainLlmRequest,
    result: _Stream,
) -> _Stream:
    """Stream the reply into ``result``, emitting redacted deltas; provider errors end
    up in the result."""
    deltas = StreamRedactor(ctx.redactor)  # a key split across deltas is masked whole
    sent: list[str] = []  # the redacted deltas emitted
    scope = anyio.CancelScope()
    cancellation.watch(scope)
    try:
        with scope:
            stream = ctx.main_llm.stream(request)
            try:
                async for item in stream:
                    if isinstance(item, MainLlmDone):
                        result.done = item
                        if item.finish_reason == "error":  # the provider gave up mid-reply
                            raw = item.raw_finish_reason or "error"
                            result.error = error_of(
                                "provider_error",
                                f"the provider ended the reply with an error ({raw})",
                            )
                            result.reason, result.transient = FinishReason.PROVIDER_ERROR, True
                        break
                    result.parts.append(item)
                    released = deltas.feed(item)
                    if released:
                        result.streamed = True
                        sent.append(released)
                        emitter.main_llm_delta(released)
            finally:
                aclose = getattr(stream, "aclose", None)
                if aclose is not None:
                    with anyio.CancelScope(shield=True):
                        await aclose()
    except ProviderError as exc:
        reason = next(r for kind, r in _FAILURES if isinstance(exc, kind))
        result.error, result.reason = error_of(exc.code, exc.message), reason
        result.transient = exc.retryable
        result.retry_after = exc.retry_after if isinstance(exc, RateLimited) else None
    except Exception as exc:  # a broken adapter must not crash the run
        result.error = error_of("main_llm_exception", f"{type(exc).__name__}: {exc}")
        result.reason = FinishReason.PROVIDER_ERROR
    except anyio.get_cancelled_exc_class():
        # Only a cancel scope around the call may cancel it (then this raises again);
        # a cancellation the adapter's own code raised is its error.
        await anyio.lowlevel.checkpoint_if_cancelled()
        result.error = error_of("main_llm_exception", "the main LLM raised a cancellation")
        result.reason = FinishReason.PROVIDER_ERROR
    finally:
        cancellation.unwatch(scope)
    _flush(deltas, sent, result, emitter)
    return result


def _flush(deltas: StreamRedactor, sent: list[str], result: _Stream, emitter: EventEmitter) -> None:
    """Release what ``deltas`` holds as the stream's last delta.

    A reply that broke off may end inside a secret: its last word is masked whole, and
    the run records the text as its deltas said it (redacting the raw text again would
    not recognise the part of a key it holds).
    """
    whole = not result.streamed  # nothing released yet: the flush releases it all
    cut_off = result.done is None or result.error is not None
    rest = deltas.flush(cut_off=cut_off)
    if rest:
        result.streamed = True
        sent.append(rest)
        emitter.main_llm_delta(rest)
    if whole or cut_off:
        result.whole = "".join(sent)


def _outcome(
    stream: _Stream, cancellation: Cancellation
) -> tuple[MainLlmStatus, FinishReason, OperationError | None]:
    """Status, finish reason and error of the call."""
    if cancellation.reason is not None:
        deadline = cancellation.reason == "deadline"
        return (
            MainLlmStatus.ABORTED,
            FinishReason.DEADLINE if deadline else FinishReason.USER_ABORT,
            None,
        )
    if stream.error is None and stream.done is None:
        error = error_of("main_llm_incomplete", "the main LLM stream ended without a final result")
        return MainLlmStatus.ERROR, FinishReason.UNKNOWN, error
    if stream.error is not None:
        return MainLlmStatus.ERROR, stream.reason, stream.error
    if stream.done is not None and stream.done.finish_reason == "content_filter":
        # The provider's filter stopped the reply: kept as the answer, recorded as such.
        return MainLlmStatus.DONE, FinishReason.POLICY_ERROR, None
    return MainLlmStatus.DONE, stream.reason, None


def _provider_reason(done: MainLlmDone | None) -> str | None:
    """The provider's finish reason as recorded: its own value when it gave one."""
    if done is None:
        return None
    return done.raw_finish_reason or done.finish_reason
