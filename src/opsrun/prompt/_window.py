"""The history window: which chat messages the effective prompt keeps.

The window is a suffix of the history. It is built from the newest message back and
closes at the first message that would exceed a limit; that message and every older one
are trimmed. The last message (the current user message, by the contract of
the effective prompt) is always kept, even when it alone exceeds
a limit, so a turn never loses the text it answers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, TypeAlias

from .._config import require, require_at_least
from ..model import ChatMessage, TrimmedRange
from ._tokens import TokenCounter

__all__ = ["HistoryWindow", "TrimReason", "TrimResult", "trim_history"]

TrimReason: TypeAlias = Literal["max_messages", "max_chars", "max_tokens"]
"""The limit that closed the window."""


@dataclass(frozen=True, kw_only=True, slots=True)
class HistoryWindow:
    """Limits on the history the effective prompt keeps; ``None`` means unlimited.

    Characters are counted with ``len(message.prompt_text)``; tokens with
    ``token_counter(message.prompt_text)``. Only history messages count: the system
    prompt, artifacts and prompt-time effects are outside the window.

    Raises:
        ConfigError: if a limit is negative, or ``max_tokens`` is set without a
            ``token_counter``.
    """

    max_messages: int | None = None
    """How many history messages are kept at most."""
    max_chars: int | None = None
    """How many characters of prompt text are kept at most."""
    max_tokens: int | None = None
    """How many tokens of prompt text are kept at most (needs ``token_counter``)."""
    token_counter: TokenCounter | None = None
    """Counts the tokens of one message's prompt text (:data:`TokenCounter`):
    :func:`approximate_tokens`, :func:`tiktoken_counter` or the host's own tokenizer."""

    def __post_init__(self) -> None:
        require_at_least(self, 0, "max_messages", "max_chars", "max_tokens", optional=True)
        require(
            self,
            "token_counter",
            self.max_tokens is None or self.token_counter is not None,
            "given when max_tokens is set",
        )


@dataclass(frozen=True, slots=True)
class TrimResult:
    """The outcome of :func:`trim_history`."""

    kept: tuple[ChatMessage, ...]
    """The kept messages, oldest first: always a suffix of the history."""
    trimmed: TrimmedRange | None
    """The dropped messages (always the oldest ones) and the limit that closed the
    window; None when everything fits."""


def trim_history(history: Sequence[ChatMessage], window: HistoryWindow) -> TrimResult:
    """Keep the newest messages of ``history`` that fit in ``window``.

    Walks from the newest message back, summing messages, characters and tokens. The
    first message that would push a sum over its limit closes the window; it and every
    older message are trimmed with that limit as the reason (limits are checked in the
    order messages, characters, tokens). The last message is always kept. The token
    counter is called only for messages that are examined, never for the trimmed rest.

    Args:
        history: Messages up to and including the current user message, oldest first.
        window: The limits.

    Returns:
        The kept suffix and the trimmed prefix.
    """
    n = len(history)
    if n == 0:
        return TrimResult(kept=(), trimmed=None)
    max_messages, max_chars, max_tokens = window.max_messages, window.max_chars, window.max_tokens
    counter = window.token_counter
    chars = 0
    tokens = 0
    start = n  # index of the oldest kept message
    reason: TrimReason | None = None
    for index in range(n - 1, -1, -1):
        text = history[index].prompt_text
        always = index == n - 1
        count = n - index
        if max_messages is not None and count > max_messages and not always:
            reason = "max_messages"
            break
        chars += len(text)
        if max_chars is not None and chars > max_chars and not always:
            reason = "max_chars"
            break
        if max_tokens is not None:
            assert counter is not None  # checked in HistoryWindow.__post_init__
            tokens += counter(text)
            if tokens > max_tokens and not always:
                reason = "max_tokens"
                break
        start = index
    if reason is None:
        return TrimResult(kept=tuple(history), trimmed=None)
    trimmed = TrimmedRange(
        first_message_id=history[0].message_id,
        last_message_id=history[start - 1].message_id,
        count=start,
        reason=reason,
    )
    return TrimResult(kept=tuple(history[start:]), trimmed=trimmed)
