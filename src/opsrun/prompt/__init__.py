"""The effective prompt of a run: history window, artifact inclusions, effects, snapshot.

:func:`effective_prompt` trims the history to a :class:`HistoryWindow`, places the
artifacts whose ``promptInclusion`` asks for it and applies prompt-time effects, in one
documented order; :class:`SnapshotPolicy` bounds what a run records of it, and
:func:`prompt_hash` is the hash a run records; :func:`take_snapshot` builds the record.
:data:`TokenCounter` is the callable type both the window and the ``llm`` kind count
tokens with: :func:`approximate_tokens` (characters / 4) or :func:`tiktoken_counter`.
"""

from __future__ import annotations

from ._effective import EffectivePrompt as EffectivePrompt
from ._effective import effective_prompt as effective_prompt
from ._effective import prompt_hash as prompt_hash
from ._effective import to_provider_messages as to_provider_messages
from ._snapshot import SnapshotPolicy as SnapshotPolicy
from ._snapshot import take_snapshot as take_snapshot
from ._tokens import TokenCounter as TokenCounter
from ._tokens import approximate_tokens as approximate_tokens
from ._tokens import tiktoken_counter as tiktoken_counter
from ._window import HistoryWindow as HistoryWindow
from ._window import TrimReason as TrimReason
from ._window import TrimResult as TrimResult
from ._window import trim_history as trim_history

__all__ = [
    "EffectivePrompt",
    "HistoryWindow",
    "SnapshotPolicy",
    "TokenCounter",
    "TrimReason",
    "TrimResult",
    "approximate_tokens",
    "effective_prompt",
    "prompt_hash",
    "take_snapshot",
    "tiktoken_counter",
    "to_provider_messages",
    "trim_history",
]
