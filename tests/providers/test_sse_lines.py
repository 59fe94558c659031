"""The adapters' server-sent event lines end at CR, LF and CRLF only (as SSE says), not
at U+2028, U+2029 or U+0085, and a line may arrive in pieces."""

from __future__ import annotations

from opsrun.providers._sse import Lines


def test_lines_split_at_cr_lf_and_crlf_only_across_chunks() -> None:
    lines = Lines()
    got = lines.feed(b"data: a\xe2\x80\xa8b\xc2\x85c\r")  # U+2028, U+0085 stay; CR ends it
    got += lines.feed(b"\ndata: caf\xc3")  # the LF of that CRLF is no second line
    got += lines.feed(b"\xa9\n\ndata: x\ry\r\n")  # a character split across two chunks
    got += lines.feed(b"")
    got += lines.feed(b"tail")
    got += lines.flush()
    assert got == ["data: a\u2028b\x85c", "data: café", "", "data: x", "y", "tail"]
    assert lines.flush() == []


def test_a_byte_order_mark_opening_the_stream_is_dropped_however_it_is_split() -> None:
    body = b"\xef\xbb\xbfdata: a\n\ndata: \xef\xbb\xbfb\n"
    for cut in range(1, 6):
        lines = Lines()
        got = lines.feed(body[:cut]) + lines.feed(body[cut:]) + lines.flush()
        assert got == ["data: a", "", "data: \ufeffb"]  # only the opening one goes


def test_a_stream_that_only_looks_like_a_byte_order_mark_keeps_its_bytes() -> None:
    lines = Lines()
    assert lines.feed(b"\xef") == []
    assert lines.feed(b"x\n") == ["\ufffdx"]
