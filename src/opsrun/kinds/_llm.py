"""``kind="llm"``: one aux LLM call per operation run.

What happens, in order, and the error code each step can end with:

1. ``promptEffect`` outside ``before_main_llm`` → ``policy_error``; an unknown
   ``schemaRef`` or ``providerRef``, a schema that is invalid or has a ``$ref`` that
   does not resolve inside it (nothing is fetched), or a ``credentialRef`` nobody can
   resolve → ``config_error`` (no call is made).
2. ``system`` and ``prompt`` render as Liquid over ``art``, ``chatHistory``, ``run`` and
   ``mainLlm`` → ``template_render_error``.
3. ``maxInputTokens`` is checked with the injected token counter (default: characters
   / 4, see :func:`approximate_tokens`) → ``budget_exceeded``.
4. The provider is called; each attempt is bounded by ``timeoutMs`` → ``timeout``;
   ``rate_limited``; anything else the provider raises → ``provider_error``. ``retry``
   repeats failures listed in ``retryOn`` up to ``maxAttempts`` calls (through
   :mod:`opsrun._retry`, on tenacity). The wait doubles from ``backoffMs`` after each
   failed call, plus a random jitter of up to ``backoffMs``, capped at
   :data:`MAX_BACKOFF_SECONDS` (or ``backoffMs`` when that is longer); a provider's
   retry-after wins when it is longer. A retry whose wait would end at or after the
   operation's deadline is not made. A provider that rejects the response format is
   asked once more one structured-output level lower; that extra call is not counted
   against ``maxAttempts`` but is counted in ``outputsSummary.attempts``.
5. A ``content_filter`` finish → ``policy_error``; a finish reason ``error`` is a
   ``provider_error`` (retryable). A reported cost above ``budget.maxCostUsd`` (summed
   over the attempts, checked after each, so a failed attempt over it is not retried)
   → ``budget_exceeded``; an unreported cost passes.
6. ``output.mode="json"``: the reply (a whole-reply markdown code fence is removed)
   must parse as JSON (``NaN``/``Infinity`` and too deep a nesting refused) and
   validate against ``schemas[schemaRef]`` → ``output_parse_error``.

The result is written to ``writeArtifact`` (text: the string; json: the parsed value,
format ``json`` unless the spec says otherwise) and/or sent as ``promptEffect`` (JSON
values serialised compactly). The resolved credential reaches only
``LlmRequest.credential``; it is masked, with key-shaped strings, in every message,
detail, summary and output the operation returns. In the output only such strings are
masked (not values under secret-sounding keys, nor deep values), so a validated JSON
reply keeps its shape; one that masking makes invalid is an ``output_parse_error``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import anyio
from jsonschema import SchemaError
from jsonschema.exceptions import UnknownType, best_match
from jsonschema.protocols import Validator
from jsonschema.validators import validator_for
from pydantic import BaseModel
from pydantic_core import PydanticCustomError
from referencing import Registry
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012, specification_with

from .._redact import Redactor, sha256_text
from .._retry import Backoff, Sleep, call_with_retries, no_retry_message
from .._telemetry import (
    GEN_AI_OUTPUT_TYPE,
    GEN_AI_REQUEST_FREQUENCY_PENALTY,
    GEN_AI_REQUEST_MAX_TOKENS,
    GEN_AI_REQUEST_PRESENCE_PENALTY,
    GEN_AI_REQUEST_SEED,
    GEN_AI_REQUEST_TEMPERATURE,
    GEN_AI_REQUEST_TOP_K,
    GEN_AI_REQUEST_TOP_P,
    Tracing,
    current_tracing,
)
from ..errors import (
    MAX_TEXT_CHARS,
    OperationFailed,
    OpsrunError,
    ProviderTimeout,
    RateLimited,
    ResponseFormatRejected,
    TemplateError,
    bound_text,
)
from ..model import (
    MAX_JSON_DEPTH,
    ContentFormat,
    LlmParams,
    OperationDefinition,
    OperationError,
    OperationResult,
    Usage,
)
from ..model._base import well_formed
from ..operations import Operation, OperationContext
from ..ports import (
    STRUCTURED_OUTPUT_LEVELS,
    CredentialResolver,
    LlmProvider,
    LlmRequest,
    LlmResponse,
    ProviderLookup,
    ProviderMessage,
    ResponseFormat,
    StructuredOutput,
)
from ._common import (
    TokenCounter,
    approximate_tokens,
    done_result,
    failed_result,
    prompt_effect_problem,
    template_problems,
    with_secret,
)
from .liquid import TemplateEngine

if TYPE_CHECKING:
    from opentelemetry.util.types import AttributeValue

__all__ = ["LlmOperation"]

RAW_TEXT_PREVIEW = MAX_TEXT_CHARS
"""Characters of the reply kept in ``outputsSummary.rawTextPreview`` (json mode)."""
PARSE_ERROR_MESSAGE = 512
"""Characters of ``outputsSummary.parseErrorMessage``."""
MAX_BACKOFF_SECONDS = 30.0
"""Cap of the wait between two attempts (``backoffMs`` when that is longer)."""
STOP_ITEMS, STOP_ITEM_CHARS = 10, 120
"""How much of ``stop`` ``inputsSummary`` keeps."""

_FENCE = re.compile(r"\A\s*```[A-Za-z0-9_-]*[ \t]*\r?\n(?P<body>.*?)\r?\n[ \t]*```\s*\Z", re.S)

RetryKind = Literal["timeout", "provider_error", "rate_limit"]


def _fail(code: str, message: str, details: Mapping[str, Any] | None = None) -> OperationFailed:
    """The error that ends the execution with an error result."""
    return OperationFailed(message, code=code, details=details)


@dataclass(slots=True)
class _AttemptError:
    """Why one provider call gave no usable reply."""

    code: str
    message: str
    retry_kind: RetryKind | None
    """What ``retryOn`` must list for a retry; None: never retried."""
    retry_after: float | None = None
    format_rejected: bool = False
    """The provider refused the response format (a lower level may be tried once)."""
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class _Exchange:
    """Mutable bookkeeping of one execution."""

    redactor: Redactor
    inputs: dict[str, Any]
    outputs: dict[str, Any] = field(default_factory=lambda: {"attempts": 0})
    usage: Usage | None = None


def _add_usage(total: Usage | None, more: Usage | None) -> Usage | None:
    if more is None:
        return total
    if total is None:
        return more

    def add(a: Any, b: Any) -> Any:
        return b if a is None else a if b is None else a + b

    return Usage(
        input_tokens=add(total.input_tokens, more.input_tokens),
        output_tokens=add(total.output_tokens, more.output_tokens),
        total_tokens=add(total.total_tokens, more.total_tokens),
        cost_usd=add(total.cost_usd, more.cost_usd),
    )


def _over_budget(params: LlmParams, usage: Usage | None) -> _AttemptError | None:
    """``budget_exceeded`` when the cost reported so far is above ``budget.maxCostUsd``."""
    max_cost = params.budget.max_cost_usd
    cost = None if usage is None else usage.cost_usd
    if max_cost is None or cost is None or cost <= max_cost:
        return None
    return _AttemptError(
        "budget_exceeded",
        f"the reported cost is {cost:.6f} USD, more than budget.maxCostUsd={max_cost}",
        None,
        details={"costUsd": cost, "maxCostUsd": max_cost},
    )


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def parse_json_reply(text: str) -> Any:
    """Parse a JSON reply; a reply wrapped whole in a markdown code fence is unwrapped.

    Raises:
        ValueError: the text is not JSON (``json.JSONDecodeError`` included), or it is
            nested deeper than a stored value may be (``MAX_JSON_DEPTH`` levels).
    """
    fenced = _FENCE.match(text)
    body = fenced.group("body") if fenced else text
    too_deep = f"it is nested deeper than {MAX_JSON_DEPTH} levels"
    try:
        value = json.loads(body, parse_constant=_reject_constant)
    except RecursionError as exc:
        raise ValueError(too_deep) from exc
    try:
        return well_formed(value)
    except PydanticCustomError as exc:  # too deep, or a number too large for a float
        raise ValueError(too_deep if exc.type == "json_too_deep" else exc.message()) from exc


def _unresolvable_ref(schema: Mapping[str, Any]) -> str | None:
    """The first ``$ref`` (or ``$dynamicRef``) of ``schema`` that does not resolve inside
    it, or None.

    References resolve as jsonschema resolves them (an ``$id`` changes the base URI);
    one to another document is unresolvable, since nothing is fetched.
    """
    dialect = schema.get("$schema")
    spec = specification_with(dialect if isinstance(dialect, str) else "", default=DRAFT202012)
    top: object = schema
    stack = [(top, Registry().resolver_with_root(spec.create_resource(schema)))]
    while stack:
        contents, resolver = stack.pop()
        if not isinstance(contents, Mapping):
            continue  # a boolean schema
        for keyword in ("$ref", "$dynamicRef"):
            ref = contents.get(keyword)
            if isinstance(ref, str):
                try:
                    resolver.lookup(ref)
                except Unresolvable:
                    return ref
        stack.extend(
            (sub, resolver.in_subresource(spec.create_resource(sub)))
            for sub in spec.subresources_of(contents)
        )
    return None


def _parse_error(
    ex: _Exchange, message: str, details: Mapping[str, Any] | None = None
) -> OperationFailed:
    """``output_parse_error`` with ``message`` (bounded, masked), also kept as
    ``outputsSummary.parseErrorMessage``."""
    bounded = bound_text(message, PARSE_ERROR_MESSAGE, redactor=ex.redactor)
    ex.outputs["parseErrorMessage"] = bounded
    return _fail("output_parse_error", bounded, details)


def _validate(
    params: LlmParams,
    ex: _Exchange,
    validator: Validator,
    value: Any,
    *,
    after_masking: bool = False,
) -> None:
    """Check the parsed reply against ``params.output.schemaRef``'s schema.

    Raises:
        OperationFailed: ``output_parse_error``, the value does not match the schema
            (``details``: ``schemaRef``, ``path``, ``schemaPath``, ``validator``) or is
            nested too deeply to check; ``config_error``, the schema cannot be applied
            (a reference that does not resolve, an unknown type).
    """
    schema_ref = params.output.schema_ref
    try:
        error = best_match(validator.iter_errors(value))
    except RecursionError as exc:
        message = f"the reply is nested too deeply to check against schema {schema_ref!r}"
        raise _parse_error(ex, message, {"schemaRef": schema_ref}) from exc
    except (Unresolvable, UnknownType) as exc:
        raise _fail(
            "config_error",
            f"schema {schema_ref!r} could not be applied: {_describe(exc)}",
            {"schemaRef": schema_ref},
        ) from exc
    if error is None:
        return
    what = (
        "masking secrets in the reply leaves a value that does not match"
        if after_masking
        else "the reply does not match"
    )
    raise _parse_error(
        ex,
        f"{what} schema {schema_ref!r}: {error.message} (at {error.json_path})",
        {
            "schemaRef": schema_ref,
            "path": error.json_path,
            "schemaPath": "/" + "/".join(map(str, error.absolute_schema_path)),
            "validator": str(error.validator),
        },
    )


def _mask_strings(value: Any, redactor: Redactor) -> tuple[Any, bool]:
    """A copy of ``value`` (text or parsed JSON) with every string, keys included,
    masked by ``redactor``, and whether anything was masked.

    Only what its rules and literal secrets recognise is masked: numbers, booleans,
    nulls and the nesting are kept however deep, and a value is not masked for the name
    of its key (a game's ``token: 3`` stays a number), so a validated reply keeps its
    shape.
    """
    changed = False

    def mask(text: str) -> str:
        nonlocal changed
        masked = redactor.redact(text)
        changed = changed or masked != text
        return masked

    if not isinstance(value, dict | list):
        return (mask(value) if isinstance(value, str) else value), changed
    root: dict[str, Any] | list[Any] = {} if isinstance(value, dict) else []
    stack: list[tuple[dict[str, Any] | list[Any], dict[str, Any] | list[Any]]] = [(value, root)]
    while stack:  # a loop, not recursion: a reply may be nested deeper than the stack
        source, target = stack.pop()
        items = source.items() if isinstance(source, dict) else enumerate(source)
        for key, item in items:
            copy: Any = item
            if isinstance(item, dict | list):
                copy = {} if isinstance(item, dict) else []
                stack.append((item, copy))
            elif isinstance(item, str):
                copy = mask(item)
            if isinstance(target, dict):
                target[mask(str(key))] = copy
            else:
                target.append(copy)
    return root, changed


async def _attempt(
    provider: LlmProvider,
    request: LlmRequest,
    timeout: float | None,
    timeout_ms: int | None,
    ex: _Exchange,
) -> LlmResponse | _AttemptError:
    """Make one provider call: the reply to use, or why there is none (usage is recorded)."""
    try:
        with anyio.fail_after(timeout) if timeout is not None else nullcontext():
            response = await provider.complete(request)
    except Exception as exc:  # a provider adapter must not crash the operation
        return _attempt_error(exc, timeout_ms)
    ex.usage = _add_usage(ex.usage, response.usage)
    if response.request_id is not None:
        ex.outputs["providerRequestId"] = bound_text(response.request_id, 256, redactor=ex.redactor)
    ex.outputs["finishReason"] = response.finish_reason
    if response.finish_reason != "error":
        return response
    return _AttemptError(
        "provider_error",
        f"the provider ended the reply with an error ({response.raw_finish_reason or 'error'})",
        "provider_error",
    )


def _attempt_error(exc: Exception, timeout_ms: int | None) -> _AttemptError:
    """Classify what a provider call raised."""
    if isinstance(exc, ResponseFormatRejected):
        return _AttemptError(
            "provider_error", _describe(exc), "provider_error", format_rejected=True
        )
    if isinstance(exc, RateLimited):
        return _AttemptError("rate_limited", _describe(exc), "rate_limit", exc.retry_after)
    if isinstance(exc, ProviderTimeout):
        return _AttemptError("timeout", _describe(exc), "timeout")
    if isinstance(exc, TimeoutError):
        message = f"the provider did not answer within timeoutMs={timeout_ms}"
        return _AttemptError("timeout", message, "timeout")
    return _AttemptError("provider_error", _describe(exc), "provider_error")


class LlmOperation(Operation[LlmParams]):
    """The implementation of ``kind="llm"`` for one definition.

    Args:
        definition: The operation's definition (``kind="llm"``).
        providers: Finds the provider of ``providerRef``
            (:class:`opsrun.providers.ProviderRegistry`).
        credentials: Resolves ``credentialRef`` at run time.
        engine: The Liquid engine; it caches parsed templates, so share one.
        schemas: JSON Schemas by name for ``output.schemaRef``; read at run time.
        token_counter: Counts tokens for ``maxInputTokens`` (default
            :func:`~opsrun.prompt.approximate_tokens`; for exact counts
            :func:`~opsrun.prompt.tiktoken_counter` or the host's own tokenizer).
        redact_outputs: Also mask secrets in the value written or sent to the prompt.
        sleep: How the wait between retries passes (default ``anyio.sleep``); a test
            passes a recording fake to see the waits without spending them.
    """

    params_model: type[BaseModel] | None = LlmParams

    def __init__(
        self,
        definition: OperationDefinition,
        *,
        providers: ProviderLookup | None = None,
        credentials: CredentialResolver | None = None,
        engine: TemplateEngine | None = None,
        schemas: Mapping[str, Mapping[str, Any]] | None = None,
        token_counter: TokenCounter | None = None,
        redact_outputs: bool = True,
        sleep: Sleep | None = None,
    ) -> None:
        self.definition = definition
        self.providers = providers
        self.credentials = credentials
        self.engine = engine or TemplateEngine()
        self.schemas: Mapping[str, Mapping[str, Any]] = schemas if schemas is not None else {}
        self.token_counter: TokenCounter = token_counter or approximate_tokens
        self.redact_outputs = redact_outputs
        self.sleep: Sleep = sleep or anyio.sleep
        self._validators: dict[str, tuple[Mapping[str, Any], Validator]] = {}

    # -- execute ---------------------------------------------------------------------------

    async def execute(self, ctx: OperationContext[LlmParams]) -> OperationResult:
        """Make the aux call and return its effects (or an error result with summaries)."""
        given: object = ctx.params  # a raw dict when the catalog did not parse it
        params = given if isinstance(given, LlmParams) else LlmParams.model_validate(given)
        started = anyio.current_time()
        ex = _Exchange(ctx.redactor, inputs_summary(params))
        try:
            value = await self._run(ctx, params, ex)
        except OperationFailed as failure:
            ex.outputs["durationMs"] = _ms(anyio.current_time() - started)
            self._summarize_usage(ex)
            return failed_result(
                ex.redactor,
                failure.code,
                failure.message,
                failure.details or None,
                inputs_summary=ex.inputs,
                outputs_summary=ex.outputs,
            )
        ex.outputs["durationMs"] = _ms(anyio.current_time() - started)
        self._summarize_usage(ex)
        mode = params.output.mode
        return done_result(
            ctx,
            spec=params.write_artifact,
            target=params.prompt_effect,
            value=value,
            default_format=ContentFormat.JSON if mode == "json" else ContentFormat.TEXT,
            inputs_summary=_redact_fields(ex.redactor, ex.inputs, _FREE_TEXT_INPUTS),
            outputs_summary=_redact_fields(ex.redactor, ex.outputs, _FREE_TEXT_OUTPUTS),
        )

    async def _run(self, ctx: OperationContext[LlmParams], params: LlmParams, ex: _Exchange) -> Any:
        problem = prompt_effect_problem(ctx, params.prompt_effect is not None)
        if problem is not None:
            raise _fail("policy_error", problem)
        schema_ref = params.output.schema_ref
        validator = None if schema_ref is None else self._validator(schema_ref)
        provider = self._provider(params.provider_ref)
        secret = await self._credential(params.credential_ref)
        ex.redactor = with_secret(ex.redactor, secret)

        system, prompt = self._render(ctx, params, ex)
        if params.max_input_tokens is not None:
            counted = self.token_counter((system or "") + prompt)
            if counted > params.max_input_tokens:
                raise _fail(
                    "budget_exceeded",
                    f"the rendered input has about {counted} tokens, "
                    f"more than maxInputTokens={params.max_input_tokens}",
                    {"inputTokens": counted, "maxInputTokens": params.max_input_tokens},
                )
        messages = (
            *(() if not system else (ProviderMessage(role="system", content=system),)),
            ProviderMessage(role="user", content=prompt),
        )
        tracing = current_tracing()
        if tracing is None:
            response = await self._call(ctx, params, ex, provider, messages, secret)
        else:
            response = await self._traced_call(tracing, ctx, params, ex, provider, messages, secret)
        value = self._interpret(params, ex, response, validator)
        return self._masked(params, ex, value, validator) if self.redact_outputs else value

    async def _traced_call(
        self,
        tracing: Tracing,
        ctx: OperationContext[LlmParams],
        params: LlmParams,
        ex: _Exchange,
        provider: LlmProvider,
        messages: tuple[ProviderMessage, ...],
        secret: str | None,
    ) -> LlmResponse:
        """:meth:`_call` inside its span (a child of the operation's), the current span
        while the provider answers."""
        span = tracing.start_llm(
            "aux",
            model=params.model,
            provider=params.provider_ref,
            conversation_id=ctx.run.chat_id,
            request=_request_attributes(params),
            redactor=ex.redactor,
        )
        token = tracing.activate(span)
        response: LlmResponse | None = None
        error: OperationError | None = None
        try:
            response = await self._call(ctx, params, ex, provider, messages, secret)
        except OperationFailed as failure:
            error = OperationError(code=failure.code, message=failure.message)
            raise
        finally:
            tracing.deactivate(token)
            tracing.end_llm(
                span,
                redactor=ex.redactor,
                attempts=ex.outputs["attempts"],
                provider_finish_reason=_finish_reason(response),
                usage=ex.usage,
                response_model=response.model if response is not None else None,
                response_id=response.request_id if response is not None else None,
                error=error,
                messages=[(m.role, m.content) for m in messages],
                reply=response.text if response is not None else None,
            )
        return response

    def check(self, params: LlmParams) -> list[str]:
        """What would fail at run time: templates that do not parse and, when the kind
        was given a provider registry, an unknown ``providerRef``, a ``credentialRef``
        without a resolver, and an unknown or invalid ``schemaRef``."""
        templates = {"system": params.system, "prompt": params.prompt}
        problems = template_problems(
            self.engine, templates, strict_variables=params.strict_variables
        )
        if self.providers is None:
            return problems  # a catalog for validation alone: references are not known
        lookups: list[Callable[[], object]] = [lambda: self._provider(params.provider_ref)]
        schema_ref = params.output.schema_ref
        if schema_ref is not None:
            lookups.append(lambda: self._validator(schema_ref))
        if params.credential_ref is not None and self.credentials is None:
            problems.append("credentialRef is set but no credential resolver was given")
        for lookup in lookups:
            try:
                lookup()
            except OperationFailed as exc:
                problems.append(exc.message)
        return problems

    # -- steps -----------------------------------------------------------------------------

    def _validator(self, schema_ref: str) -> Validator:
        schema = self.schemas.get(schema_ref)
        if schema is None:
            known = ", ".join(sorted(self.schemas)) or "none"
            raise _fail(
                "config_error",
                f"output.schemaRef {schema_ref!r} is not a registered schema (known: {known})",
                {"schemaRef": schema_ref},
            )
        cached = self._validators.get(schema_ref)
        if cached is not None and cached[0] is schema:
            return cached[1]
        cls = validator_for(schema)
        try:
            cls.check_schema(dict(schema))
        except SchemaError as exc:
            raise _fail(
                "config_error",
                f"schema {schema_ref!r} is not a valid JSON Schema: {exc.message}",
                {"schemaRef": schema_ref},
            ) from exc
        ref = _unresolvable_ref(schema)
        if ref is not None:
            raise _fail(
                "config_error",
                f"schema {schema_ref!r} has a $ref that does not resolve: {ref!r} "
                "(a $ref must point inside the schema; nothing is fetched)",
                {"schemaRef": schema_ref},
            )
        # An empty registry: jsonschema adds its metaschemas, and fetches nothing.
        validator: Validator = cls(schema, registry=Registry())
        self._validators[schema_ref] = (schema, validator)
        return validator

    def _provider(self, provider_ref: str) -> LlmProvider:
        if self.providers is None:
            raise _fail(
                "config_error",
                f"no provider registry was given, so providerRef {provider_ref!r} is unknown",
                {"providerRef": provider_ref},
            )
        try:
            return self.providers.get(provider_ref)
        except OpsrunError as exc:
            raise _fail("config_error", exc.message, {"providerRef": provider_ref}) from exc

    async def _credential(self, credential_ref: str | None) -> str | None:
        if credential_ref is None:
            return None
        if self.credentials is None:
            raise _fail("config_error", "credentialRef is set but no credential resolver")
        try:
            return await self.credentials.resolve(credential_ref)
        except Exception as exc:
            # The resolver's message may name the reference or worse: report only its code.
            code = exc.code if isinstance(exc, OpsrunError) else type(exc).__name__
            raise _fail("config_error", f"credentialRef could not be resolved ({code})") from exc

    def _render(
        self, ctx: OperationContext[LlmParams], params: LlmParams, ex: _Exchange
    ) -> tuple[str | None, str]:
        context = ctx.template_context()
        strict = params.strict_variables
        field_name = "system"
        try:
            system = None
            if params.system is not None:
                system = self.engine.render(params.system, context, strict_variables=strict)
                ex.inputs["renderedSystemHash"] = sha256_text(system)
            field_name = "prompt"
            prompt = self.engine.render(params.prompt, context, strict_variables=strict)
        except TemplateError as exc:
            raise _fail(
                "template_render_error",
                f"{field_name}: {exc.message}",
                {**exc.details, "field": field_name},
            ) from exc
        ex.inputs["renderedPromptHash"] = sha256_text(prompt)
        return system, prompt

    async def _call(
        self,
        ctx: OperationContext[LlmParams],
        params: LlmParams,
        ex: _Exchange,
        provider: LlmProvider,
        messages: tuple[ProviderMessage, ...],
        secret: str | None,
    ) -> LlmResponse:
        """The provider's reply, after the retries ``params.retry`` allows.

        Raises:
            OperationFailed: the last attempt failed and no retry is left: the attempts
                are used up, the failure is not in ``retryOn``, or the wait would pass
                the operation's deadline.
        """
        timeout = None if params.timeout_ms is None else params.timeout_ms / 1000
        level = provider.capabilities.structured_output
        stepped_down = False

        async def attempt() -> LlmResponse | _AttemptError:
            nonlocal level, stepped_down
            while True:
                ex.outputs["attempts"] += 1
                response_format = self._response_format(params, level)
                request = LlmRequest(
                    messages=messages,
                    model=params.model,
                    samplers=params.samplers,
                    max_output_tokens=params.max_output_tokens,
                    stop=params.stop,
                    response_format=response_format,
                    credential=secret,
                    timeout=timeout,
                    meta={"runId": ctx.run.run_id, "operationId": ctx.operation_id},
                )
                outcome = await _attempt(provider, request, timeout, params.timeout_ms, ex)
                if isinstance(outcome, _AttemptError):
                    # Spent is spent: a failed call over the budget is not tried again.
                    outcome = _over_budget(params, ex.usage) or outcome
                if isinstance(outcome, _AttemptError) and outcome.format_rejected:
                    lower = self._step_down(params, level)
                    if not stepped_down and response_format is not None and lower is not None:
                        # Asked again one level lower, within this attempt: the format
                        # step-down does not use up a retry.
                        level, stepped_down = lower, True
                        continue
                return outcome

        retry = params.retry
        initial = retry.backoff_ms / 1000
        retried = await call_with_retries(
            attempt,
            should_retry=lambda o: isinstance(o, _AttemptError) and o.retry_kind in retry.retry_on,
            retry_after=lambda o: o.retry_after if isinstance(o, _AttemptError) else None,
            max_attempts=retry.max_attempts,
            backoff=Backoff(initial, max(initial, MAX_BACKOFF_SECONDS)),
            deadline=ctx.deadline,
            sleep=self.sleep,
        )
        outcome = retried.value
        if not isinstance(outcome, _AttemptError):
            return outcome
        message = outcome.message
        if retried.refused_wait is not None:
            message = no_retry_message(message, retried.refused_wait)
        raise _fail(outcome.code, message, {**outcome.details, "attempts": ex.outputs["attempts"]})

    def _response_format(self, params: LlmParams, level: StructuredOutput) -> ResponseFormat | None:
        if params.output.mode != "json" or level == "none":
            return None
        schema_ref = params.output.schema_ref
        schema = None if schema_ref is None else self.schemas.get(schema_ref)
        if schema is not None and level in ("json_schema_strict", "json_schema"):
            return ResponseFormat(
                type="json_schema",
                schema=schema,
                name=schema_ref,
                strict=level == "json_schema_strict",
            )
        return ResponseFormat(type="json")

    def _step_down(self, params: LlmParams, level: StructuredOutput) -> StructuredOutput | None:
        """The next weaker level that changes the request, or None."""
        current = self._response_format(params, level)
        index = STRUCTURED_OUTPUT_LEVELS.index(level)
        for lower in STRUCTURED_OUTPUT_LEVELS[index + 1 :]:
            if self._response_format(params, lower) != current:
                return lower
        return None

    def _interpret(
        self,
        params: LlmParams,
        ex: _Exchange,
        response: LlmResponse,
        validator: Validator | None,
    ) -> Any:
        if response.finish_reason == "content_filter":
            raise _fail(
                "policy_error",
                "the provider's content filter stopped the reply",
                {"rawFinishReason": response.raw_finish_reason},
            )
        over = _over_budget(params, ex.usage)
        if over is not None:
            raise _fail(over.code, over.message, over.details)
        text = response.text
        if params.output.mode == "text":
            return text
        ex.outputs["rawTextPreview"] = bound_text(text, RAW_TEXT_PREVIEW, redactor=ex.redactor)
        ex.outputs["rawTextHash"] = sha256_text(text)
        try:
            value = parse_json_reply(text)
        except ValueError as exc:
            raise _parse_error(ex, f"the reply is not valid JSON: {exc}") from exc
        if validator is not None:
            _validate(params, ex, validator, value)
        return value

    def _masked(
        self, params: LlmParams, ex: _Exchange, value: Any, validator: Validator | None
    ) -> Any:
        """``value`` with the secrets the redactor recognises masked (see
        :func:`_mask_strings`); a masked JSON value is validated again.

        Raises:
            OperationFailed: ``output_parse_error``, the masked value no longer matches
                the schema.
        """
        masked, changed = _mask_strings(value, ex.redactor)
        if changed and validator is not None and params.output.mode == "json":
            _validate(params, ex, validator, masked, after_masking=True)
        return masked

    @staticmethod
    def _summarize_usage(ex: _Exchange) -> None:
        if ex.usage is not None:
            usage = ex.usage.model_dump(by_alias=True, exclude_none=True)
            if usage:
                ex.outputs["usage"] = usage


def _request_attributes(params: LlmParams) -> dict[str, AttributeValue]:
    """The call's settings as GenAI ``gen_ai.request.*`` attributes (numbers only)."""
    samplers = params.samplers
    settings: dict[str, float | None] = {
        GEN_AI_REQUEST_TEMPERATURE: samplers.temperature,
        GEN_AI_REQUEST_TOP_P: samplers.top_p,
        GEN_AI_REQUEST_TOP_K: samplers.top_k,
        GEN_AI_REQUEST_SEED: samplers.seed,
        GEN_AI_REQUEST_FREQUENCY_PENALTY: samplers.frequency_penalty,
        GEN_AI_REQUEST_PRESENCE_PENALTY: samplers.presence_penalty,
        GEN_AI_REQUEST_MAX_TOKENS: params.max_output_tokens,
    }
    found: dict[str, AttributeValue] = {k: v for k, v in settings.items() if v is not None}
    found[GEN_AI_OUTPUT_TYPE] = params.output.mode
    return found


def _finish_reason(response: LlmResponse | None) -> str | None:
    """The provider's finish reason: its own value when it gave one."""
    if response is None:
        return None
    return response.raw_finish_reason or response.finish_reason


def inputs_summary(params: LlmParams) -> dict[str, Any]:
    """``OperationRun.inputsSummary`` of an llm operation, before rendering.

    The rendered-text hashes are added once rendering succeeded; ``credentialRef`` is
    never included.
    """
    summary: dict[str, Any] = {
        "providerRef": params.provider_ref,
        "model": params.model,
        "outputMode": params.output.mode,
        "samplers": params.samplers.model_dump(by_alias=True, exclude_none=True),
        "strictVariables": params.strict_variables,
        "retry": {
            "maxAttempts": params.retry.max_attempts,
            "backoffMs": params.retry.backoff_ms,
            "retryOn": list(params.retry.retry_on),
        },
    }
    if params.output.schema_ref is not None:
        summary["schemaRef"] = params.output.schema_ref
    if params.max_output_tokens is not None:
        summary["maxOutputTokens"] = params.max_output_tokens
    if params.stop:
        summary["stop"] = [bound_text(s, STOP_ITEM_CHARS) for s in params.stop[:STOP_ITEMS]]
    if params.timeout_ms is not None:
        summary["timeoutMs"] = params.timeout_ms
    return summary


_FREE_TEXT_INPUTS = ("providerRef", "model", "schemaRef", "stop")
_FREE_TEXT_OUTPUTS = ("providerRequestId", "rawTextPreview", "parseErrorMessage")
"""Summary fields that can carry host or provider text; the others are numbers, hashes
and fixed words, so a successful call redacts only these (error results redact all)."""


def _redact_fields(
    redactor: Redactor, summary: dict[str, Any], fields: tuple[str, ...]
) -> dict[str, Any]:
    out = dict(summary)
    for key in fields:
        if key in out:
            out[key] = redactor.redact_value(out[key])
    return out


def _describe(exc: BaseException) -> str:
    if isinstance(exc, OpsrunError):
        return exc.message
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 3)
