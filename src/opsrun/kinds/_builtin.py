"""Factories of the built-in kinds, for ``OperationCatalog(kinds=...)``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..model import OperationDefinition
from ..operations import KindFactory
from ..ports import CredentialResolver, ProviderLookup
from ._common import TokenCounter
from ._llm import LlmOperation
from ._template import TemplateOperation
from .liquid import TemplateEngine

__all__ = ["builtin_kinds"]


def builtin_kinds(
    *,
    providers: ProviderLookup | None = None,
    credentials: CredentialResolver | None = None,
    engine: TemplateEngine | None = None,
    schemas: Mapping[str, Mapping[str, Any]] | None = None,
    token_counter: TokenCounter | None = None,
    redact_outputs: bool = True,
) -> dict[str, KindFactory]:
    """Factories of the built-in kinds for ``OperationCatalog(kinds=...)``.

    Secrets are masked with the runner's redactor (``Runner(redactor=...)``), which
    every operation receives as ``ctx.redactor``. Every operation built from them shares
    one :class:`TemplateEngine` (and so its parse cache). ``schemas`` is read at run
    time, so schemas added to the mapping later are found. Without ``providers`` every
    ``llm`` operation ends ``error(config_error)``.

    Example::

        catalog = OperationCatalog(kinds=builtin_kinds(providers=registry))
        catalog.add_definition(OperationDefinition(operation_id="notes", name="Notes",
                                                   kind="llm"))
    """
    shared_engine = engine or TemplateEngine()

    def make_llm(definition: OperationDefinition) -> LlmOperation:
        return LlmOperation(
            definition,
            providers=providers,
            credentials=credentials,
            engine=shared_engine,
            schemas=schemas,
            token_counter=token_counter,
            redact_outputs=redact_outputs,
        )

    def make_template(definition: OperationDefinition) -> TemplateOperation:
        return TemplateOperation(definition, engine=shared_engine, redact_outputs=redact_outputs)

    return {"llm": make_llm, "template": make_template}
