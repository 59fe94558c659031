"""The one main LLM call of a run: prompt, streaming, errors and cancellation."""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio

from .._redact import StreamRedactor
from ..errors import ProviderError, ProviderTimeout, RateLimited, bound_details
from ..model import (
    FinishReason,
    MainLlmDelta,
    MainLlmFinished,
    MainLlmStarted,
    MainLlmStatus,
    OperationError,
)
from ..ports import MainLlmDone, MainLlmRequest
from ._prompt import prompt_hash, to_provider_messages
from ._scheduler import error_of
from ._snapshot import take_snapshot

if TYPE_CHECKING:
    from ._runner import _RunState

__all__: list[str] = []


async def call_main_llm(state: _RunState) -> bool:
    """Run the main LLM once; return True when it finished ``done``."""
    runner = state.runner
    redactor = runner.redactor
    prompt = state.effective_prompt()
    messages = prompt.messages
    provider_messages = to_provider_messages(
        messages, supports_developer=runner.main_llm.supports_developer_role
    )
    state.prompt_messages = messages
    digest = prompt_hash(provider_messages)
    snapshot = take_snapshot(
        messages,
        provider_messages,
        prompt_hash=digest,
        policy=runner.snapshot,
        redactor=redactor,
        window=runner.window,
        trimmed=prompt.trimmed,
        inclusions=prompt.inclusions,
    )
    params = state.request.main_llm_params
    state.main_llm = state.main_llm.model_copy(
        update={
            "started": True,
            "started_at": state.clock.now(),
            "prompt_hash": digest,
            "prompt": snapshot,
            "params": redactor.redact_value(bound_details(params)) if params else {},
        }
    )
    state.emitter.emit(MainLlmStarted)
    request = MainLlmRequest(
        messages=provider_messages,
        run_id=state.run.run_id,
        chat_id=state.run.chat_id,
        user_message_id=state.run.user_message_id,
        trigger=state.run.trigger,
        params=params,
    )
    parts: list[str] = []
    deltas = StreamRedactor(redactor)  # a key split across deltas is masked whole
    done: MainLlmDone | None = None
    error: OperationError | None = None
    reason = FinishReason.COMPLETED
    scope = anyio.CancelScope()
    state.scopes.add(scope)
    if state.abort_reason is not None:
        scope.cancel()
    try:
        with scope:
            stream = runner.main_llm.stream(request)
            try:
                async for item in stream:
                    if isinstance(item, MainLlmDone):
                        done = item
                        break
                    parts.append(item)
                    released = deltas.feed(item)
                    if released:
                        state.emitter.emit(MainLlmDelta, text=released)
            finally:
                aclose = getattr(stream, "aclose", None)
                if aclose is not None:
                    with anyio.CancelScope(shield=True):
                        await aclose()
    except ProviderTimeout as exc:
        error, reason = error_of(exc.code, exc.message), FinishReason.TIMEOUT
    except RateLimited as exc:
        error, reason = error_of(exc.code, exc.message), FinishReason.RATE_LIMITED
    except ProviderError as exc:
        error, reason = error_of(exc.code, exc.message), FinishReason.PROVIDER_ERROR
    except Exception as exc:  # a broken adapter must not crash the run
        error = error_of("main_llm_exception", f"{type(exc).__name__}: {exc}")
        reason = FinishReason.PROVIDER_ERROR
    finally:
        state.scopes.discard(scope)
    rest = deltas.flush()
    if rest:
        state.emitter.emit(MainLlmDelta, text=rest)

    if state.abort_reason is not None:
        status = MainLlmStatus.ABORTED
        reason = (
            FinishReason.DEADLINE if state.abort_reason == "deadline" else FinishReason.USER_ABORT
        )
        error = None
    elif error is None and done is None:
        status = MainLlmStatus.ERROR
        error = error_of("main_llm_incomplete", "the main LLM stream ended without a final result")
        reason = FinishReason.UNKNOWN
    else:
        status = MainLlmStatus.ERROR if error is not None else MainLlmStatus.DONE

    text = done.text if done is not None else "".join(parts)
    if error is not None:
        error = state.redact_error(error)
    state.main_llm = state.main_llm.model_copy(
        update={
            "status": status,
            "finish_reason": reason,
            "provider_finish_reason": done.finish_reason if done else None,
            "error": error,
            "text": text,
            "usage": done.usage if done else None,
            "finished_at": state.clock.now(),
        }
    )
    state.emitter.emit(MainLlmFinished, status=status, finish_reason=reason, error=error)
    return status == MainLlmStatus.DONE
