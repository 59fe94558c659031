"""The LLM edit-plan protocol (v1 and v2): parse, validate, patch, apply."""

from __future__ import annotations

from ._plan import Action as Action
from ._plan import ActionKind as ActionKind
from ._plan import ContextRequest as ContextRequest
from ._plan import ContextRequestType as ContextRequestType
from ._plan import Plan as Plan
from ._plan import canonical_order as canonical_order

__all__ = [
    "Action",
    "ActionKind",
    "ContextRequest",
    "ContextRequestType",
    "Plan",
    "canonical_order",
]
