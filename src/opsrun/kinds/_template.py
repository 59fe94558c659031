"""``kind="template"``: one Liquid text rendered to a string.

The rendered string goes to ``params.writeArtifact`` and/or ``params.promptEffect``.
A parse or render failure (syntax, ``strictVariables``, a resource limit) ends the
operation ``error(template_render_error)``; ``policy_error`` when ``promptEffect`` is
set outside ``before_main_llm``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from .._redact import sha256_text
from ..errors import TemplateError
from ..model import ContentFormat, OperationDefinition, OperationResult, TemplateParams
from ..operations import Operation, OperationContext
from ._common import done_result, failed_result, prompt_effect_problem, template_problems
from .liquid import TemplateEngine

__all__ = ["TemplateOperation"]


class TemplateOperation(Operation[TemplateParams]):
    """The implementation of ``kind="template"`` for one definition.

    Args:
        definition: The operation's definition (``kind="template"``).
        engine: The Liquid engine; it caches parsed templates, so share one.
        redact_outputs: Also mask secrets in the rendered text before it is written or
            sent to the prompt (on by default).

    ``inputsSummary``: ``templateHash`` (sha256 of the source), ``templateLength``,
    ``strictVariables``. ``outputsSummary``: ``renderedHash``, ``renderedLength``.
    """

    params_model: type[BaseModel] | None = TemplateParams

    def __init__(
        self,
        definition: OperationDefinition,
        *,
        engine: TemplateEngine | None = None,
        redact_outputs: bool = True,
    ) -> None:
        self.definition = definition
        self.engine = engine or TemplateEngine()
        self.redact_outputs = redact_outputs

    def check(self, params: TemplateParams) -> list[str]:
        """The template's parse error, if any (with its line and column)."""
        return template_problems(
            self.engine, {"template": params.template}, strict_variables=params.strict_variables
        )

    async def execute(self, ctx: OperationContext[TemplateParams]) -> OperationResult:
        """Render the template and return its effects."""
        given: object = ctx.params  # a raw dict when the catalog did not parse it
        params = (
            given if isinstance(given, TemplateParams) else TemplateParams.model_validate(given)
        )
        inputs: dict[str, Any] = {
            "templateHash": sha256_text(params.template),
            "templateLength": len(params.template),
            "strictVariables": params.strict_variables,
        }
        problem = prompt_effect_problem(ctx, params.prompt_effect is not None)
        if problem is not None:
            return failed_result(
                ctx.redactor,
                "policy_error",
                problem,
                None,
                inputs_summary=inputs,
                outputs_summary={},
            )
        try:
            text = self.engine.render(
                params.template, ctx.template_context(), strict_variables=params.strict_variables
            )
        except TemplateError as exc:
            return failed_result(
                ctx.redactor,
                "template_render_error",
                exc.message,
                exc.details,
                inputs_summary=inputs,
                outputs_summary={},
            )
        if self.redact_outputs:
            text = ctx.redactor.redact(text)
        return done_result(
            ctx,
            spec=params.write_artifact,
            target=params.prompt_effect,
            value=text,
            default_format=ContentFormat.TEXT,
            inputs_summary=inputs,
            outputs_summary={"renderedHash": sha256_text(text), "renderedLength": len(text)},
        )
