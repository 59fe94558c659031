"""Artifacts in the effective prompt: plan where each inclusion lands, then assemble.

Two pure steps (docs/prompt.md has the tables and a worked example):

1. :func:`plan_inclusions` expands every artifact's ``promptInclusion`` to its full form,
   selects and renders its versions, resolves its anchor against the full history, applies
   the depth policy when the anchor fell out of the kept window, sorts everything by
   ``(phase, priority, profile order, tag, version newest first)`` and records, for each
   artifact, where it went or why it was dropped.
2. :func:`assemble_prompt` lays the plan over the system prompt and the kept history,
   then applies prompt-time effects exactly as :func:`build_prompt`
   documents, with effect depths counted on history messages only. Without inclusions
   it returns what ``build_prompt`` returns.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, TypeAlias

from ..model import (
    AfterLastUser,
    AfterMessageId,
    AppendAfterLastUser,
    Artifact,
    BeforeLastAssistant,
    ChatMessage,
    ChatRole,
    ContentFormat,
    DomainRole,
    InclusionRecord,
    InsertAtDepth,
    PromptEffect,
    PromptInclusion,
    PromptMessage,
    PromptSource,
    RelativeToAnchor,
    RelativeToEnd,
    SystemUpdate,
    VersionSelector,
)
from ..model._base import JsonValue
from ..model._prompt import InclusionAction, Phase

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

PHASES: tuple[Phase, ...] = ("system", "early", "near_anchor", "after_last_user", "tail")
"""Phases in prompt order: the first key of the inclusion ordering."""
_PHASE_RANK = {phase: rank for rank, phase in enumerate(PHASES)}

Side: TypeAlias = Literal["before", "after"]
Target: TypeAlias = Literal["system", "timeline", "message_ref"]
Location: TypeAlias = Literal["system", "gap", "message", "tail"]
_AnchorType: TypeAlias = (
    AfterLastUser | BeforeLastAssistant | AfterMessageId | RelativeToEnd | RelativeToAnchor
)

SECTION_SEPARATOR = "\n\n"
"""Joins artifact text to the system prompt, versions to each other, and sections."""

_SYSTEM_SOURCE = PromptSource(kind="system")


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
    anchor: _AnchorType | None
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


_SHORTHAND: dict[str, tuple[InclusionAction, Target, _AnchorType | None, Side | None]] = {
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


def _wrap_parts(value: JsonValue, fmt: ContentFormat) -> tuple[str, str] | None:
    if not isinstance(value, dict) or not set(value) <= {"pre", "post"} or not value:
        return None
    return render_value(value.get("pre", ""), fmt), render_value(value.get("post", ""), fmt)


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


def _resolve(anchor: _AnchorType, history: _History) -> tuple[int, Side] | None:
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
        back = -anchor.offset
        return (indices[-back] if back <= len(indices) else -1), "before"
    base = _resolve(anchor.anchor, history)
    return None if base is None else (base[0] + anchor.offset, base[1])


_Key: TypeAlias = tuple[int, int, int, str, int, str, str]


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
    n_full, n = len(full_history), len(kept_history)
    start = n_full - n
    if start < 0 or any(
        full_history[start + i].message_id != m.message_id for i, m in enumerate(kept_history)
    ):
        raise ValueError("kept_history must be a suffix of full_history (compared by message id)")
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
) -> tuple[InclusionRecord, list[tuple[_Key, PlannedPart]]]:
    tag = artifact.tag

    def dropped(
        reason: str, **extra: object
    ) -> tuple[InclusionRecord, list[tuple[_Key, PlannedPart]]]:
        record = InclusionRecord.model_validate(
            {
                "tag": tag,
                "profile_index": profile_index,
                "included": False,
                "reason": reason,
                **extra,
            }
        )
        return record, []

    inclusion = artifact.prompt_inclusion
    if inclusion is None:
        return dropped("no_prompt_inclusion")
    if not artifact.usage.in_prompt:
        return dropped("usage_not_in_prompt")
    spec = expand_inclusion(inclusion, tag=tag, artifact_format=artifact.format)
    if spec is None:
        return dropped("mode_none")
    info: dict[str, object] = {
        "phase": spec.phase,
        "priority": spec.priority,
        "action": spec.action,
    }
    versions = select_versions(artifact, spec.version_selector)

    # Where: a location, an index, the action (clamping may change it) and a label.
    location: Location
    index = 0
    action = spec.action
    side: Side = spec.side or "after"
    n = len(kept)
    if spec.target == "system":
        location = "system"
        where = {
            "insert": f"system:{'start' if side == 'before' else 'end'}",
            "replace": "system:replace",
            "wrap": "system:wrap",
            "merge_section": f"system:section:{spec.section}",
        }[action]
    elif spec.anchor is None and spec.target == "timeline" and action == "insert":
        if spec.phase in ("system", "early"):
            location, index, where = "gap", 0, "top"
        else:
            location, where = "tail", "tail"
    elif spec.anchor is None:
        return dropped("no_anchor", **info)
    else:
        resolved = _resolve(spec.anchor, history)
        if resolved is None:
            return dropped("anchor_not_found", **info)
        full_index, anchor_side = resolved
        side = spec.side or anchor_side
        if 0 <= full_index < len(history.full):
            info["anchor_message_id"] = history.full[full_index].message_id
        kept_index = full_index - start
        if not 0 <= kept_index < n:
            lost = "anchor_trimmed" if 0 <= full_index < start else "anchor_out_of_range"
            if n == 0:
                return dropped("no_history", **info)
            policy = spec.depth_policy
            if policy == "strict_drop" or (policy == "clamp_to_oldest_kept" and action != "insert"):
                return dropped(lost, **info)
            info["depth_policy"] = policy
            if policy == "clamp_to_oldest_kept":
                kept_index, side = 0, "before"
            else:
                kept_index = 0 if kept_index < 0 else n - 1
        message_id = kept[kept_index].message_id
        if action == "insert":
            location = "gap"
            index = kept_index if side == "before" else kept_index + 1
            where = f"{side}:{message_id}"
        else:
            location, index = "message", kept_index
            where = (
                f"section:{message_id}:{spec.section}"
                if action == "merge_section"
                else f"{action}:{message_id}"
            )

    rank = _PHASE_RANK[spec.phase]
    parts: list[tuple[_Key, PlannedPart]] = []
    target_id = kept[index].message_id if location == "message" else None
    included: tuple[int, ...]
    if action == "wrap":
        version, value = versions[0]
        wrap = _wrap_parts(value, spec.format)
        if wrap is None:
            return dropped("wrap_needs_pre_post", **info)
        pre, post = wrap
        key = (rank, spec.priority, profile_index, tag, -version, pre + "\0" + post, "")
        part = PlannedPart(
            tag,
            version,
            location,
            index,
            action,
            side,
            spec.role,
            "",
            pre,
            post,
            message_id=target_id,
        )
        parts.append((key, part))
        included = (version,)
    else:
        rendered = [(v, render_value(value, spec.format)) for v, value in versions]
        if action == "insert":
            rendered = [(v, text) for v, text in rendered if text]
            if not rendered:
                return dropped("empty_content", **info)
        if action == "insert" and location != "system":
            chunks = rendered
        else:
            chunks = [(rendered[0][0], SECTION_SEPARATOR.join(text for _, text in rendered))]
        for version, text in chunks:
            key = (rank, spec.priority, profile_index, tag, -version, text, spec.role.value)
            part = PlannedPart(
                tag,
                version,
                location,
                index,
                action,
                side,
                spec.role,
                text,
                section=spec.section,
                message_id=target_id,
            )
            parts.append((key, part))
        included = tuple(v for v, _ in rendered)
    record = InclusionRecord.model_validate(
        {
            "tag": tag,
            "profile_index": profile_index,
            "included": True,
            "versions": included,
            "where": where,
            **info,
        }
    )
    return record, parts


# --- assembly -------------------------------------------------------------------------------


def _artifact_source(part: PlannedPart, message_id: str | None = None) -> PromptSource:
    return PromptSource(kind="artifact", tag=part.tag, version=part.version, message_id=message_id)


def merge_section(text: str, heading: str, body: str) -> str:
    """Replace the ``## <heading>`` section of ``text`` with ``body``, or append it.

    A section runs from its heading line to the next line that starts with ``# `` or
    ``## `` outside a fenced code block, or to the end. Headings inside fences are text.
    """
    block = f"## {heading}\n{body}" if body else f"## {heading}"
    lines = text.split("\n")
    fenced = False
    begin: int | None = None
    end = len(lines)
    for i, line in enumerate(lines):
        if line.startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            continue
        if begin is None:
            if line.rstrip() == f"## {heading}":
                begin = i
        elif line.startswith(("# ", "## ")):
            end = i
            break
    if begin is None:
        return f"{text}{SECTION_SEPARATOR}{block}" if text else block
    tail = lines[end:]
    # Keep one blank line between the merged section and the next heading.
    return "\n".join([*lines[:begin], block, *([""] if tail else []), *tail])


def _act(content: str, part: PlannedPart) -> str:
    if part.action == "replace":
        return part.content
    if part.action == "wrap":
        return part.pre + content + part.post
    return merge_section(content, part.section, part.content)


def assemble_prompt(
    system_prompt: str,
    kept_history: Sequence[ChatMessage],
    plan: InclusionPlan,
    effects: Sequence[tuple[str, PromptEffect]],
) -> list[PromptMessage]:
    """Lay the inclusion plan and the prompt-time effects over system prompt and history.

    Order of the result:

    1. The system message: replace / wrap / merge_section parts act on ``system_prompt``
       in plan order; system inserts then go around it (starts in plan order, the text,
       ends in plan order), joined by a blank line; then ``prompt.system_update`` effects
       in commit order, exactly as ``build_prompt`` applies them. Omitted when empty.
    2. For each kept history message: the inclusion inserts of the gap before it (plan
       order), the ``insert_at_depth`` effects of that depth (commit order), then the
       message, with replace / wrap / merge_section parts applied in plan order.
    3. After the last message: its gap's inserts, ``prompt.append_after_last_user``
       effects, tail inclusions, and ``depthFromEnd = 0`` effects, which close the prompt.

    Args:
        system_prompt: The base system prompt.
        kept_history: The kept history the plan was made for, oldest first.
        plan: From :func:`plan_inclusions`.
        effects: ``(operationId, effect)`` pairs in commit order.

    Returns:
        The effective prompt; every artifact part has ``source.kind == "artifact"``.

    Raises:
        ValueError: if ``plan`` was made for a different kept history.
    """
    n = len(kept_history)
    if plan.history_size != n:
        raise ValueError(f"the plan was made for {plan.history_size} kept messages, not {n}")
    system = system_prompt
    system_source = _SYSTEM_SOURCE
    starts: list[str] = []
    ends: list[str] = []
    gaps: dict[int, list[PromptMessage]] = {}
    acts: dict[int, list[PlannedPart]] = {}
    tail: list[PromptMessage] = []
    for part in plan.parts:
        location = part.location
        if location == "system":
            system_source = _artifact_source(part)
            if part.action != "insert":
                system = _act(system, part)
            else:
                (starts if part.side == "before" else ends).append(part.content)
        elif location == "message":
            if kept_history[part.index].message_id != part.message_id:
                raise ValueError("the plan was made for a different kept history")
            acts.setdefault(part.index, []).append(part)
        else:
            message = PromptMessage(
                role=part.role, content=part.content, source=_artifact_source(part)
            )
            if location == "gap":
                gaps.setdefault(part.index, []).append(message)
            else:
                tail.append(message)
    if starts or ends:
        system = SECTION_SEPARATOR.join(s for s in (*starts, system, *ends) if s)

    after_user: list[PromptMessage] = []
    effect_tail: list[PromptMessage] = []
    at_slot: dict[int, list[PromptMessage]] = {}
    system_effect: PromptSource | None = None
    for op_id, effect in effects:
        source = PromptSource(kind="effect", operation_id=op_id, effect=effect.type)
        if isinstance(effect, SystemUpdate):
            if effect.mode == "prepend":
                system = effect.content + system
            elif effect.mode == "append":
                system = system + effect.content
            else:
                system = effect.content
            system_effect = source
        elif isinstance(effect, AppendAfterLastUser):
            after_user.append(
                PromptMessage(role=effect.role, content=effect.content, source=source)
            )
        else:
            assert isinstance(effect, InsertAtDepth)
            message = PromptMessage(role=effect.role, content=effect.content, source=source)
            if effect.depth_from_end == 0:
                effect_tail.append(message)
            else:
                at_slot.setdefault(max(0, n + effect.depth_from_end), []).append(message)

    messages: list[PromptMessage] = []
    if system:
        messages.append(
            PromptMessage(
                role=DomainRole.SYSTEM, content=system, source=system_effect or system_source
            )
        )
    for index, chat_message in enumerate(kept_history):
        if gaps:
            messages.extend(gaps.get(index, ()))
        if at_slot:
            messages.extend(at_slot.get(index, ()))
        content = chat_message.prompt_text
        parts = acts.get(index) if acts else None
        if parts:
            for part in parts:
                content = _act(content, part)
            source = _artifact_source(parts[-1], chat_message.message_id)
        else:
            source = PromptSource(kind="history", message_id=chat_message.message_id)
        messages.append(
            PromptMessage(role=DomainRole(chat_message.role.value), content=content, source=source)
        )
    messages.extend(gaps.get(n, ()))
    messages.extend(at_slot.get(n, ()))
    messages.extend(after_user)
    messages.extend(tail)
    messages.extend(effect_tail)
    return messages
