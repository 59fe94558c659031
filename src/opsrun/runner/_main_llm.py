"""The one main LLM call of a run: prompt, streaming, errors and cancellation."""

from __future__ import annotations

from dataclasses import dataclass, field

import anyio

from .._redact import StreamRedactor
from ..errors import ProviderError, ProviderTimeout, RateLimited, bound_details
from ..model import (
    FinishReason,
    MainLlmCall,
    MainLlmDelta,
    MainLlmFinished,
    MainLlmStarted,
    MainLlmStatus,
    OperationError,
)
from ..ports import MainLlmDone, MainLlmRequest
from ..prompt import EffectivePrompt, prompt_hash, take_snapshot, to_provider_messages
from ._context import Cancellation, RunContext
from ._events import EventEmitter
from ._ledger import error_of, redact_error

__all__ = ["call_main_llm"]

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


async def call_main_llm(
    ctx: RunContext,
    emitter: EventEmitter,
    cancellation: Cancellation,
    prompt: EffectivePrompt,
) -> MainLlmCall:
    """Send ``prompt`` to the main LLM once and return the recorded call."""
    call, request = _prepare(ctx, prompt)
    emitter.emit(MainLlmStarted)
    stream = await _stream(ctx, emitter, cancellation, request)
    status, reason, error = _outcome(stream, cancellation)
    done = stream.done
    if error is not None:
        error = redact_error(ctx.redactor, error)
    call = call.model_copy(
        update={
            "status": status,
            "finish_reason": reason,
            "provider_finish_reason": _provider_reason(done),
            "error": error,
            "text": done.text if done is not None else "".join(stream.parts),
            "usage": done.usage if done else None,
            "finished_at": ctx.clock.now(),
        }
    )
    emitter.emit(MainLlmFinished, status=status, finish_reason=reason, error=error)
    return call


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
    call = MainLlmCall(
        started=True,
        started_at=ctx.clock.now(),
        prompt_hash=digest,
        prompt=snapshot,
        params=ctx.redactor.redact_value(bound_details(params)) if params else {},
    )
    meta = ctx.meta
    request = MainLlmRequest(
        messages=provider_messages,
        run_id=meta.run_id,
        chat_id=meta.chat_id,
        user_message_id=meta.user_message_id,
        trigger=meta.trigger,
        meta=ctx.request.host,
        params=params,
    )
    return call, request


async def _stream(
    ctx: RunContext,
    emitter: EventEmitter,
    cancellation: Cancellation,
    request: MainLlmRequest,
) -> _Stream:
    """Stream the reply, emitting redacted deltas; provider errors end up in the result."""
    result = _Stream()
    deltas = StreamRedactor(ctx.redactor)  # a key split across deltas is masked whole
    scope = anyio.CancelScope()
    cancellation.watch(scope)
    try:
        with scope:
            stream = ctx.main_llm.stream(request)
            try:
                async for item in stream:
                    if isinstance(item, MainLlmDone):
                        result.done = item
                        break
                    result.parts.append(item)
                    released = deltas.feed(item)
                    if released:
                        emitter.emit(MainLlmDelta, text=released)
            finally:
                aclose = getattr(stream, "aclose", None)
                if aclose is not None:
                    with anyio.CancelScope(shield=True):
                        await aclose()
    except ProviderError as exc:
        reason = next(r for kind, r in _FAILURES if isinstance(exc, kind))
        result.error, result.reason = error_of(exc.code, exc.message), reason
    except Exception as exc:  # a broken adapter must not crash the run
        result.error = error_of("main_llm_exception", f"{type(exc).__name__}: {exc}")
        result.reason = FinishReason.PROVIDER_ERROR
    finally:
        cancellation.unwatch(scope)
    rest = deltas.flush()
    if rest:
        emitter.emit(MainLlmDelta, text=rest)
    return result


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
