"""Where each artifact's prompt inclusion lands: :func:`plan_inclusions`.

For every artifact the planner expands its ``promptInclusion`` to the full form, then

1. places it (``_placement``): in the system prompt, in a gap of the kept history
   (a new message), on a kept message (replace / wrap / merge_section) or at the tail;
   an anchor resolves against the full history, and the depth policy decides what
   happens when it fell out of the kept window. Or it is dropped, with the reason.
2. builds its parts (``_parts``): one ``wrap`` part with the text around the
   target, or the rendered versions, one part each for timeline inserts and joined
   into one part otherwise.

The parts of all artifacts are sorted by ``(phase, priority, profile order, tag,
version newest first)``; every artifact gets an :class:`~opsrun.model.InclusionRecord`
of where it went or why it was dropped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, TypeAlias

from ..model import (
    AfterLastUser,
    AfterMessageId,
    Artifact,
    BeforeLastAssistant,
    ChatMessage,
    ChatRole,
    ContentFormat,
    DomainRole,
    InclusionRecord,
    RelativeToEnd,
)
from ..model._base import JsonValue
from ..model._prompt import InclusionAction, Phase
from ._expand import (
    SECTION_SEPARATOR,
    AnchorType,
    ExpandedInclusion,
    Side,
    expand_inclusion,
    render_value,
    select_versions,
)

__all__ = ["PHASES", "InclusionPlan", "Location", "PlannedPart", "plan_inclusions"]

PHASES: tuple[Phase, ...] = ("system", "early", "near_anchor", "after_last_user", "tail")
"""Phases in prompt order: the first key of the inclusion ordering."""
_PHASE_RANK = {phase: rank for rank, phase in enumerate(PHASES)}

Location: TypeAlias = Literal["system", "gap", "message", "tail"]


# --- the plan -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PlannedPart:
    """One contribution of an artifact to the prompt, in final order."""

    tag: str
    """The artifact."""
    version: int
    """The version this part carries (the newest one when versions are joined)."""
    location: Location
    """``system``; ``gap`` (a new message before kept history message ``index``, or after
    the last one when ``index`` equals the kept length); ``message`` (acts on kept
    message ``index``); ``tail`` (a message at the end)."""
    index: int
    """Gap or kept-message index; 0 for ``system`` and ``tail``."""
    action: InclusionAction
    """What it does."""
    side: Side
    """For a system insert: start (before) or end (after); else informational."""
    role: DomainRole
    """Role of an inserted message."""
    content: str
    """The rendered text (empty for ``wrap``)."""
    pre: str = ""
    """For ``wrap``: text before the target."""
    post: str = ""
    """For ``wrap``: text after the target."""
    section: str = ""
    """For ``merge_section``: the heading."""
    message_id: str | None = None
    """For ``message``: the id the index must still point at."""


@dataclass(frozen=True, slots=True)
class InclusionPlan:
    """Where every inclusion lands; input to :func:`assemble_prompt`."""

    history_size: int
    """How many kept history messages the plan was made for."""
    parts: tuple[PlannedPart, ...] = ()
    """Every contribution, sorted by the ordering key."""
    records: tuple[InclusionRecord, ...] = field(default=())
    """One record per input artifact, sorted by (profile order, tag, version)."""


class _History:
    """Lazy lookups over the full history for anchor resolution."""

    def __init__(self, full: Sequence[ChatMessage]) -> None:
        self.full = full
        self._ids: dict[str, int] | None = None
        self._by_role: dict[str, list[int]] = {}

    def index_of(self, message_id: str) -> int | None:
        if self._ids is None:
            self._ids = {m.message_id: i for i, m in enumerate(self.full)}
        return self._ids.get(message_id)

    def of_role(self, role: str) -> list[int]:
        found = self._by_role.get(role)
        if found is None:
            if role == "any":
                found = list(range(len(self.full)))
            else:
                wanted = ChatRole(role)
                found = [i for i, m in enumerate(self.full) if m.role is wanted]
            self._by_role[role] = found
        return found

    def last(self, role: ChatRole) -> int | None:
        for index in range(len(self.full) - 1, -1, -1):
            if self.full[index].role == role:
                return index
        return None


def _resolve(anchor: AnchorType, history: _History) -> tuple[int, Side] | None:
    """Full-history index and default side of an anchor; the index may be out of range."""
    if isinstance(anchor, AfterLastUser):
        index = history.last(ChatRole.USER)
        return None if index is None else (index, "after")
    if isinstance(anchor, BeforeLastAssistant):
        index = history.last(ChatRole.ASSISTANT)
        return None if index is None else (index, "before")
    if isinstance(anchor, AfterMessageId):
        index = history.index_of(anchor.message_id)
        return None if index is None else (index, "after")
    if isinstance(anchor, RelativeToEnd):
        indices = history.of_role(anchor.role_filter)
        if anchor.offset == 0:
            return (indices[-1], "after") if indices else None
        if not indices and anchor.role_filter != "any":
            return None  # no message of that role at all (an empty history is no_history)
        back = -anchor.offset
        return (indices[-back] if back <= len(indices) else -1), "before"
    base = _resolve(anchor.anchor, history)
    return None if base is None else (base[0] + anchor.offset, base[1])


_Key: TypeAlias = tuple[int, int, int, str, int, str, str]
_Keyed: TypeAlias = list[tuple[_Key, PlannedPart]]


def plan_inclusions(
    artifacts: Sequence[tuple[int, Artifact]],
    full_history: Sequence[ChatMessage],
    kept_history: Sequence[ChatMessage],
) -> InclusionPlan:
    """Plan where each artifact enters the prompt.

    Args:
        artifacts: ``(profile order index, artifact)`` pairs in any order; the result
            does not depend on their order.
        full_history: The whole history up to the current user message, oldest first;
            anchors resolve against it.
        kept_history: The suffix of ``full_history`` the window kept
            (:func:`trim_history`).

    Returns:
        The sorted parts and one record per artifact.

    Raises:
        ValueError: if ``kept_history`` is not a suffix of ``full_history``.
        TypeError: if an artifact value is not JSON-serialisable.
    """
    start = len(full_history) - len(kept_history)
    if start < 0 or any(
        full_history[start + i].message_id != m.message_id for i, m in enumerate(kept_history)
    ):
        raise ValueError("kept_history must be a suffix of full_history (compared by message id)")
    return plan_kept_suffix(artifacts, full_history, kept_history)


def plan_kept_suffix(
    artifacts: Sequence[tuple[int, Artifact]],
    full_history: Sequence[ChatMessage],
    kept_history: Sequence[ChatMessage],
) -> InclusionPlan:
    """:func:`plan_inclusions` of a ``kept_history`` that is a suffix of ``full_history``
    by construction (a :func:`trim_history` result): that is not checked again."""
    n = len(kept_history)
    if not artifacts:
        return InclusionPlan(history_size=n)
    start = len(full_history) - n
    history = _History(full_history)
    keyed: list[tuple[_Key, PlannedPart]] = []
    records: list[InclusionRecord] = []
    for profile_index, artifact in artifacts:
        record, parts = _plan_one(profile_index, artifact, history, kept_history, start)
        records.append(record)
        keyed.extend(parts)
    keyed.sort(key=lambda item: item[0])
    records.sort(key=lambda r: (r.profile_index, r.tag, r.versions, r.where or "", r.reason or ""))
    return InclusionPlan(
        history_size=n, parts=tuple(part for _, part in keyed), records=tuple(records)
    )


def _plan_one(
    profile_index: int,
    artifact: Artifact,
    history: _History,
    kept: Sequence[ChatMessage],
    start: int,
) -> tuple[InclusionRecord, _Keyed]:
    """One artifact's record and keyed parts: is it eligible, where does it land, and
    what does it bring there; the first step that finds nothing to include drops it."""
    tag = artifact.tag
    inclusion = artifact.prompt_inclusion
    if inclusion is None:
        return _dropped(tag, profile_index, "no_prompt_inclusion"), []
    if not artifact.usage.in_prompt:
        return _dropped(tag, profile_index, "usage_not_in_prompt"), []
    spec = expand_inclusion(inclusion, tag=tag, artifact_format=artifact.format)
    if spec is None:
        return _dropped(tag, profile_index, "mode_none"), []
    info: dict[str, object] = {
        "phase": spec.phase,
        "priority": spec.priority,
        "action": spec.action,
    }
    versions = select_versions(artifact, spec.version_selector)
    placement = _placement(spec, history, kept, start)
    info.update(_anchor_notes(placement))
    if isinstance(placement, _Drop):
        return _dropped(tag, profile_index, placement.reason, info), []
    contribution = _parts(spec, placement, versions, tag, profile_index)
    if isinstance(contribution, str):
        return _dropped(tag, profile_index, contribution, info), []
    included, parts = contribution
    record = InclusionRecord.model_validate(
        {
            "tag": tag,
            "profile_index": profile_index,
            "included": True,
            "versions": included,
            "where": placement.where,
            **info,
        }
    )
    return record, parts


def _dropped(
    tag: str, profile_index: int, reason: str, info: dict[str, object] | None = None
) -> InclusionRecord:
    """The record of an artifact that does not enter the prompt."""
    return InclusionRecord.model_validate(
        {
            "tag": tag,
            "profile_index": profile_index,
            "included": False,
            "reason": reason,
            **(info or {}),
        }
    )


# --- placement ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Placement:
    """Where an inclusion lands (the fields of :class:`PlannedPart` of the same names)."""

    location: Location
    where: str
    """The record's label of the place."""
    index: int
    side: Side
    message_id: str | None = None
    """For ``message``: the id of the kept message acted on."""
    anchor_message_id: str | None = None
    """The message the anchor resolved to, when it is in the full history."""
    depth_policy: str | None = None
    """The depth policy, when it moved an anchor from outside the kept window."""


