"""Streamed text: a secret split across deltas is masked as if the text came whole."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from opsrun._redact import DEFAULT_REDACTOR, MASK, Redactor, StreamRedactor
from test_redact import AWS_ID, BEARER, GH_PAT, JWT, OPENAI_PROJ, OPENAI_SVC, TOKEN_CASES
from test_redact_rules import POSITIVES

PEM = (
    "-----BEGIN RSA PRIVATE KEY-----\n"
    "MIIBOgIBAAJBAKj34GkxFhD90vcNLYLInFEX6Ppy1tPf9Cnzj4p4WGeKLs1Pt8Qu\n"
    "KUpRKfFLfRYC9AIKjbJTWit+CqvjWYzvQwECAwEAAQ==\n"
    "-----END RSA PRIVATE KEY-----"
)

PARTS = [
    "Sure, here it is:",
    OPENAI_PROJ,
    f"Authorization: Bearer {BEARER}",
    "password = hunter2hunter2",
    f"api_key={OPENAI_SVC}",
    PEM,
    AWS_ID,
    JWT,
    GH_PAT,
    "and nothing else.",
    "plain words only",
]


def stream(redactor: Redactor, pieces: list[str]) -> list[str]:
    s = StreamRedactor(redactor)
    out = [s.feed(p) for p in pieces]
    out.append(s.flush())
    return out


def split(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(text) + 1) for c in cuts})
    bounds = [0, *points, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


@given(
    st.lists(st.sampled_from(PARTS), min_size=1, max_size=8),
    st.lists(st.integers(min_value=0), max_size=40),
)
def test_joined_release_equals_whole_text_redaction(parts: list[str], cuts: list[int]) -> None:
    text = " ".join(parts) + " "
    released = stream(DEFAULT_REDACTOR, split(text, cuts))
    assert "".join(released) == DEFAULT_REDACTOR.redact(text)


def test_every_key_family_split_at_every_point_is_masked() -> None:
    for secret, _prefix in TOKEN_CASES:
        text = f"the key {secret} is yours"
        for cut in range(1, len(text)):
            joined = "".join(stream(DEFAULT_REDACTOR, [text[:cut], text[cut:]]))
            assert secret not in joined
            assert MASK in joined


def test_host_literal_secret_split_across_deltas() -> None:
    redactor = Redactor(secrets=("correct-horse-battery",))
    pieces = ["my secret is corr", "ect-hor", "se-battery, ok then"]
    assert "".join(stream(redactor, pieces)) == f"my secret is {MASK}, ok then"


def test_text_is_released_while_streaming_not_only_at_the_end() -> None:
    s = StreamRedactor(DEFAULT_REDACTOR)
    released = [s.feed(word + " ") for word in ["one", "two", "three", "four", "five", "six"]]
    assert released[:3] == ["", "", ""]
    assert "".join(released) == "one two three "
    assert s.flush() == "four five six "


def test_a_long_run_without_whitespace_is_released_redacted() -> None:
    # Past max_pending the run is cut, but the newest 1,024 characters stay pending: a
    # key arriving there must not be released in halves.
    s = StreamRedactor(DEFAULT_REDACTOR, max_pending=100)
    assert s.feed("x" * 600) == ""
    assert s.feed("y" * 600) == "x" * 176
    assert s.flush() == "x" * 424 + "y" * 600


FAMILY_PARTS = [text for _, text, _ in POSITIVES] + ["plain words", "and so on."]


@given(
    st.lists(st.sampled_from(FAMILY_PARTS), min_size=1, max_size=6),
    st.sampled_from([" ", "\n", " \\n"]),
    st.lists(st.integers(min_value=0), max_size=40),
)
def test_every_family_streams_like_whole_text(parts: list[str], sep: str, cuts: list[int]) -> None:
    text = sep.join(parts) + "\n"
    released = stream(DEFAULT_REDACTOR, split(text, cuts))
    assert "".join(released) == DEFAULT_REDACTOR.redact(text)


def test_a_netrc_entry_is_held_until_its_password() -> None:
    text = "ok machine api.example.com login alice password s3cr3t-Pa55word then more words\n"
    for size in (1, 4, 9):
        pieces = [text[i : i + size] for i in range(0, len(text), size)]
        joined = "".join(stream(DEFAULT_REDACTOR, pieces))
        assert joined == DEFAULT_REDACTOR.redact(text)
        assert "s3cr3t" not in joined


def test_a_stream_cut_off_inside_a_key_masks_the_word_still_arriving() -> None:
    stream = StreamRedactor(DEFAULT_REDACTOR)
    released = stream.feed("Use the key sk-proj-Zq8LmN3vXr7TyU2w")
    rest = stream.flush(cut_off=True)
    assert released + rest == "Use the key " + MASK
    assert "Zq8L" not in released + rest


def test_a_stream_cut_off_keeps_a_short_last_word_and_a_finished_one() -> None:
    for text in ("The door op", "The door opens "):
        stream = StreamRedactor(DEFAULT_REDACTOR)
        assert stream.feed(text) + stream.flush(cut_off=True) == text


def test_a_stream_cut_off_inside_a_pem_block_masks_it_from_its_header() -> None:
    stream = StreamRedactor(DEFAULT_REDACTOR)
    text = "Here:\n-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqh\nkiG9w0B\n"
    out = stream.feed(text) + stream.flush(cut_off=True)
    assert out == "Here:\n" + MASK
