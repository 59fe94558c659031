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
from dataclasses import dataclass

from ..model import (
    Artifact,
    ChatMessage,
    DomainRole,
    InclusionRecord,
    PromptEffect,
    PromptMessage,
    TrimmedRange,
)
from ..ports import ProviderMessage
from ._inclusion import assemble_prompt
from ._plan import plan_kept_suffix
from ._window import HistoryWindow, trim_history

__all__ = [
    "EffectivePrompt",
    "build_prompt",
    "effective_prompt",
    "prompt_hash",
    "to_provider_messages",
]


@dataclass(frozen=True, slots=True)
class EffectivePrompt:
    """The prompt a run sends, with what shaped it."""

    messages: tuple[PromptMessage, ...]
    """The messages in send order, with domain roles and sources."""
    trimmed: TrimmedRange | None
    """The history messages the window left out (the oldest ones), if any."""
    inclusions: tuple[InclusionRecord, ...]
    """One record per artifact considered."""


def effective_prompt(
    system_prompt: str,
    history: Sequence[ChatMessage],
    effects: Sequence[tuple[str, PromptEffect]],
    *,
    artifacts: Sequence[tuple[int, Artifact]] = (),
    window: HistoryWindow | None = None,
) -> EffectivePrompt:
    """Trim the history, plan the artifact inclusions and assemble the prompt.

    The three steps of docs/prompt.md in one call: :func:`trim_history`
    (when ``window`` is given), the inclusion planner over the full and
    the kept history, then the assembly with ``effects``.

    Args:
        system_prompt: The base system prompt.
        history: Messages up to and including the current user message, oldest first.
        effects: ``(operationId, effect)`` pairs in commit order.
        artifacts: ``(profile order index, artifact)`` pairs, in any order.
        window: The history window; None keeps the whole history.

    Raises:
        TypeError: if an artifact value is not JSON-serialisable.
    """
    kept: tuple[ChatMessage, ...] = tuple(history)
    trimmed: TrimmedRange | None = None
    if window is not None:
        trim = trim_history(history, window)
        kept, trimmed = trim.kept, trim.trimmed
    plan = plan_kept_suffix(artifacts, history, kept)
    messages = assemble_prompt(system_prompt, kept, plan, effects)
    return EffectivePrompt(messages=tuple(messages), trimmed=trimmed, inclusions=plan.records)


def build_prompt(
    system_prompt: str,
    history: Sequence[ChatMessage],
    effects: Sequence[tuple[str, PromptEffect]],
) -> list[PromptMessage]:
    """Assemble the effective prompt from system prompt, history and prompt-time effects.

    The same as :func:`effective_prompt` with no artifacts and no window: there is one
    implementation of the placement rules above.

    Args:
        system_prompt: The base system prompt.
        history: Messages up to and including the current user message, oldest first.
        effects: ``(operationId, effect)`` pairs in commit order.
    """
    return assemble_prompt(system_prompt, history, plan_kept_suffix((), history, history), effects)


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
    canonical = _CANONICAL.encode([[m.role, m.content] for m in messages])
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


_CANONICAL = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
"""What ``json.dumps(value, ensure_ascii=False, separators=(",", ":"))`` uses, made once."""
