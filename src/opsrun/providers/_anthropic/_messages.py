"""opsrun provider messages → the Messages API's ``system`` and alternating ``messages``.

The rules, in order:

1. ``system`` and ``developer`` messages before the first ``user`` or ``assistant``
   message are joined, in order and separated by a blank line, into the top-level
   ``system`` parameter.
2. A ``system`` or ``developer`` message after that point keeps its place: it is sent as
   a ``user`` turn whose text is prefixed with :data:`SYSTEM_PREFIX` (with
   ``system_in_conversation="system"`` it joins the top-level ``system`` instead and
   its position is lost).
3. Messages with no text but whitespace are left out (the API refuses empty text).
4. Consecutive messages of the same role become one turn with one text block each,
   so the turns alternate as the API requires; no text is changed.
5. The conversation must start with a ``user`` turn: when it would start with an
   ``assistant`` turn, or has no turn at all, a user turn with
   :data:`OPENING_USER_TEXT` is put first.
6. A final ``assistant`` turn is kept (the model continues it, where the model allows
   that), with trailing whitespace removed, which the API refuses there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, TypeAlias

from ...errors import ProviderError
from ...ports import ProviderMessage

if TYPE_CHECKING:
    from anthropic.types import MessageParam, TextBlockParam

__all__ = [
    "JSON_INSTRUCTION",
    "OPENING_USER_TEXT",
    "SYSTEM_PREFIX",
    "Conversation",
    "SystemPlacement",
    "to_conversation",
]

SystemPlacement: TypeAlias = Literal["user", "system"]
"""Where a system message in the middle of the conversation goes: a prefixed user turn
in place (``user``), or the top-level system prompt (``system``)."""

SYSTEM_PREFIX = "[system]\n"
"""Prefix of a mid-conversation system message sent as a user turn."""

OPENING_USER_TEXT = "(conversation start)"
"""The user turn put first when the conversation would not start with one."""

JSON_INSTRUCTION = (
    "Reply with one JSON value and nothing else: no prose before or after it, "
    "no markdown code fence."
)
"""Appended to the system prompt when a JSON reply is asked for by instruction."""


@dataclass(frozen=True, slots=True)
class Conversation:
    """What the Messages API receives: the system prompt and alternating turns."""

    system: str | None
    """The top-level ``system`` parameter, or None when there is none."""
    messages: list[MessageParam]
    """Alternating user/assistant turns, starting with a user turn."""


def to_conversation(
    messages: Sequence[ProviderMessage],
    *,
    system_in_conversation: SystemPlacement = "user",
    instruction: str | None = None,
) -> Conversation:
    """Map opsrun provider messages to the Messages API (see the module's rules).

    ``instruction`` is appended to the system prompt (a JSON-format instruction).

    Raises:
        ProviderError: a message has a role other than system, developer, user or
            assistant (code ``bad_request``).
    """
    system: list[str] = []
    turns: list[tuple[Literal["user", "assistant"], list[str]]] = []
    for message in messages:
        role = message.role
        text = message.content
        if role in ("system", "developer"):
            if not turns or system_in_conversation == "system":
                if text.strip():
                    system.append(text)
                continue
            role, text = "user", SYSTEM_PREFIX + text
        elif role not in ("user", "assistant"):
            raise ProviderError(
                f"a message with role {role!r} cannot be sent to the Anthropic Messages API",
                code="bad_request",
                details={"role": role[:64]},
            )
        if not text.strip():
            continue
        turn_role: Literal["user", "assistant"] = "user" if role == "user" else "assistant"
        if turns and turns[-1][0] == turn_role:
            turns[-1][1].append(text)
        else:
            turns.append((turn_role, [text]))
    if not turns or turns[0][0] != "user":
        turns.insert(0, ("user", [OPENING_USER_TEXT]))
    if turns[-1][0] == "assistant":
        texts = turns[-1][1]
        texts[-1] = texts[-1].rstrip()
    if instruction:
        system.append(instruction)
    return Conversation(
        system="\n\n".join(system) if system else None,
        messages=[_turn(role, texts) for role, texts in turns],
    )


def _turn(role: Literal["user", "assistant"], texts: list[str]) -> MessageParam:
    blocks: list[TextBlockParam] = [{"type": "text", "text": text} for text in texts]
    if role == "user":
        return {"role": "user", "content": blocks}
    return {"role": "assistant", "content": blocks}
