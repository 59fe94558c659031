"""Inclusion rules in full form, and the text an artifact brings to the prompt.

:func:`expand_inclusion` resolves a ``promptInclusion``'s shorthand and defaults,
:func:`select_versions` picks the versions that enter and :func:`render_value` turns
each into prompt text. The planner (``_plan``) builds on these.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal, TypeAlias

from ..model import (
    AfterLastUser,
    AfterMessageId,
    Artifact,
    BeforeLastAssistant,
    ContentFormat,
    DomainRole,
    PromptInclusion,
    RelativeToAnchor,
    RelativeToEnd,
    VersionSelector,
)
from ..model._base import JsonValue
from ..model._prompt import InclusionAction, Phase

__all__ = [
    "SECTION_SEPARATOR",
    "AnchorType",
    "ExpandedInclusion",
    "Side",
    "Target",
    "expand_inclusion",
    "render_value",
    "select_versions",
]

Side: TypeAlias = Literal["before", "after"]
Target: TypeAlias = Literal["system", "timeline", "message_ref"]
AnchorType: TypeAlias = (
    AfterLastUser | BeforeLastAssistant | AfterMessageId | RelativeToEnd | RelativeToAnchor
)

SECTION_SEPARATOR = "\n\n"
"""Joins artifact text to the system prompt, versions to each other, and sections."""


# --- expansion -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ExpandedInclusion:
    """The full form of a :class:`~opsrun.model.PromptInclusion` (shorthand resolved)."""

    action: InclusionAction
    """What happens: insert a message or text, or replace / wrap / merge into a target."""
    side: Side | None
    """For ``insert``: before or after the anchor (system: start or end of the prompt);
    None means the anchor's own side (``after_*`` anchors: after, ``before_*``: before)."""
    target: Target
    """``system``, or the timeline (``timeline`` / ``message_ref``, both anchored)."""
    anchor: AnchorType | None
    """Anchor in the history; None for the system, or a timeline position by phase."""
    phase: Phase
    """First ordering key; for an anchorless timeline insert it also picks the position."""
    priority: int
    """Second ordering key: lower first."""
    depth_policy: Literal["strict_drop", "clamp_to_oldest_kept", "relocate_to_nearest"]
    """What happens when the anchor is outside the kept window."""
    role: DomainRole
    """Role of an inserted message (acting on a message keeps that message's role)."""
    format: ContentFormat
    """How values are rendered."""
    version_selector: VersionSelector
    """Which versions enter."""
    section: str
    """Heading for ``merge_section``."""


_SHORTHAND: dict[str, tuple[InclusionAction, Target, AnchorType | None, Side | None]] = {
    "append_after_last_user": ("insert", "timeline", AfterLastUser(), None),
    "prepend_system": ("insert", "system", None, "before"),
    "as_message": ("insert", "timeline", None, None),
}


def expand_inclusion(
    inclusion: PromptInclusion, *, tag: str, artifact_format: ContentFormat
) -> ExpandedInclusion | None:
    """Resolve the shorthand ``mode`` and the defaults into the full form.

    The mode fills ``operation``, ``target``, ``anchor`` and ``place`` where they are
    None; explicit fields win. ``operation=insert`` with ``place`` replace or wrap is the
    same as ``operation`` replace or wrap. An unset ``phase`` follows the position:
    ``system`` for the system target, ``after_last_user`` for that anchor, ``tail`` for no
    anchor, ``near_anchor`` otherwise. A timeline rule without an anchor sits at the top
    of the history for phase ``system`` / ``early``, after the last user message for
    ``after_last_user`` (that anchor is filled in), and at the tail otherwise.
    ``format`` defaults to the artifact's format and ``section`` to the tag.

    Args:
        inclusion: The rule as configured.
        tag: The artifact tag (the default section heading).
        artifact_format: The artifact's own format.

    Returns:
        The full form, or None when ``mode`` is ``none`` (the artifact never enters).
    """
    if inclusion.mode == "none":
        return None
    operation, target, anchor, side = _SHORTHAND[inclusion.mode]
    if inclusion.anchor is not None:
        anchor = inclusion.anchor
    if inclusion.target is not None:
        target = inclusion.target
    action: InclusionAction = inclusion.operation or operation
    place = inclusion.place
    if place == "before" or place == "after":
        side = place
    elif place is not None and action == "insert":
        action = place  # insert + place replace|wrap is the replace|wrap operation
    if target == "system":
        anchor = None
        side = side or "after"
    elif anchor is None and inclusion.phase == "after_last_user":
        anchor = AfterLastUser()
    phase = inclusion.phase
    if phase is None:
        if target == "system":
            phase = "system"
        elif anchor is None:
            phase = "tail"
        elif isinstance(anchor, AfterLastUser):
            phase = "after_last_user"
        else:
            phase = "near_anchor"
    return ExpandedInclusion(
        action=action,
        side=side,
        target=target,
        anchor=anchor,
        phase=phase,
        priority=inclusion.priority,
        depth_policy=inclusion.depth_policy,
        role=inclusion.role,
        format=inclusion.format or artifact_format,
        version_selector=inclusion.version_selector,
        section=inclusion.section or tag,
    )


# --- versions and rendering -------------------------------------------------------------------


def select_versions(artifact: Artifact, selector: VersionSelector) -> list[tuple[int, JsonValue]]:
    """Return ``(version, value)`` pairs: the current value first, then history newest first.

    ``latest`` gives the current value; ``last_n`` the current value and the ``n - 1``
    newest history items (``n`` unset counts as 1); ``all`` everything retained.
    """
    current = (artifact.version, artifact.value)
    if selector.type == "latest":
        return [current]
    older = artifact.history
    if selector.type == "last_n":
        older = older[: max(0, (selector.n or 1) - 1)]
    return [current, *((item.version, item.value) for item in older)]


def _canonical_json(value: JsonValue) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def render_value(value: JsonValue, fmt: ContentFormat) -> str:
    """Render one value for the prompt.

    ``json``: canonical JSON (sorted keys, no spaces, UTF-8 kept). ``text`` and
    ``markdown``: a string as it is, None as the empty string, anything else as canonical
    JSON (fenced as a ``json`` code block in markdown).

    Raises:
        TypeError: if the value is not JSON-serialisable.
    """
    if fmt == ContentFormat.JSON:
        return _canonical_json(value)
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if fmt == ContentFormat.MARKDOWN:
        return f"```json\n{_canonical_json(value)}\n```"
    return _canonical_json(value)
