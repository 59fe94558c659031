"""Effective prompt assembly: system prompt + history + prompt-time effects.

Order (documented in docs/prompt.md):

1. ``prompt.system_update`` effects rewrite the system prompt in commit order
   (prepend: payload + system; append: system + payload; replace: payload).
2. History messages (selected variants), oldest first, up to and including the
   current user message.
3. ``prompt.insert_at_depth`` with ``depthFromEnd = -N`` goes before the N-th history
   message from the end; depth counts history messages only, so insertions never
   shift each other; a depth beyond the history lands right after the system prompt;
   several insertions at one depth keep commit order.
4. ``prompt.append_after_last_user`` messages follow the current user message, in
   commit order, and ``depthFromEnd = 0`` insertions close the prompt (the tail).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

from ..model import (
    AppendAfterLastUser,
    ChatMessage,
    DomainRole,
    InsertAtDepth,
    PromptEffect,
    PromptMessage,
    PromptSource,
    SystemUpdate,
)
from ..ports import ProviderMessage

__all__ = ["build_prompt", "prompt_hash", "to_provider_messages"]

_SYSTEM_SOURCE = PromptSource(kind="system")


def build_prompt(
    system_prompt: str,
    history: Sequence[ChatMessage],
    effects: Sequence[tuple[str, PromptEffect]],
) -> list[PromptMessage]:
    """Assemble the effective prompt.

    Args:
        system_prompt: The base system prompt.
        history: Messages up to and including the current user message, oldest first.
        effects: ``(operationId, effect)`` pairs in commit order.
    """
    system = system_prompt
    system_sources: list[PromptSource] = []
    after_user: list[PromptMessage] = []
    tail: list[PromptMessage] = []
    n = len(history)
    at_slot: dict[int, list[PromptMessage]] = {}
    for op_id, effect in effects:
        source = PromptSource(kind="effect", operation_id=op_id, effect=effect.type)
        if isinstance(effect, SystemUpdate):
            if effect.mode == "prepend":
                system = effect.content + system
            elif effect.mode == "append":
                system = system + effect.content
            else:
                system = effect.content
            system_sources.append(source)
        elif isinstance(effect, AppendAfterLastUser):
            after_user.append(
                PromptMessage(role=effect.role, content=effect.content, source=source)
            )
        else:
            assert isinstance(effect, InsertAtDepth)
            message = PromptMessage(role=effect.role, content=effect.content, source=source)
            if effect.depth_from_end == 0:
                tail.append(message)
            else:
                at_slot.setdefault(max(0, n + effect.depth_from_end), []).append(message)

    messages: list[PromptMessage] = []
    if system:
        messages.append(
            PromptMessage(
                role=DomainRole.SYSTEM,
                content=system,
                source=system_sources[-1] if system_sources else _SYSTEM_SOURCE,
            )
        )
    for index, chat_message in enumerate(history):
        messages.extend(at_slot.get(index, ()))
        messages.append(
            PromptMessage(
                role=DomainRole(chat_message.role.value),
                content=chat_message.prompt_text,
                source=PromptSource(kind="history", message_id=chat_message.message_id),
            )
        )
    messages.extend(at_slot.get(n, ()))
    messages.extend(after_user)
    messages.extend(tail)
    return messages


def to_provider_messages(
    messages: Sequence[PromptMessage], *, supports_developer: bool
) -> tuple[ProviderMessage, ...]:
    """Map domain roles to provider roles: ``developer`` becomes ``system`` unless supported."""
    out = []
    for m in messages:
        role = m.role.value
        if m.role == DomainRole.DEVELOPER and not supports_developer:
            role = DomainRole.SYSTEM.value
        out.append(ProviderMessage(role=role, content=m.content))
    return tuple(out)


def prompt_hash(messages: Sequence[ProviderMessage]) -> str:
    """sha256 hex of the canonical JSON ``[[role, content], …]`` (UTF-8, no spaces)."""
    canonical = json.dumps(
        [[m.role, m.content] for m in messages], ensure_ascii=False, separators=(",", ":")
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()
