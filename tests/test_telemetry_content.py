"""Captured LLM content: GenAI message JSON, masked, never longer than its bound."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from opsrun._telemetry import bounded_messages
from opsrun.redaction import DEFAULT_REDACTOR, Redactor

SECRET = "sk-proj-" + "A1b2C3d4" * 6


def test_messages_in_the_genai_shape() -> None:
    text, cut = bounded_messages(
        [("system", "Be brief."), ("user", "hi")], redactor=DEFAULT_REDACTOR, limit=1000
    )
    assert json.loads(text) == [
        {"role": "system", "parts": [{"type": "text", "content": "Be brief."}]},
        {"role": "user", "parts": [{"type": "text", "content": "hi"}]},
    ]
    assert cut is False


def test_a_reply_carries_its_finish_reason() -> None:
    text, _ = bounded_messages(
        [("assistant", "done")], redactor=DEFAULT_REDACTOR, limit=1000, finish_reason="length"
    )
    assert json.loads(text)[0]["finish_reason"] == "length"


def test_the_newest_messages_are_kept_and_the_oldest_kept_one_is_cut() -> None:
    messages = [("user", "a" * 100), ("assistant", "b" * 100), ("user", "c" * 30)]
    text, cut = bounded_messages(messages, redactor=DEFAULT_REDACTOR, limit=160)
    kept = json.loads(text)
    assert [m["role"] for m in kept] == ["assistant", "user"]
    assert kept[1]["parts"][0]["content"] == "c" * 30
    assert kept[0]["parts"][0]["content"].endswith("b…")
    assert len(text) <= 160
    assert cut is True


def test_secrets_are_masked_before_the_cut() -> None:
    # the cut falls inside the key: what is kept must not be a piece of it
    content = "key: " + SECRET + " and more text after it"
    for limit in range(60, 140, 7):
        text, _ = bounded_messages([("user", content)], redactor=DEFAULT_REDACTOR, limit=limit)
        assert "A1b2C3d4" not in text, limit


def test_a_literal_secret_far_into_a_huge_message_is_never_seen_partly() -> None:
    redactor = Redactor().with_secrets("hunter2-very-secret")
    content = "x" * 1_000_000 + "hunter2-very-secret"
    text, cut = bounded_messages([("user", content)], redactor=redactor, limit=500)
    assert cut is True
    assert len(text) <= 500
    assert "hunter2" not in text


def test_a_limit_too_small_for_any_message_gives_an_empty_list() -> None:
    text, cut = bounded_messages([("user", "hello")], redactor=DEFAULT_REDACTOR, limit=10)
    assert (text, cut) == ("[]", True)


@given(
    messages=st.lists(
        st.tuples(st.sampled_from(["system", "user", "assistant"]), st.text(max_size=300)),
        max_size=8,
    ),
    limit=st.integers(min_value=1, max_value=600),
)
def test_the_json_is_valid_and_never_longer_than_the_limit(
    messages: list[tuple[str, str]], limit: int
) -> None:
    text, cut = bounded_messages(messages, redactor=DEFAULT_REDACTOR, limit=limit)
    assert len(text) <= max(limit, 2)
    kept = json.loads(text)
    assert len(kept) <= len(messages)
    if not cut:
        assert [m["role"] for m in kept] == [role for role, _ in messages]
    # what is kept is a suffix of the conversation, in order
    roles = [role for role, _ in messages]
    assert [m["role"] for m in kept] == roles[len(roles) - len(kept) :]
