"""What a run records about the prompt it sent: the redacted snapshot and its provenance."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal, TypeAlias

from pydantic import Field

from ._base import JsonObject, Model
from ._chat import PromptSource
from ._enums import DomainRole

Phase: TypeAlias = Literal["system", "early", "near_anchor", "after_last_user", "tail"]
"""An inclusion phase; phases are the first key of the inclusion ordering."""

InclusionAction: TypeAlias = Literal["insert", "replace", "wrap", "merge_section"]
"""What an inclusion does at its place."""


class AugmentationStorage(StrEnum):
    """How a recorded prompt message keeps its text.

    Prompt-only augmentation (effects, artifact inclusions) follows the snapshot
    policy; working notes are never stored raw by default. History messages are kept
    by reference: the chat store already has their text.
    """

    REDACTED = "redacted"
    """Secrets masked, text cut to the snapshot's per-message limit (the default)."""
    SUMMARY = "summary"
    """Only a short redacted opening of the text, plus its length and hash."""
    HASH_ONLY = "hash_only"
    """No text at all: length and sha256 only."""
    REFERENCE = "reference"
    """No text: a history message sent as the chat store holds it, named by
    ``source.messageId``; ``sha256`` tells whether the stored text is still the one sent."""


class InclusionRecord(Model):
    """What happened to one artifact's ``promptInclusion`` in one prompt."""

    tag: str
    """The artifact."""
    profile_index: int
    """Its position in the profile order (a tie-break key)."""
    included: bool
    """True when some part of it is in the prompt."""
    versions: tuple[int, ...] = ()
    """The versions included, in prompt order."""
    phase: Phase | None = None
    """Its phase, once expanded."""
    priority: int | None = None
    """Its priority, once expanded."""
    action: InclusionAction | None = None
    """What it did."""
    where: str | None = None
    """``system:start``, ``system:end``, ``system:replace``, ``system:wrap``,
    ``system:section:<name>``, ``before:<messageId>``, ``after:<messageId>``,
    ``replace:<messageId>``, ``wrap:<messageId>``, ``section:<messageId>:<name>``, ``top``
    (above the history) or ``tail`` (the end of the prompt)."""
    anchor_message_id: str | None = None
    """The history message the anchor resolved to, when it exists in the full history."""
    depth_policy: str | None = None
    """``clamp_to_oldest_kept`` or ``relocate_to_nearest`` when the policy moved it."""
    reason: str | None = None
    """Why it was dropped: ``no_prompt_inclusion``, ``usage_not_in_prompt``, ``mode_none``,
    ``empty_content``, ``no_anchor``, ``no_history``, ``anchor_not_found``,
    ``anchor_trimmed``, ``anchor_out_of_range`` or ``wrap_needs_pre_post``."""


class TrimmedRange(Model):
    """History messages the window left out of the prompt: a run of the oldest ones.

    A range, not a list, so a run's record does not grow with the length of the chat.
    """

    first_message_id: str
    """The oldest message left out."""
    last_message_id: str
    """The newest message left out (the one just before the kept window)."""
    count: int = Field(ge=1)
    """How many messages were left out."""
    reason: str
    """The limit that closed the window: ``max_messages``, ``max_chars`` or ``max_tokens``."""


class SnapshotMessage(Model):
    """One sent message as the run keeps it: redacted and bounded, with its provenance."""

    role: str
    """The provider role it was sent with."""
    domain_role: DomainRole
    """Its domain role (differs from ``role`` when ``developer`` was mapped to ``system``)."""
    content: str | None
    """The kept text (see ``storage``); None for a history message kept by reference and
    when only the hash is kept (``hash_only``, or the snapshot's size limit was spent)."""
    chars: int = Field(ge=0)
    """Length of the text actually sent."""
    sha256: str
    """sha256 hex of the UTF-8 text actually sent."""
    truncated: bool = False
    """True when ``content`` was cut."""
    storage: AugmentationStorage = AugmentationStorage.REDACTED
    """How ``content`` was kept."""
    source: PromptSource | None = None
    """Where the message came from: system, history, effect or artifact."""


class PromptSnapshot(Model):
    """The effective prompt of a main LLM call, as recorded for reproducibility.

    ``prompt_hash`` is computed over the exact provider messages sent (see
    ``docs/prompt.md``); the messages here are the redacted, size-bounded view of them.
    """

    prompt_hash: str
    """sha256 of the canonical serialisation of the provider messages sent."""
    messages: tuple[SnapshotMessage, ...] = ()
    """Every message sent, in send order."""
    omitted_messages: int = Field(default=0, ge=0)
    """Messages whose text was not kept because the snapshot's total size limit was spent
    (their ``content`` is None; role, length and hash remain)."""
    roles_mapped: bool = False
    """True when some ``developer`` message was sent as ``system``."""
    history_window: JsonObject = Field(default_factory=dict)
    """The window limits in force (``maxMessages``, ``maxChars``, ``maxTokens``)."""
    trimmed: tuple[TrimmedRange, ...] = ()
    """History messages the window left out, as ranges, oldest first."""
    inclusions: tuple[InclusionRecord, ...] = ()
    """One record per artifact considered for the prompt."""
