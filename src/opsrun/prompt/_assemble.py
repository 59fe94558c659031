"""Lay an inclusion plan and the prompt-time effects over system prompt and history.

:func:`assemble_prompt` works in phases: the plan's parts are sorted by place (the
system text, gaps, kept messages acted on, the tail), the effects likewise (system
updates, insertions by depth, messages after the last user message and the tail), and
the prompt is read off in order: the system message, each kept message with what goes
before and on it, then the tail. Without inclusions it returns what ``build_prompt``
returns.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ..model import (
    AppendAfterLastUser,
    ChatMessage,
    ChatRole,
    DomainRole,
    InsertAtDepth,
    PromptEffect,
    PromptMessage,
    PromptSource,
    SystemUpdate,
)
from ..model._build import Builder
from ._expand import SECTION_SEPARATOR
from ._plan import InclusionPlan, PlannedPart

__all__ = ["assemble_prompt", "merge_section"]

_SYSTEM_SOURCE = PromptSource(kind="system")

_MESSAGE = Builder(PromptMessage).shape(("role", "content", "source"))
_HISTORY_SOURCE = Builder(PromptSource).bind({"kind": "history"}).shape(("message_id",))
"""Build prompt messages from validated chat messages and texts (no second validation)."""

_DOMAIN_ROLES = {role: DomainRole(role.value) for role in ChatRole}
"""The domain role of each chat role."""


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
    if not plan.parts and not effects:  # nothing to lay over: the system prompt, the history
        plain = [_system_message(system_prompt, _SYSTEM_SOURCE)] if system_prompt else []
        plain.extend(map(_as_sent, kept_history))
        return plain
    placed = _place_parts(system_prompt, kept_history, plan.parts)
    applied = _apply_effects(placed.system, n, effects)
    messages: list[PromptMessage] = []
    if applied.system:
        source = applied.system_source or placed.system_source
        messages.append(_system_message(applied.system, source))
    messages.extend(_history_messages(kept_history, placed, applied))
    messages.extend(_tail_messages(n, placed, applied))
    return messages


@dataclass(slots=True)
class _PlacedParts:
    """The plan's parts by place."""

    system: str
    """The system text with the system parts applied."""
    system_source: PromptSource
    """The source of the system message: the last system part, else the system's own."""
    gaps: dict[int, list[PromptMessage]] = field(default_factory=dict)
    """Inserted messages by the kept message they go before (the kept length: after all)."""
    acts: dict[int, list[PlannedPart]] = field(default_factory=dict)
    """Replace / wrap / merge_section parts by the kept message they act on."""
    tail: list[PromptMessage] = field(default_factory=list)
    """Messages at the tail."""


def _place_parts(
    system_prompt: str, kept_history: Sequence[ChatMessage], parts: Sequence[PlannedPart]
) -> _PlacedParts:
    """Sort the parts by place in plan order; system parts are applied to the text now.

    Acting parts go on the text first; inserts then go around it (starts, the text, ends),
    joined by a blank line.

    Raises:
        ValueError: if a part acts on a message the kept history does not have there.
    """
    placed = _PlacedParts(system_prompt, _SYSTEM_SOURCE)
    starts: list[str] = []
    ends: list[str] = []
    for part in parts:
        location = part.location
        if location == "system":
            placed.system_source = _artifact_source(part)
            if part.action != "insert":
                placed.system = _act(placed.system, part)
            else:
                (starts if part.side == "before" else ends).append(part.content)
        elif location == "message":
            if kept_history[part.index].message_id != part.message_id:
                raise ValueError("the plan was made for a different kept history")
            placed.acts.setdefault(part.index, []).append(part)
        else:
            message = PromptMessage(
                role=part.role, content=part.content, source=_artifact_source(part)
            )
            if location == "gap":
                placed.gaps.setdefault(part.index, []).append(message)
            else:
                placed.tail.append(message)
    if starts or ends:
        placed.system = SECTION_SEPARATOR.join(s for s in (*starts, placed.system, *ends) if s)
    return placed


