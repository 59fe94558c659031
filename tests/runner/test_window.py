"""History window: the kept messages are the newest suffix that fits every limit."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from opsrun.errors import ConfigError
from opsrun.model import ChatMessage, ChatRole, MessageVariant, TrimmedRange
from opsrun.prompt import (
    HistoryWindow,
    SnapshotPolicy,
    TrimReason,
    trim_history,
)


def message(index: int, text: str, role: ChatRole | None = None) -> ChatMessage:
    return ChatMessage(
        message_id=f"m{index}",
        chat_id="c",
        branch_id="b",
        role=role or (ChatRole.USER if index % 2 == 0 else ChatRole.ASSISTANT),
        variants=(MessageVariant(variant_id="v", content=text),),
        selected_variant_id="v",
    )


def history(*texts: str) -> list[ChatMessage]:
    return [message(i, t) for i, t in enumerate(texts)]


def ids(messages: tuple[ChatMessage, ...]) -> list[str]:
    return [m.message_id for m in messages]


def words(text: str) -> int:
    return len(text.split())


def test_no_limits_keeps_everything() -> None:
    h = history("a", "b", "c")
    result = trim_history(h, HistoryWindow())
    assert ids(result.kept) == ["m0", "m1", "m2"]
    assert result.trimmed is None


def test_empty_history() -> None:
    result = trim_history([], HistoryWindow(max_messages=1))
    assert result.kept == ()
    assert result.trimmed is None


@pytest.mark.parametrize(
    ("window", "kept", "reason"),
    [
        (HistoryWindow(max_messages=2), ["m3", "m4"], "max_messages"),
        (HistoryWindow(max_chars=7), ["m3", "m4"], "max_chars"),  # 3 + 4 fit, +2 does not
        (HistoryWindow(max_chars=9), ["m2", "m3", "m4"], "max_chars"),
        (HistoryWindow(max_tokens=4, token_counter=words), ["m3", "m4"], "max_tokens"),
        # the first limit that bites names the reason
        (HistoryWindow(max_messages=3, max_chars=5), ["m4"], "max_chars"),
        (HistoryWindow(max_messages=1, max_chars=1), ["m4"], "max_messages"),
    ],
)
def test_limits(window: HistoryWindow, kept: list[str], reason: TrimReason) -> None:
    h = history("one", "two two", "xy", "a b", "c d ")
    result = trim_history(h, window)
    assert ids(result.kept) == kept
    dropped = [m.message_id for m in h[: len(h) - len(kept)]]
    assert result.trimmed == TrimmedRange(
        first_message_id=dropped[0], last_message_id=dropped[-1], count=len(dropped), reason=reason
    )


def test_current_user_message_is_kept_even_when_too_big() -> None:
    h = history("a", "b", "a very long current message")
    result = trim_history(h, HistoryWindow(max_chars=3, max_messages=0))
    assert ids(result.kept) == ["m2"]
    assert result.trimmed is not None
    trimmed = result.trimmed
    assert (trimmed.first_message_id, trimmed.last_message_id, trimmed.count) == ("m0", "m1", 2)


def test_token_counter_is_not_called_for_the_trimmed_rest() -> None:
    calls: list[str] = []

    def counter(text: str) -> int:
        calls.append(text)
        return 1

    h = history(*(f"t{i}" for i in range(100)))
    trim_history(h, HistoryWindow(max_tokens=3, token_counter=counter))
    assert calls == ["t99", "t98", "t97", "t96"]


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: HistoryWindow(max_messages=-1), "max_messages"),
        (lambda: HistoryWindow(max_chars=-5), "max_chars"),
        (lambda: HistoryWindow(max_tokens=10), "token_counter"),
        (lambda: HistoryWindow(max_tokens=-1, token_counter=len), "max_tokens"),
        (lambda: SnapshotPolicy(max_message_chars=-1), "max_message_chars"),
        (lambda: SnapshotPolicy(max_total_chars=-1), "max_total_chars"),
        (lambda: SnapshotPolicy(summary_chars=-1), "summary_chars"),
    ],
    ids=lambda value: value if isinstance(value, str) else "",
)
def test_invalid_prompt_configs(build: Callable[[], object], field: str) -> None:
    with pytest.raises(ConfigError, match=r"(HistoryWindow|SnapshotPolicy)\.") as info:
        build()
    assert info.value.code == "config_error"
    assert info.value.details["field"] == field


@given(
    texts=st.lists(st.text(max_size=12), min_size=0, max_size=25),
    max_messages=st.none() | st.integers(0, 30),
    max_chars=st.none() | st.integers(0, 120),
    max_tokens=st.none() | st.integers(0, 20),
)
def test_window_properties(
    texts: list[str], max_messages: int | None, max_chars: int | None, max_tokens: int | None
) -> None:
    h = history(*texts)
    window = HistoryWindow(
        max_messages=max_messages,
        max_chars=max_chars,
        max_tokens=max_tokens,
        token_counter=words if max_tokens is not None else None,
    )
    result = trim_history(h, window)
    kept, trimmed = list(result.kept), result.trimmed
    # kept is a suffix; trimmed is exactly the prefix, as one range
    assert kept == h[len(h) - len(kept) :]
    dropped = h[: len(h) - len(kept)]
    if trimmed is None:
        assert dropped == []
    else:
        assert trimmed.count == len(dropped)
        assert trimmed.first_message_id == dropped[0].message_id
        assert trimmed.last_message_id == dropped[-1].message_id
    if h:
        assert kept[-1] is h[-1]  # the current user message is always kept
    if len(kept) > 1:  # beyond the always-kept message, every limit holds
        assert max_messages is None or len(kept) <= max_messages
        assert max_chars is None or sum(len(m.prompt_text) for m in kept) <= max_chars
        assert max_tokens is None or sum(words(m.prompt_text) for m in kept) <= max_tokens
    if trimmed is not None:
        # the next older message really would break the limit named
        reason = trimmed.reason
        grown = [h[len(h) - len(kept) - 1], *kept]
        if reason == "max_messages":
            assert max_messages is not None
            assert len(grown) > max_messages
        elif reason == "max_chars":
            assert max_chars is not None
            assert sum(len(m.prompt_text) for m in grown) > max_chars
        else:
            assert max_tokens is not None
            assert sum(words(m.prompt_text) for m in grown) > max_tokens
