"""The redacted, size-bounded record of what a main LLM call was sent."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .._config import require_at_least
from .._redact import Redactor, sha256_text
from ..errors import ConfigError
from ..model import (
    AugmentationStorage,
    DomainRole,
    InclusionRecord,
    PromptMessage,
    PromptSnapshot,
    SnapshotMessage,
    TrimmedRange,
)
from ..model._build import Builder
from ..ports import ProviderMessage
from ._window import HistoryWindow

__all__ = ["SnapshotPolicy", "take_snapshot"]

_AUGMENTATION_SOURCES = frozenset({"effect", "artifact"})
_CUT = "…"


@dataclass(frozen=True, kw_only=True, slots=True)
class SnapshotPolicy:
    """How much of the sent prompt a run keeps, and in what form.

    Every message keeps its role, length and sha256 whatever the policy. History
    messages sent as the chat store holds them are kept by reference (``reference``:
    their message id and hash, no text), so a run's record does not grow with the chat.
    Other text is redacted first, then cut: prompt-only augmentation (messages made by
    prompt-time effects or artifact inclusions: working notes, retrieved context)
    follows ``augmentation``, and so does a system message an operation changed (a
    system update, an included artifact); the request's own system prompt is kept
    ``redacted``.

    Raises:
        ConfigError: if a limit is negative, or ``augmentation`` is ``reference``
            (augmentation is not in the chat store).
    """

    max_message_chars: int = 2000
    """Characters of one message's text kept at most."""
    max_total_chars: int = 32_000
    """Characters of text kept over the whole snapshot. The system message is served
    first, then messages from the newest back; once it is spent, older messages keep
    only their role, length and hash (``content`` None), counted in
    ``omitted_messages``."""
    summary_chars: int = 160
    """Characters kept of an augmentation message stored as ``summary``."""
    augmentation: AugmentationStorage = AugmentationStorage.REDACTED
    """How prompt-only augmentation is stored: redacted, summary or hash_only."""

    def __post_init__(self) -> None:
        require_at_least(self, 0, "max_message_chars", "max_total_chars", "summary_chars")
        if self.augmentation == AugmentationStorage.REFERENCE:
            raise ConfigError(
                "SnapshotPolicy.augmentation cannot be 'reference': only history messages "
                "are in the chat store",
                details={"field": "augmentation"},
            )


def take_snapshot(
    messages: Sequence[PromptMessage],
    sent: Sequence[ProviderMessage],
    *,
    prompt_hash: str,
    policy: SnapshotPolicy,
    redactor: Redactor,
    window: HistoryWindow | None = None,
    trimmed: TrimmedRange | None = None,
    inclusions: Sequence[InclusionRecord] = (),
) -> PromptSnapshot:
    """Record ``sent`` (the provider messages, in order) with the provenance of ``messages``.

    Args:
        messages: The effective prompt with domain roles and sources.
        sent: The same messages as sent to the provider (roles mapped).
        prompt_hash: The hash of ``sent``.
        policy: Size limits and the augmentation storage mode.
        redactor: Masks secrets in every kept text.
        window: The history window in force, if any.
        trimmed: The history messages the window left out, if any.
        inclusions: The inclusion records of the prompt's artifacts.

    Raises:
        ValueError: if ``messages`` and ``sent`` differ in length.
    """
    if len(messages) != len(sent):
        raise ValueError("messages and sent must have the same length")
    n = len(sent)
    # The budget goes to the system message first, then from the newest message back:
    # what explains an answer is the instructions and the end of the conversation.
    order = list(range(n - 1, -1, -1))
    if n and messages[0].role == DomainRole.SYSTEM:
        order = [0, *order[:-1]]
    contents: list[tuple[str | None, bool]] = [(None, False)] * n
    storages: list[AugmentationStorage] = [AugmentationStorage.REDACTED] * n
    budget = policy.max_total_chars
    omitted = 0
    for index in order:
        source = messages[index].source
        if source is not None and source.kind in _AUGMENTATION_SOURCES:
            storages[index] = policy.augmentation
        elif source is not None and source.kind == "history" and source.message_id:
            storages[index] = AugmentationStorage.REFERENCE
            continue  # the chat store has the text; contents[index] stays (None, False)
        text = sent[index].content
        if storages[index] == AugmentationStorage.HASH_ONLY:
            contents[index] = (None, bool(text))
            continue
        if budget <= 0:
            contents[index] = (None, bool(text))
            omitted += 1
            continue
        limit = policy.max_message_chars
        if storages[index] == AugmentationStorage.SUMMARY:
            limit = min(limit, policy.summary_chars)
        bounded, truncated = _bounded(redactor.redact(text), min(limit, budget))
        budget -= len(bounded)
        contents[index] = (bounded, truncated)
    kept: list[SnapshotMessage] = []
    roles_mapped = False
    for i, (message, provider) in enumerate(zip(messages, sent, strict=True)):
        role = message.role
        if role == DomainRole.DEVELOPER and provider.role != role.value:
            roles_mapped = True
        kept_text, truncated = contents[i]
        kept.append(
            _MESSAGE.build(
                {
                    "role": provider.role,
                    "domain_role": role,
                    "content": kept_text,
                    "chars": len(provider.content),
                    "sha256": sha256_text(provider.content),
                    "truncated": truncated,
                    "storage": storages[i],
                    "source": message.source,
                }
            )
        )
    return _SNAPSHOT.build(
        {
            "prompt_hash": prompt_hash,
            "messages": tuple(kept),
            "omitted_messages": omitted,
            "roles_mapped": roles_mapped,
            "history_window": _window_limits(window),
            "trimmed": () if trimmed is None else (trimmed,),
            "inclusions": tuple(inclusions),
        }
    )


_MESSAGE = Builder(SnapshotMessage).shape(
    ("role", "domain_role", "content", "chars", "sha256", "truncated", "storage", "source")
)
_SNAPSHOT = Builder(PromptSnapshot).shape(
    (
        "prompt_hash",
        "messages",
        "omitted_messages",
        "roles_mapped",
        "history_window",
        "trimmed",
        "inclusions",
    )
)
"""Build the snapshot from validated prompt messages and values made here (no second
validation)."""


def _bounded(text: str, limit: int) -> tuple[str, bool]:
    if len(text) <= limit:
        return text, False
    if limit <= len(_CUT):
        return text[:limit], True
    return text[: limit - len(_CUT)] + _CUT, True


def _window_limits(window: HistoryWindow | None) -> dict[str, int]:
    if window is None:
        return {}
    limits = {
        "maxMessages": window.max_messages,
        "maxChars": window.max_chars,
        "maxTokens": window.max_tokens,
    }
    return {name: value for name, value in limits.items() if value is not None}
