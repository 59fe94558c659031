"""What the built-in kinds ``llm`` and ``template`` share.

Both kinds turn one string (or, for ``llm`` in JSON mode, one parsed value) into at
most one artifact write (``params.writeArtifact``) and at most one prompt-time effect
(``params.promptEffect``). Everything they hand back passes a
the run's redactor (``ctx.redactor``) first: error messages and details, summaries, and
unless ``redact_outputs=False`` the artifact value and the prompt text too, so a key
that slips into a template or a reply never reaches a store or an event.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .._redact import Redactor
from ..errors import bound_text
from ..model import (
    AppendAfterLastUser,
    AppendAfterLastUserTarget,
    ContentFormat,
    Hook,
    InsertAtDepth,
    InsertAtDepthTarget,
    JsonValue,
    OperationResult,
    PromptEffect,
    SystemUpdate,
    SystemUpdateTarget,
    WriteArtifactSpec,
)
from ..operations import OperationContext

# The window's and the llm kind's counter are one type; opsrun.kinds re-exports it.
from ..prompt import TokenCounter as TokenCounter
from ..prompt import approximate_tokens as approximate_tokens
from .liquid import TemplateEngine

__all__ = ["TokenCounter", "approximate_tokens", "template_problems"]

_MIN_SECRET = 4
"""Shorter literal secrets are not masked: they would mask ordinary text everywhere."""


def with_secret(redactor: Redactor, secret: str | None) -> Redactor:
    """``redactor`` that also masks ``secret`` literally (unchanged when it is too short)."""
    if secret is None or len(secret) < _MIN_SECRET:
        return redactor
    return redactor.with_secrets(secret)


def serialize(value: JsonValue) -> str:
    """The text form of a value for the prompt: strings as they are, the rest as JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def prompt_effect(
    target: AppendAfterLastUserTarget | SystemUpdateTarget | InsertAtDepthTarget,
    content: str,
    source: str,
) -> PromptEffect:
    """The prompt-time effect that sends ``content`` where ``target`` says."""
    if isinstance(target, AppendAfterLastUserTarget):
        return AppendAfterLastUser(role=target.role, content=content, source=source)
    if isinstance(target, SystemUpdateTarget):
        return SystemUpdate(mode=target.mode, content=content, source=source)
    return InsertAtDepth(
        depth_from_end=target.depth_from_end, role=target.role, content=content, source=source
    )


def done_result(
    ctx: OperationContext[Any],
    *,
    spec: WriteArtifactSpec | None,
    target: AppendAfterLastUserTarget | SystemUpdateTarget | InsertAtDepthTarget | None,
    value: JsonValue,
    default_format: ContentFormat,
    inputs_summary: dict[str, Any],
    outputs_summary: dict[str, Any],
) -> OperationResult:
    """A ``done`` result writing ``value`` to ``spec`` and/or sending it to ``target``."""
    artifact = None if spec is None else ctx.write(value, format=spec.format or default_format)
    source = f"art.{spec.tag}" if spec is not None else ctx.operation_id
    prompt = () if target is None else (prompt_effect(target, serialize(value), source),)
    result = OperationResult.done(prompt=prompt, artifact=artifact)
    return result.model_copy(
        update={"inputs_summary": inputs_summary, "outputs_summary": outputs_summary}
    )


def failed_result(
    redactor: Redactor,
    code: str,
    message: str,
    details: Mapping[str, Any] | None,
    *,
    inputs_summary: dict[str, Any],
    outputs_summary: dict[str, Any],
) -> OperationResult:
    """An ``error`` result with a redacted message, details and summaries."""
    result = OperationResult.failed(
        code,
        bound_text(redactor.redact(message)),
        None if details is None else redactor.redact_value(dict(details)),
    )
    return result.model_copy(
        update={
            "inputs_summary": redactor.redact_value(inputs_summary),
            "outputs_summary": redactor.redact_value(outputs_summary),
        }
    )


def prompt_effect_problem(ctx: OperationContext[Any], has_target: bool) -> str | None:
    """Why a ``promptEffect`` cannot apply in this hook, or None."""
    if has_target and ctx.hook != Hook.BEFORE_MAIN_LLM:
        return (
            f"promptEffect is only allowed in before_main_llm; {ctx.operation_id!r} "
            f"runs in {ctx.hook.value}"
        )
    return None


def template_problems(
    engine: TemplateEngine, templates: Mapping[str, str | None], *, strict_variables: bool
) -> list[str]:
    """What is wrong in each named template before it renders: a parse error or an
    unknown filter, as ``"<field>: <problem>"`` with its line and column."""
    return [
        f"{field_name}: {problem}"
        for field_name, source in templates.items()
        if source is not None
        for problem in engine.problems(source, strict_variables=strict_variables)
    ]
