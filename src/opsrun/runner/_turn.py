"""The chat turn a run answers: its history, its user message and its assistant reply."""

from __future__ import annotations

from datetime import datetime

from ..errors import NotFound
from ..model import (
    AssistantBlocks,
    AssistantMeta,
    AssistantVariant,
    ChatMessage,
    ChatRole,
    Hook,
    MainLlmCall,
    MessageVariant,
    Trigger,
    TurnEffect,
    UserVariant,
)
from ..model._build import Builder, replaced
from ._context import RunContext

__all__ = ["Turn"]

_VARIANT = Builder(MessageVariant).shape(
    ("variant_id", "content", "source", "run_id", "created_at")
)
_USER_MESSAGE = Builder(ChatMessage).shape(
    (
        "message_id",
        "chat_id",
        "branch_id",
        "role",
        "variants",
        "selected_variant_id",
        "created_at",
    )
)
_REPLY = Builder(ChatMessage).shape(
    (
        "message_id",
        "chat_id",
        "branch_id",
        "role",
        "variants",
        "selected_variant_id",
        "turn_id",
        "created_at",
    )
)
"""Build the turn's messages from values of validated models (no second validation)."""


class Turn:
    """Reads and writes the chat messages of one turn through the chat store."""

    def __init__(self, ctx: RunContext, history: list[ChatMessage]) -> None:
        self._ctx = ctx
        self.history = history
        """Messages up to and including the turn's user message, oldest first."""
        self.assistant: ChatMessage | None = None
        """The turn's assistant message, once the main LLM answered."""
        self.started = ctx.request.trigger != Trigger.GENERATE
        """The turn's user message is stored (a generate stores it while it plans)."""
        self._user_changed = False
        """A committed effect changed the user message since the history was read."""

    def release(self) -> None:
        """Let go of the history and the assistant message (the run is recorded)."""
        self.history = []
        self.assistant = None

    def visible_history(self, hook: Hook) -> tuple[ChatMessage, ...]:
        """The history operations of ``hook`` see (after the main LLM: with its reply)."""
        if hook == Hook.AFTER_MAIN_LLM and self.assistant is not None:
            return (*self.history, self.assistant)
        return tuple(self.history)

    async def ensure_user_message(self) -> None:
        """Store the user message of a ``generate`` turn unless the host stored it."""
        ctx = self._ctx
        meta = ctx.meta
        # A message id the runner made up is new; a named one may be stored already.
        if ctx.request.user_message_id is not None:
            history = self.history
            if history and history[-1].message_id == meta.user_message_id:
                self.started = True
                return
            try:
                await ctx.chats.get_message(meta.chat_id, meta.user_message_id)
                self.started = True
                return
            except NotFound:
                pass
        variant_id = ctx.ids.new_id("var")
        variant = _VARIANT.build(
            {
                "variant_id": variant_id,
                "content": ctx.request.user_message or "",
                "source": "user",
                "run_id": meta.run_id,
                "created_at": ctx.started_at,
            }
        )
        message = _USER_MESSAGE.build(
            {
                "message_id": meta.user_message_id,
                "chat_id": meta.chat_id,
                "branch_id": meta.branch_id,
                "role": ChatRole.USER,
                "variants": (variant,),
                "selected_variant_id": variant_id,
                "created_at": ctx.started_at,
            }
        )
        await ctx.chats.save_message(message)
        self.started = True
        self.history = [*self.history, message]

    async def refresh(self) -> None:
        """Re-read the user message so committed user variants reach the prompt."""
        if not self._user_changed:
            return
        self._user_changed = False
        ctx = self._ctx
        history = self.history
        # The turn's user message closes the history: look from the end.
        for index in range(len(history) - 1, -1, -1):
            if history[index].message_id == ctx.meta.user_message_id:
                message = await ctx.chats.get_message(ctx.meta.chat_id, ctx.meta.user_message_id)
                self.history = [*history[:index], message, *history[index + 1 :]]
                return

    async def store_reply(self, call: MainLlmCall) -> MainLlmCall:
        """Store the main LLM's text as the turn's new, selected assistant variant.

        Returns ``call`` with the assistant message and variant ids filled in.
        """
        ctx = self._ctx
        meta = ctx.meta
        variant_id = ctx.request.assistant_variant_id or ctx.ids.new_id("var")
        now = ctx.clock.now()
        # A host clock's reading of another type is validated (as the fields read it).
        trusted = type(now) is datetime
        values = {
            "variant_id": variant_id,
            "content": call.text or "",
            "source": "main_llm",
            "run_id": meta.run_id,
            "created_at": now,
        }
        variant = _VARIANT.build(values) if trusted else MessageVariant(**values)
        existing = None
        # A regenerate answers a turn again; so does a generate naming its user message,
        # the retry of a turn whose aborted run may have stored an answer already.
        if meta.trigger != Trigger.GENERATE or ctx.request.user_message_id is not None:
            for message in await ctx.chats.history(meta.chat_id, meta.branch_id):
                if message.role == ChatRole.ASSISTANT and message.turn_id == meta.user_message_id:
                    existing = message
        if existing is not None:
            message = _with_variant(existing, variant, True)
        else:
            message_id = ctx.ids.new_id("msg")
            created_at = ctx.clock.now()
            trusted = trusted and type(created_at) is datetime
            values = {
                "message_id": message_id,
                "chat_id": meta.chat_id,
                "branch_id": meta.branch_id,
                "role": ChatRole.ASSISTANT,
                "variants": (variant,),
                "selected_variant_id": variant_id,
                "turn_id": meta.user_message_id,
                "created_at": created_at,
            }
            message = _REPLY.build(values) if trusted else ChatMessage(**values)
        await ctx.chats.save_message(message)
        self.assistant = message
        return replaced(
            call, {"assistant_message_id": message.message_id, "assistant_variant_id": variant_id}
        )

    async def apply(self, operation_id: str, effect: TurnEffect) -> None:
        """Apply one current-turn effect of ``operation_id`` to the chat."""
        ctx = self._ctx
        now = ctx.clock.now()
        if isinstance(effect, UserVariant):
            message = await ctx.chats.get_message(ctx.meta.chat_id, ctx.meta.user_message_id)
            variant = self._variant(operation_id, effect.content, now)
            await ctx.chats.save_message(_with_variant(message, variant, effect.select))
            self._user_changed = True
            return
        assert self.assistant is not None, "assistant effects commit after the main LLM"
        message = self.assistant
        if isinstance(effect, AssistantVariant):
            message = _with_variant(
                message, self._variant(operation_id, effect.content, now), effect.select
            )
        else:
            selected = message.selected
            if isinstance(effect, AssistantBlocks):
                selected = selected.model_copy(update={"blocks": effect.blocks})
            else:
                assert isinstance(effect, AssistantMeta)
                selected = selected.model_copy(update={"meta": {**selected.meta, **effect.meta}})
            message = message.model_copy(
                update={
                    "variants": tuple(
                        selected if v.variant_id == selected.variant_id else v
                        for v in message.variants
                    )
                }
            )
        await ctx.chats.save_message(message)
        self.assistant = message

    def _variant(self, operation_id: str, content: str, now: datetime) -> MessageVariant:
        ctx = self._ctx
        return MessageVariant(
            variant_id=ctx.ids.new_id("var"),
            content=content,
            source=f"operation:{operation_id}",
            run_id=ctx.run_id,
            created_at=now,
        )


def _with_variant(message: ChatMessage, variant: MessageVariant, select: bool) -> ChatMessage:
    """``message`` with ``variant`` added; one with the same id (the answer of an
    aborted run that the retry of its turn replaces, the id being the host's
    ``assistant_variant_id``) is replaced in its place."""
    variant_id = variant.variant_id
    variants = message.variants
    if any(v.variant_id == variant_id for v in variants):
        variants = tuple(variant if v.variant_id == variant_id else v for v in variants)
    else:
        variants = (*variants, variant)
    update: dict[str, object] = {"variants": variants}
    if select:
        update["selected_variant_id"] = variant.variant_id
    return message.model_copy(update=update)
