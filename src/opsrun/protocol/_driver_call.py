"""One model call of the plan driver: the request, provider retries, the time limit and
the response-format step-down."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio

from opsrun._retry import Backoff, Sleep, call_with_retries
from opsrun.errors import (
    ProviderError,
    ProviderTimeout,
    RateLimited,
    ResponseFormatRejected,
    bound_text,
)
from opsrun.model import Samplers
from opsrun.ports import LlmProvider, LlmRequest, LlmResponse, ProviderMessage, ResponseFormat

from ._driver_config import DriverConfig
from ._driver_parts import Rejected
from ._schemas import load_schema
from ._trace import TraceBuilder

__all__ = ["FormatMemory", "ModelCall"]


@dataclass(slots=True)
class FormatMemory:
    """Whether the provider refused ``response_format`` once (then it is never sent again)."""

    rejected: bool = False


@dataclass(slots=True, kw_only=True)
class ModelCall:
    """Calls the model for one turn and records each call in the trace."""

    provider: LlmProvider
    model: str
    cfg: DriverConfig
    trace: TraceBuilder
    trace_id: str
    emit: Callable[..., None]
    sleep: Sleep
    formats: FormatMemory

    async def call(
        self, messages: list[ProviderMessage], version: int, purpose: str
    ) -> str | Rejected:
        """One completion (with provider retries and the response-format step-down)."""
        level = self.format_level()
        while True:
            request = self.request(messages, version, level)
            outcome = await self.complete(request, purpose, version, level)
            if isinstance(outcome, LlmResponse):
                self.trace.raw(outcome.text)
                return outcome.text
            if isinstance(outcome, ResponseFormatRejected) and level != "none":
                self.formats.rejected = True
                self.trace["response_format_fallback"] = True
                self.emit(
                    "LLM_RESPONSE_FORMAT_FALLBACK",
                    **{"from": level, "to": "none"},
                    reason=bound_text(outcome.message, 200),
                )
                level = "none"
                continue
            if isinstance(outcome, ProviderTimeout):
                self.emit("LLM_REQUEST_TIMEOUT", timeout=self.cfg.timeout)
                return Rejected("ERR_LLM_TIMEOUT", outcome.message, "llm")
            self.emit(
                "LLM_REQUEST_FAILED", code=outcome.code, reason=bound_text(outcome.message, 200)
            )
            return Rejected("ERR_LLM_REQUEST_FAILED", f"[{outcome.code}] {outcome.message}", "llm")

    def format_level(self) -> str:
        if not self.cfg.strict_json or self.formats.rejected:
            return "none"
        return self.provider.capabilities.structured_output

    def request(self, messages: list[ProviderMessage], version: int, level: str) -> LlmRequest:
        response_format: ResponseFormat | None = None
        if level in ("json_schema_strict", "json_schema"):
            response_format = ResponseFormat(
                type="json_schema",
                schema=load_schema(version, provider=True),
                name=f"opsrun_plan_v{version}",
                strict=level == "json_schema_strict",
            )
        elif level == "json_object":
            response_format = ResponseFormat(type="json")
        cfg = self.cfg
        return LlmRequest(
            messages=tuple(messages),
            model=self.model,
            samplers=Samplers(
                temperature=cfg.temperature,
                top_p=cfg.top_p,
                presence_penalty=cfg.presence_penalty,
                frequency_penalty=cfg.frequency_penalty,
            ),
            max_output_tokens=cfg.output_tokens(sum(len(m.content) for m in messages)),
            response_format=response_format,
            timeout=cfg.timeout,
            meta={"trace_id": self.trace_id},
        )

    async def complete(
        self, request: LlmRequest, purpose: str, version: int, level: str
    ) -> LlmResponse | ProviderError:
        """Call the provider with a time limit, retrying rate limits and outages.

        Each attempt sends ``LLM_REQUEST_SENT`` and adds one record to the trace's
        ``calls``, its outcome included: ``ok``, or the provider error's code.
        """
        input_chars = sum(len(m.content) for m in request.messages)

        async def attempt() -> LlmResponse | ProviderError:
            self.emit(
                "LLM_REQUEST_SENT",
                model=self.model,
                provider=type(self.provider).__name__,
                schema_version=version,
                token_budget=request.max_output_tokens,
                input_chars=input_chars,
                response_format=level,
                purpose=purpose,
            )
            record: dict[str, Any] = {
                "purpose": purpose,
                "protocol": version,
                "response_format": level,
                "input_chars": input_chars,
                "max_tokens": request.max_output_tokens,
            }
            self.trace.add("calls", record)
            outcome = await self.attempt(request)
            if isinstance(outcome, LlmResponse):
                record.update(
                    outcome="ok", finish_reason=outcome.finish_reason, chars=len(outcome.text)
                )
            else:
                record["outcome"] = outcome.code
            return outcome

        retried = await call_with_retries(
            attempt,
            should_retry=lambda o: (
                isinstance(o, ProviderError) and o.retryable and not isinstance(o, ProviderTimeout)
            ),
            retry_after=lambda o: o.retry_after if isinstance(o, RateLimited) else None,
            max_attempts=self.cfg.provider_attempts,
            backoff=Backoff(0.5, 8.0),
            sleep=self.sleep,
        )
        return retried.value

    async def attempt(self, request: LlmRequest) -> LlmResponse | ProviderError:
        """One provider call within ``timeout``; a failure is returned, not raised: a
        provider error as it is, any other exception as ``ProviderError``
        (``provider_error``)."""
        try:
            with anyio.fail_after(self.cfg.timeout):
                return await self.provider.complete(request)
        except TimeoutError:
            return ProviderTimeout(f"no answer within {self.cfg.timeout:g}s")
        except ProviderError as exc:
            return exc
        except Exception as exc:  # an adapter's bug or an unmapped client error
            return ProviderError(f"the provider raised {bound_text(repr(exc), 300)}")