@dataclass(slots=True)
class _AppliedEffects:
    """The prompt-time effects by place."""

    system: str
    """The system text with the ``prompt.system_update`` effects applied."""
    system_source: PromptSource | None = None
    """The source of the system message: the last system update, if any."""
    at_slot: dict[int, list[PromptMessage]] = field(default_factory=dict)
    """``insert_at_depth`` messages by the kept message they go before."""
    after_user: list[PromptMessage] = field(default_factory=list)
    """``append_after_last_user`` messages."""
    tail: list[PromptMessage] = field(default_factory=list)
    """``depthFromEnd = 0`` messages: they close the prompt."""


def _apply_effects(
    system: str, n: int, effects: Sequence[tuple[str, PromptEffect]]
) -> _AppliedEffects:
    """Apply the system updates to ``system`` and sort the other effects, in commit order.

    Depths count the ``n`` kept history messages only; one beyond them lands first.
    """
    applied = _AppliedEffects(system)
    for op_id, effect in effects:
        source = PromptSource(
            kind="effect", operation_id=op_id, effect=effect.type, note=effect.source
        )
        if isinstance(effect, SystemUpdate):
            if effect.mode == "prepend":
                applied.system = effect.content + applied.system
            elif effect.mode == "append":
                applied.system = applied.system + effect.content
            else:
                applied.system = effect.content
            applied.system_source = source
        elif isinstance(effect, AppendAfterLastUser):
            applied.after_user.append(
                PromptMessage(role=effect.role, content=effect.content, source=source)
            )
        else:
            assert isinstance(effect, InsertAtDepth)
            message = PromptMessage(role=effect.role, content=effect.content, source=source)
            if effect.depth_from_end == 0:
                applied.tail.append(message)
            else:
                applied.at_slot.setdefault(max(0, n + effect.depth_from_end), []).append(message)
    return applied


def _history_messages(
    kept_history: Sequence[ChatMessage], placed: _PlacedParts, applied: _AppliedEffects
) -> list[PromptMessage]:
    """Each kept message, after its gap's inserts and its depth's effects, with the
    parts that act on it applied in plan order."""
    gaps, at_slot, acts = placed.gaps, applied.at_slot, placed.acts
    messages: list[PromptMessage] = []
    for index, chat_message in enumerate(kept_history):
        if gaps:
            messages.extend(gaps.get(index, ()))
        if at_slot:
            messages.extend(at_slot.get(index, ()))
        parts = acts.get(index) if acts else None
        if not parts:
            messages.append(_as_sent(chat_message))
            continue
        content = chat_message.prompt_text
        for part in parts:
            content = _act(content, part)
        source = _artifact_source(parts[-1], chat_message.message_id)
        role = _DOMAIN_ROLES[chat_message.role]
        messages.append(_MESSAGE.build({"role": role, "content": content, "source": source}))
    return messages


def _system_message(content: str, source: PromptSource) -> PromptMessage:
    return _MESSAGE.build({"role": DomainRole.SYSTEM, "content": content, "source": source})


def _as_sent(chat_message: ChatMessage) -> PromptMessage:
    """A kept history message as the prompt sends it, unchanged."""
    source = _HISTORY_SOURCE.build({"message_id": chat_message.message_id})
    role = _DOMAIN_ROLES[chat_message.role]
    return _MESSAGE.build({"role": role, "content": chat_message.prompt_text, "source": source})


def _tail_messages(n: int, placed: _PlacedParts, applied: _AppliedEffects) -> list[PromptMessage]:
    """After the last kept message: its gap's inserts, ``append_after_last_user``
    effects, tail inclusions, then the ``depthFromEnd = 0`` effects that close the prompt."""
    return [
        *placed.gaps.get(n, ()),
        *applied.at_slot.get(n, ()),
        *applied.after_user,
        *placed.tail,
        *applied.tail,
    ]