@dataclass(frozen=True, slots=True)
class _Drop:
    """Why an inclusion has no place."""

    reason: str
    anchor_message_id: str | None = None
    """The message the anchor resolved to, when it is in the full history."""


def _anchor_notes(placement: _Placement | _Drop) -> dict[str, object]:
    """What the record notes about the anchor: its message and the depth policy applied."""
    notes: dict[str, object] = {}
    if placement.anchor_message_id is not None:
        notes["anchor_message_id"] = placement.anchor_message_id
    if isinstance(placement, _Placement) and placement.depth_policy is not None:
        notes["depth_policy"] = placement.depth_policy
    return notes


def _placement(
    spec: ExpandedInclusion, history: _History, kept: Sequence[ChatMessage], start: int
) -> _Placement | _Drop:
    """Place an inclusion: the system prompt, the top of the history or the tail for a
    rule without an anchor, else relative to its anchor."""
    side: Side = spec.side or "after"
    action = spec.action
    if spec.target == "system":
        where = {
            "insert": f"system:{'start' if side == 'before' else 'end'}",
            "replace": "system:replace",
            "wrap": "system:wrap",
            "merge_section": f"system:section:{spec.section}",
        }[action]
        return _Placement("system", where, 0, side)
    if spec.anchor is None and spec.target == "timeline" and action == "insert":
        if spec.phase in ("system", "early"):
            return _Placement("gap", "top", 0, side)
        return _Placement("tail", "tail", 0, side)
    if spec.anchor is None:
        return _Drop("no_anchor")
    return _anchored(spec, spec.anchor, history, kept, start)


