"""Token counters: one type for the history window and the llm kind, and the tiktoken one.

tiktoken downloads its real BPE files on first use, so these tests build a tiny
``tiktoken.Encoding`` from a mergeable-ranks table of their own instead.
"""

from __future__ import annotations

import sys

import pytest
import tiktoken

from _support import make_runner, op, use_profile
from opsrun.errors import ConfigError
from opsrun.kinds import approximate_tokens as kinds_approximate_tokens
from opsrun.kinds import builtin_kinds
from opsrun.model import ChatMessage, ChatRole, MessageVariant, OperationDefinition, RunRequest
from opsrun.model import OperationStatus as Status
from opsrun.operations import OperationCatalog
from opsrun.prompt import (
    HistoryWindow,
    TokenCounter,
    approximate_tokens,
    tiktoken_counter,
    trim_history,
)
from opsrun.providers import ProviderRegistry
from opsrun.stores import InMemoryStores
from opsrun.testing import ScriptedProvider


def tiny_encoding() -> tiktoken.Encoding:
    """Every byte is a token; ``he``, ``ll``, ``hell`` and ``hello`` merge."""
    ranks = {bytes([i]): i for i in range(256)}
    for word in (b"he", b"ll", b"hell", b"hello"):
        ranks[word] = len(ranks)
    return tiktoken.Encoding(
        "tiny",
        pat_str=r"\S+|\s+",
        mergeable_ranks=ranks,
        special_tokens={"<|endoftext|>": len(ranks)},
    )


def message(index: int, text: str) -> ChatMessage:
    return ChatMessage(
        message_id=f"m{index}",
        chat_id="c",
        branch_id="b",
        role=ChatRole.USER if index % 2 == 0 else ChatRole.ASSISTANT,
        variants=(MessageVariant(variant_id="v", content=text),),
        selected_variant_id="v",
    )


def test_approximate_tokens_is_characters_over_four_rounded_up() -> None:
    assert [approximate_tokens("x" * n) for n in (0, 1, 4, 5, 400)] == [0, 1, 1, 2, 100]
    assert kinds_approximate_tokens is approximate_tokens  # one counter, two homes


def test_tiktoken_counter_counts_with_a_given_encoding() -> None:
    count = tiktoken_counter(tiny_encoding())
    assert count("hello") == 1
    assert count("hello world") == 7  # hello, " ", then w o r l d byte by byte
    assert count("") == 0
    assert repr(count) == "tiktoken_counter('tiny')"


def test_special_token_text_counts_as_plain_text() -> None:
    count = tiktoken_counter(tiny_encoding())
    assert count("<|endoftext|>") == len("<|endoftext|>")  # no ValueError mid-run


def test_an_unknown_encoding_name_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as info:
        tiktoken_counter("no_such_encoding")
    assert info.value.details["encoding"] == "no_such_encoding"
    assert "no_such_encoding" in info.value.message


def test_an_encoding_that_cannot_download_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def offline(name: str) -> tiktoken.Encoding:
        raise ConnectionError("no network")

    monkeypatch.setattr(tiktoken, "get_encoding", offline)
    with pytest.raises(ConfigError) as info:
        tiktoken_counter("o200k_base")
    assert "ConnectionError: no network" in info.value.message
    assert isinstance(info.value.__cause__, ConnectionError)


def test_a_name_is_loaded_when_the_counter_is_made(monkeypatch: pytest.MonkeyPatch) -> None:
    loaded: list[str] = []

    def get_encoding(name: str) -> tiktoken.Encoding:
        loaded.append(name)
        return tiny_encoding()

    monkeypatch.setattr(tiktoken, "get_encoding", get_encoding)
    count = tiktoken_counter()
    assert loaded == ["o200k_base"]
    assert count("hello hello") == 3


def test_without_tiktoken_installed_the_counter_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "tiktoken", None)  # import tiktoken -> ImportError
    with pytest.raises(ConfigError, match=r"opsrun\[tiktoken\]"):
        tiktoken_counter()


def test_the_history_window_trims_by_the_tiktoken_count() -> None:
    count: TokenCounter = tiktoken_counter(tiny_encoding())
    history = [message(0, "hello"), message(1, "abc"), message(2, "hello hello")]
    result = trim_history(history, HistoryWindow(max_tokens=5, token_counter=count))
    # newest first: "hello hello" is 3 tokens, "abc" 3 more would make 6 > 5
    assert [m.message_id for m in result.kept] == ["m2"]
    assert result.trimmed is not None
    assert result.trimmed.reason == "max_tokens"


@pytest.mark.anyio
async def test_the_llm_kind_checks_max_input_tokens_with_the_same_counter() -> None:
    count = tiktoken_counter(tiny_encoding())
    provider = ScriptedProvider()
    catalog = OperationCatalog(
        kinds=builtin_kinds(providers=ProviderRegistry({"p": provider}), token_counter=count)
    )
    catalog.add_definition(OperationDefinition(operation_id="aux", name="Aux", kind="llm"))
    stores = InMemoryStores()
    runner = make_runner(stores=stores, catalog=catalog)
    # 4 tokens for the tiny encoding; characters / 4 would count 5
    params = {
        "providerRef": "p",
        "model": "m",
        "prompt": "hellohellohellohello",
        "writeArtifact": {"tag": "notes", "persisted": False, "usage": "internal"},
    }

    await use_profile(stores, op("aux", params={**params, "maxInputTokens": 4}))
    fits = await runner.run(
        RunRequest(trigger="generate", chat_id="c1", profile_id="p", user_message="hi")
    )
    assert fits.operation("aux").status == Status.DONE

    await use_profile(stores, op("aux", params={**params, "maxInputTokens": 3}))
    over = await runner.run(
        RunRequest(trigger="generate", chat_id="c2", profile_id="p", user_message="hi")
    )
    error = over.operation("aux").error
    assert error is not None
    assert error.code == "budget_exceeded"
    assert error.details == {"inputTokens": 4, "maxInputTokens": 3}
    assert provider.calls == 1
