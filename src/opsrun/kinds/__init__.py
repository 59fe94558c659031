"""The built-in operation kinds ``llm`` and ``template``.

Register them with ``OperationCatalog(kinds=builtin_kinds(...))``; a profile then
configures such operations in JSON alone. The Liquid sandbox both kinds render with is
:mod:`opsrun.kinds.liquid`.
"""

from __future__ import annotations

from ._builtin import builtin_kinds as builtin_kinds
from ._common import TokenCounter as TokenCounter
from ._common import approximate_tokens as approximate_tokens
from ._llm import LlmOperation as LlmOperation
from ._template import TemplateOperation as TemplateOperation

__all__ = [
    "LlmOperation",
    "TemplateOperation",
    "TokenCounter",
    "approximate_tokens",
    "builtin_kinds",
]