def _anchored(
    spec: ExpandedInclusion,
    anchor: AnchorType,
    history: _History,
    kept: Sequence[ChatMessage],
    start: int,
) -> _Placement | _Drop:
    """Place an inclusion at its anchor: a gap beside it (insert) or on it (other actions).

    An anchor outside the kept window is handled by the depth policy.
    """
    resolved = _resolve(anchor, history)
    if resolved is None:
        return _Drop("anchor_not_found")
    full_index, anchor_side = resolved
    side = spec.side or anchor_side
    anchor_id = None
    if 0 <= full_index < len(history.full):
        anchor_id = history.full[full_index].message_id
    kept_index = full_index - start
    n = len(kept)
    moved_by = None
    if not 0 <= kept_index < n:
        if n == 0:
            return _Drop("no_history", anchor_id)
        moved = _into_window(spec, kept_index, side, n)
        if moved is None:
            lost = "anchor_trimmed" if 0 <= full_index < start else "anchor_out_of_range"
            return _Drop(lost, anchor_id)
        (kept_index, side), moved_by = moved, spec.depth_policy
    message_id = kept[kept_index].message_id
    if spec.action == "insert":
        index = kept_index if side == "before" else kept_index + 1
        where = f"{side}:{message_id}"
        return _Placement(
            "gap", where, index, side, anchor_message_id=anchor_id, depth_policy=moved_by
        )
    where = (
        f"section:{message_id}:{spec.section}"
        if spec.action == "merge_section"
        else f"{spec.action}:{message_id}"
    )
    return _Placement(
        "message",
        where,
        kept_index,
        side,
        message_id=message_id,
        anchor_message_id=anchor_id,
        depth_policy=moved_by,
    )


