"""Chat messages with variants, and the messages of an effective prompt."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from pydantic import Field, field_validator, model_validator

from ._base import JsonObject, Model, check_id, well_formed
from ._enums import ChatRole, DomainRole


class MessageVariant(Model):
    """One alternative form of a chat message; the selected one is canonical."""

    variant_id: str
    """Unique id of the variant."""
    content: str
    """The prompt text (``promptText``): what later prompts see."""
    blocks: tuple[JsonObject, ...] = ()
    """Structured UI blocks."""
    meta: JsonObject = Field(default_factory=dict)
    """Free-form metadata."""
    source: str = "user"
    """Who made it: ``user``, ``main_llm`` or ``operation:<operationId>``."""
    run_id: str | None = None
    """The run that created it."""
    created_at: datetime | None = None
    """When it was created."""

    _id = field_validator("variant_id", mode="before")(check_id)
    _well_formed = field_validator("content", "blocks", "meta", mode="after")(well_formed)


class ChatMessage(Model):
    """A message of the chat history; its selected variant gives its text."""

    message_id: str
    """Unique id; for a user message it is also the turn id."""
    chat_id: str
    """The chat."""
    branch_id: str
    """The branch."""
    role: ChatRole
    """Who speaks."""
    variants: tuple[MessageVariant, ...] = Field(min_length=1)
    """Alternatives, oldest first."""
    selected_variant_id: str
    """The canonical variant."""
    turn_id: str | None = None
    """For assistant messages: the user message id of their turn."""
    created_at: datetime | None = None
    """When it was created."""

    _ids = field_validator(
        "message_id", "chat_id", "branch_id", "selected_variant_id", "turn_id", mode="before"
    )(check_id)

    @model_validator(mode="after")
    def _selected_exists(self) -> ChatMessage:
        if not any(v.variant_id == self.selected_variant_id for v in self.variants):
            raise ValueError(f"selected variant {self.selected_variant_id!r} is not a variant")
        return self

    @property
    def selected(self) -> MessageVariant:
        """The selected variant."""
        for variant in self.variants:
            if variant.variant_id == self.selected_variant_id:
                return variant
        raise AssertionError("unreachable: validated on construction")

    @property
    def prompt_text(self) -> str:
        """The selected variant's text."""
        return self.selected.content


def turn_order(history: Sequence[ChatMessage]) -> list[ChatMessage]:
    """``history`` with each answer placed right after the user message of its turn.

    A chat store returns a branch's messages in the order they were stored. A turn
    answered late, regenerated after it failed or taken over after its process died,
    has its answer stored after later turns; this puts every assistant message whose
    ``turn_id`` names a user message of ``history`` right after that message (answers of
    one turn in stored order) and leaves every other message where it was, unanswered
    user messages included. It is the order the runner builds prompts in, apart from
    unanswered turns, which prompts leave out.
    """
    questions = {m.message_id for m in history if m.role is ChatRole.USER}
    answers: dict[str, list[ChatMessage]] = {}
    for message in history:
        if message.role is ChatRole.ASSISTANT and message.turn_id in questions:
            answers.setdefault(message.turn_id, []).append(message)
    if not answers:
        return list(history)
    ordered: list[ChatMessage] = []
    for message in history:
        if message.role is ChatRole.ASSISTANT and message.turn_id in questions:
            continue  # placed after its user message
        ordered.append(message)
        ordered.extend(answers.get(message.message_id, ()))
    return ordered


class PromptSource(Model):
    """Where a part of the effective prompt came from, for the debug report."""

    kind: str
    """``system``, ``history``, ``effect`` or ``artifact``."""
    message_id: str | None = None
    """For history: the chat message."""
    operation_id: str | None = None
    """For effects: the operation that produced it."""
    effect: str | None = None
    """For effects: the effect type."""
    note: str | None = None
    """For effects: the ``source`` the effect gave (where its text came from)."""
    tag: str | None = None
    """For artifacts: the tag."""
    version: int | None = None
    """For artifacts: the version included."""


class PromptMessage(Model):
    """One message of the effective prompt, with its domain role and source."""

    role: DomainRole
    """Domain role; ``developer`` is mapped for providers that lack it."""
    content: str
    """Text."""
    source: PromptSource | None = None
    """Provenance (not sent to the provider)."""
