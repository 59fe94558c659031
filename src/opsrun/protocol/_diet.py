"""The context diet: what of the fulfilled context fits the prompt's budget.

With the default :class:`ContextLimits`:

1. a FILE block longer than 20,000 characters is cut to its head and tail, 60/40, around
   the marker ``...[TRUNCATED N chars]...`` (N is how many characters were removed; the
   marker stands on its own line and counts toward the limit);
2. at most 8 blocks (FILE, SEARCH, LOGS, ENV; refusal lines do not count) are kept;
3. the whole ``FULFILLED_CONTEXT`` section is at most 120,000 characters (refusal lines,
   at most about 420 characters each, count).

When blocks must go, SEARCH blocks go first, then LOGS, then ENV, then refusal lines (for
the total only), then files found by heuristics (priority 1), and files the model or the
user asked for (priority 0) last;
within a kind, the latest block goes first. Priority-0 files are never dropped for the
total: they are cut, the latest first, but each keeps at least 4,000 characters (or all of
it when shorter), so the section can exceed the total only by those floors. Hashes are
never touched: a cut file's header still carries the sha256 of the whole file.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from opsrun._config import require_at_least

from ._context import ContextBlock, EnvBlock, FileBlock, LogsBlock, Refusal, SearchBlock
from ._context import render_context as render

__all__ = ["ContextLimits", "Diet", "apply_diet", "cut_middle"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ContextLimits:
    """The context diet's budget.

    Raises:
        ConfigError: a limit is not a number or is too small.
    """

    max_blocks: int = 8
    """FILE, SEARCH, LOGS and ENV blocks kept at most."""
    max_file_chars: int = 20_000
    """Characters of one file's text."""
    max_total_chars: int = 120_000
    """Characters of the whole ``FULFILLED_CONTEXT`` section."""
    min_file_chars: int = 4_000
    """Characters a priority-0 file keeps however tight the total."""

    def __post_init__(self) -> None:
        require_at_least(self, 1, "max_blocks")
        require_at_least(self, 100, "max_file_chars", "max_total_chars")
        require_at_least(self, 0, "min_file_chars")


def _marker(removed: int) -> str:
    return f"\n...[TRUNCATED {removed} chars]...\n"


def cut_middle(text: str, limit: int) -> tuple[str, int]:
    """``text`` cut to at most ``limit`` characters: 60% head, 40% tail, marker between.

    Returns the new text and how many characters were removed (0 when it fits).
    """
    if len(text) <= limit:
        return text, 0
    removed = len(text) - limit
    for _ in range(3):  # the marker's length depends on the count it shows
        keep = max(0, limit - len(_marker(removed)))
        removed = len(text) - keep
    head = keep * 6 // 10
    tail = keep - head
    return text[:head] + _marker(removed) + text[len(text) - tail :], removed


@dataclass(frozen=True, slots=True)
class Diet:
    """What the diet kept and did."""

    blocks: tuple[ContextBlock, ...]
    """The blocks to send, in their original order."""
    dropped: tuple[ContextBlock, ...]
    """The blocks left out."""
    truncated: int
    """FILE blocks that were cut."""

    @property
    def applied(self) -> bool:
        """Whether anything was dropped or cut."""
        return bool(self.dropped) or self.truncated > 0

    def stats(self) -> dict[str, Any]:
        """``context_stats`` of the trace."""
        counted = [b for b in self.blocks if not isinstance(b, Refusal)]
        return {
            "context_files_count": len(counted),
            "context_files_dropped_count": len(self.dropped),
            "context_total_chars": len(render(self.blocks)),
            "context_logs_chars": sum(len(b.text) for b in self.blocks if isinstance(b, LogsBlock)),
            "context_truncated_files_count": self.truncated,
        }


_KEPT = 5  # priority-0 files: cut, never dropped for the total


def _rank(block: ContextBlock) -> int:
    """Drop order: lower goes first."""
    if isinstance(block, SearchBlock):
        return 0
    if isinstance(block, LogsBlock):
        return 1
    if isinstance(block, EnvBlock):
        return 2
    if isinstance(block, Refusal):
        return 3  # a short line each: dropped only for the total
    return 4 if block.priority > 0 else _KEPT


def apply_diet(blocks: Sequence[ContextBlock], limits: ContextLimits) -> Diet:
    """Fit ``blocks`` to ``limits`` (rules in the module docstring). Never raises."""
    kept: list[ContextBlock | None] = []
    cut: set[int] = set()
    for index, block in enumerate(blocks):
        if isinstance(block, FileBlock) and block.text is not None:
            text, removed = cut_middle(block.text, limits.max_file_chars)
            if removed:
                block = replace(block, text=text, truncated=removed)
                cut.add(index)
        kept.append(block)
    # Candidates to drop, first to go first: by rank, then the latest first.
    order = sorted(
        (i for i, b in enumerate(kept) if b is not None),
        key=lambda i: (_rank(kept[i]), -i),  # type: ignore[arg-type]
    )
    dropped: list[int] = []

    def counted() -> int:
        return sum(1 for b in kept if b is not None and not isinstance(b, Refusal))

    def total() -> int:
        return len(render([b for b in kept if b is not None]))

    for i in order:
        candidate = kept[i]
        assert candidate is not None  # only kept blocks are candidates, each once
        over_count = counted() > limits.max_blocks and not isinstance(candidate, Refusal)
        over_total = total() > limits.max_total_chars and _rank(candidate) < _KEPT
        if not (over_count or over_total):
            continue
        kept[i] = None
        dropped.append(i)
    for i in reversed(range(len(kept))):  # priority-0 files, the latest first, to their floor
        excess = total() - limits.max_total_chars
        if excess <= 0:
            break
        file, original = kept[i], blocks[i]
        if not isinstance(file, FileBlock) or file.text is None:
            continue
        assert isinstance(original, FileBlock)
        assert original.text is not None
        floor = min(len(original.text), limits.min_file_chars)
        target = max(floor, len(file.text) - excess)
        if target >= len(file.text):
            continue
        text, removed = cut_middle(original.text, target)  # one cut of the whole text
        kept[i] = replace(file, text=text, truncated=removed)
        cut.add(i)
    return Diet(
        blocks=tuple(b for b in kept if b is not None),
        dropped=tuple(blocks[i] for i in sorted(dropped)),
        truncated=sum(1 for i in cut if kept[i] is not None),
    )