def _into_window(
    spec: ExpandedInclusion, kept_index: int, side: Side, n: int
) -> tuple[int, Side] | None:
    """Apply the depth policy to an anchor outside the ``n`` kept messages.

    Returns:
        The kept index and side the inclusion moves to, or None when it is dropped:
        ``strict_drop`` always, ``clamp_to_oldest_kept`` for anything but an insert.
    """
    policy = spec.depth_policy
    if policy == "strict_drop" or (policy == "clamp_to_oldest_kept" and spec.action != "insert"):
        return None
    if policy == "clamp_to_oldest_kept":
        return 0, "before"
    return (0 if kept_index < 0 else n - 1), side


# --- parts ----------------------------------------------------------------------------------


def _parts(
    spec: ExpandedInclusion,
    placement: _Placement,
    versions: list[tuple[int, JsonValue]],
    tag: str,
    profile_index: int,
) -> tuple[tuple[int, ...], _Keyed] | str:
    """What an artifact brings to its place: the versions included and the keyed parts.

    ``wrap`` brings one part with the text around its target (from the newest version);
    other actions bring the rendered versions, empty ones left out of an insert: one part
    per version for a timeline insert, else one part with the versions joined.

    Returns:
        ``(versions, parts)``, or the drop reason when there is nothing to include.
    """
    rank = _PHASE_RANK[spec.phase]
    if spec.action == "wrap":
        version, value = versions[0]
        wrap = _wrap_parts(value, spec.format)
        if wrap is None:
            return "wrap_needs_pre_post"
        pre, post = wrap
        key = (rank, spec.priority, profile_index, tag, -version, pre + "\0" + post, "")
        part = PlannedPart(
            tag,
            version,
            placement.location,
            placement.index,
            spec.action,
            placement.side,
            spec.role,
            "",
            pre,
            post,
            message_id=placement.message_id,
        )
        return (version,), [(key, part)]
    rendered = [(v, render_value(value, spec.format)) for v, value in versions]
    if spec.action == "insert":
        rendered = [(v, text) for v, text in rendered if text]
        if not rendered:
            return "empty_content"
    if spec.action == "insert" and placement.location != "system":
        chunks = rendered
    else:
        chunks = [(rendered[0][0], SECTION_SEPARATOR.join(text for _, text in rendered))]
    parts: _Keyed = []
    for version, text in chunks:
        key = (rank, spec.priority, profile_index, tag, -version, text, spec.role.value)
        part = PlannedPart(
            tag,
            version,
            placement.location,
            placement.index,
            spec.action,
            placement.side,
            spec.role,
            text,
            section=spec.section,
            message_id=placement.message_id,
        )
        parts.append((key, part))
    return tuple(v for v, _ in rendered), parts


def _wrap_parts(value: JsonValue, fmt: ContentFormat) -> tuple[str, str] | None:
    if not isinstance(value, dict) or not set(value) <= {"pre", "post"} or not value:
        return None
    if not all(isinstance(v, str) for v in value.values()):
        return None
    return render_value(value.get("pre", ""), fmt), render_value(value.get("post", ""), fmt)
