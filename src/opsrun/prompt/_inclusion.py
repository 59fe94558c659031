"""Artifacts in the effective prompt: plan where each inclusion lands, then assemble.

Two pure steps (docs/prompt.md has the tables and a worked example):

1. :func:`plan_inclusions` (``_plan``) expands every artifact's ``promptInclusion`` to its
   full form (:func:`expand_inclusion`, in ``_expand``), selects and renders its versions,
   resolves its anchor against the full history, applies the depth policy when the anchor
   fell out of the kept window, sorts everything by
   ``(phase, priority, profile order, tag, version newest first)`` and records, for each
   artifact, where it went or why it was dropped.
2. :func:`assemble_prompt` (``_assemble``) lays the plan over the system prompt and the
   kept history, then applies prompt-time effects exactly as :func:`build_prompt`
   documents, with effect depths counted on history messages only. Without inclusions
   it returns what ``build_prompt`` returns.

This module gathers both steps' names in one place.
"""

from __future__ import annotations

from ..model import InclusionRecord as InclusionRecord
from ..model._prompt import InclusionAction as InclusionAction
from ..model._prompt import Phase as Phase
from ._assemble import assemble_prompt as assemble_prompt
from ._assemble import merge_section as merge_section
from ._expand import SECTION_SEPARATOR as SECTION_SEPARATOR
from ._expand import ExpandedInclusion as ExpandedInclusion
from ._expand import expand_inclusion as expand_inclusion
from ._expand import render_value as render_value
from ._expand import select_versions as select_versions
from ._plan import PHASES as PHASES
from ._plan import InclusionPlan as InclusionPlan
from ._plan import PlannedPart as PlannedPart
from ._plan import plan_inclusions as plan_inclusions

__all__ = [
    "PHASES",
    "ExpandedInclusion",
    "InclusionAction",
    "InclusionPlan",
    "InclusionRecord",
    "Phase",
    "PlannedPart",
    "assemble_prompt",
    "expand_inclusion",
    "plan_inclusions",
    "render_value",
    "select_versions",
]
