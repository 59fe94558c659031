"""Token counters: the one callable type that the history window and the ``llm`` kind use.

A token counter is any ``(text) -> int``. :func:`approximate_tokens` (characters / 4) needs
nothing; :func:`tiktoken_counter` counts with one of OpenAI's tokenizers when the optional
``tiktoken`` package is installed (``pip install 'opsrun[tiktoken]'``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeAlias

from ..errors import ConfigError

if TYPE_CHECKING:
    from tiktoken import Encoding

__all__ = ["TokenCounter", "approximate_tokens", "tiktoken_counter"]

TokenCounter: TypeAlias = Callable[[str], int]
"""Counts the tokens of one text.

``HistoryWindow(token_counter=...)`` calls it on each history message it examines;
the ``llm`` kind (``builtin_kinds(token_counter=...)``) on the rendered ``system`` plus
``prompt`` to check ``maxInputTokens``. It is called on the event loop, so it should be
quick and must not block on I/O.
"""


def approximate_tokens(text: str) -> int:
    """Count one token per four characters, rounded up.

    Close enough for English prose with common tokenizers, and free; pass an exact
    counter (:func:`tiktoken_counter`, or the host's own tokenizer) when a limit matters.
    """
    return (len(text) + 3) // 4


class _TiktokenCounter:
    """Counts tokens with one ``tiktoken.Encoding``; special tokens count as plain text."""

    __slots__ = ("encoding",)

    def __init__(self, encoding: Encoding) -> None:
        self.encoding = encoding

    def __call__(self, text: str) -> int:
        # encode_ordinary: text that looks like a special token ("<|endoftext|>" in a
        # user message) is counted as text instead of raising ValueError mid-run.
        return len(self.encoding.encode_ordinary(text))

    def __repr__(self) -> str:
        return f"tiktoken_counter({self.encoding.name!r})"


def tiktoken_counter(encoding: str | Encoding = "o200k_base") -> TokenCounter:
    """Return a token counter that counts with a tiktoken encoding.

    ``encoding`` is an encoding name (``"o200k_base"`` for the GPT-4o family,
    ``"cl100k_base"`` for GPT-4 and GPT-3.5) or a ``tiktoken.Encoding`` the host already
    built (say ``tiktoken.encoding_for_model("gpt-4o")``, or one constructed from its own
    BPE file). A name is loaded now, not on the first count: tiktoken downloads the
    encoding's BPE file the first time it is used on a machine and caches it in the
    directory named by ``TIKTOKEN_CACHE_DIR`` (by default ``data-gym-cache`` in the
    system's temporary directory). Without network access, fill that cache beforehand,
    or pass an ``Encoding`` object.

    Text that looks like a special token (``<|endoftext|>``) is counted as ordinary text.

    Example::

        from opsrun.prompt import HistoryWindow, tiktoken_counter

        count = tiktoken_counter("o200k_base")
        window = HistoryWindow(max_tokens=8000, token_counter=count)
        kinds = builtin_kinds(providers=registry, token_counter=count)

    Raises:
        ConfigError: tiktoken is not installed, the name is not an encoding tiktoken
            knows, or its BPE file could not be loaded (no network and no cached copy).
    """
    try:
        import tiktoken  # optional: only this counter needs it
    except ImportError as exc:
        raise ConfigError(
            "tiktoken_counter needs the tiktoken package: pip install 'opsrun[tiktoken]'",
            details={"field": "encoding"},
        ) from exc
    if isinstance(encoding, tiktoken.Encoding):
        return _TiktokenCounter(encoding)
    try:
        loaded = tiktoken.get_encoding(encoding)
    except Exception as exc:  # an unknown name (ValueError) or a failed download
        raise ConfigError(
            f"could not load the tiktoken encoding {encoding!r}: {type(exc).__name__}: {exc}",
            details={"field": "encoding", "encoding": str(encoding)},
        ) from exc
    return _TiktokenCounter(loaded)
