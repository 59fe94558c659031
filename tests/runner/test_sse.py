"""SSE framing: what a browser's EventSource parses back is the event; idle streams keep alive."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import aclosing
from datetime import UTC, datetime
from typing import Any

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from opsrun.model import (
    MainLlmDelta,
    OperationFinished,
    RunEvent,
    RunEventAdapter,
    RunFinished,
    RunPhaseChanged,
    RunStarted,
)
from opsrun.report import sse_comment, sse_event, sse_stream
from opsrun.report._sse import format_sse

BASE: dict[str, Any] = {
    "ts": datetime(2024, 5, 1, 12, 0, tzinfo=UTC),
    "run_id": "r1",
    "chat_id": "c1",
    "user_message_id": "u1",
    "trigger": "generate",
}


def parse_sse(text: str) -> tuple[list[dict[str, str]], list[str]]:
    """The WHATWG event-stream parser: dispatched messages, and comment lines."""
    messages: list[dict[str, str]] = []
    comments: list[str] = []
    data: list[str] = []
    event = ""
    last_id = ""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    for line in lines[:-1]:  # the text after the last line break is incomplete
        if line == "":
            if data:
                messages.append(
                    {"id": last_id, "event": event or "message", "data": "\n".join(data)}
                )
            data, event = [], ""
            continue
        if line.startswith(":"):
            comments.append(line[1:].removeprefix(" "))
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            data.append(value)
        elif name == "event":
            event = value
        elif name == "id":
            last_id = value
    return messages, comments


def events(n: int = 4) -> list[RunEvent]:
    samples: list[RunEvent] = [
        RunStarted(seq=1, **BASE),
        RunPhaseChanged(seq=2, phase="planning", **BASE),
        MainLlmDelta(seq=3, text="line one\nline two\r\n\u2028 «quoted» \"x\"", **BASE),
        OperationFinished(
            seq=4, hook="before_main_llm", operation_id="op", operation_name="Op",
            status="skipped", skipped_reason="condition_false", **BASE,
        ),
        RunFinished(seq=5, status="done", **BASE),
    ]  # fmt: skip
    return samples[:n]


@pytest.mark.parametrize("event", events(5), ids=lambda e: e.type)
def test_event_round_trips(event: RunEvent) -> None:
    text = sse_event(event)
    assert text.endswith("\n\n")
    (message,), comments = parse_sse(text)
    assert comments == []
    assert message["id"] == str(event.seq)
    assert message["event"] == event.type
    assert json.loads(message["data"]) == event.to_json_dict()
    assert RunEventAdapter.validate_json(message["data"]) == event
    assert "runId" in message["data"]  # camelCase
    assert ": " not in message["data"].split('"text"')[0]  # compact


@given(data=st.text())
def test_multiline_data_is_split_into_data_fields(data: str) -> None:
    (message,), _ = parse_sse(format_sse(data, event="x", id="7"))
    normalized = data.replace("\r\n", "\n").replace("\r", "\n")
    assert message == {"id": "7", "event": "x", "data": normalized}


def test_format_sse_fields() -> None:
    assert format_sse("a\nb", event="e", id="1", retry_ms=500) == (
        "id: 1\nevent: e\nretry: 500\ndata: a\ndata: b\n\n"
    )


@pytest.mark.parametrize("bad", [{"event": "a\nb"}, {"id": "1\r"}, {"id": "a\0b"}])
def test_fields_that_would_break_framing_are_refused(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="one line"):
        format_sse("x", **bad)


def test_comments() -> None:
    assert sse_comment() == ": keep-alive\n\n"
    messages, comments = parse_sse(sse_comment("two\nlines"))
    assert messages == []
    assert comments == ["two", "lines"]


async def paced(items: list[RunEvent], pause: float) -> AsyncIterator[RunEvent]:
    for index, item in enumerate(items):
        if index:
            await anyio.sleep(pause)
        yield item


async def collect(source: AsyncIterator[RunEvent], keepalive_s: float) -> list[str]:
    async with aclosing(sse_stream(source, keepalive_s=keepalive_s)) as chunks:
        return [chunk async for chunk in chunks]


@pytest.mark.anyio
async def test_stream_ids_are_seqs_and_no_keepalive_when_busy() -> None:
    chunks = await collect(paced(events(5), 0), keepalive_s=10)
    messages, comments = parse_sse("".join(chunks))
    assert comments == []
    assert [m["id"] for m in messages] == ["1", "2", "3", "4", "5"]
    assert [RunEventAdapter.validate_json(m["data"]) for m in messages] == events(5)


@pytest.mark.anyio
async def test_keepalive_when_the_source_is_idle() -> None:
    chunks = await collect(paced(events(2), 0.25), keepalive_s=0.04)
    assert chunks[0].startswith("id: 1\n")
    assert chunks[-1].startswith("id: 2\n")
    idle = chunks[1:-1]
    assert len(idle) >= 2
    assert set(idle) == {": keep-alive\n\n"}


@pytest.mark.anyio
async def test_source_errors_surface_after_the_events_before_them() -> None:
    async def failing() -> AsyncIterator[RunEvent]:
        yield events(1)[0]
        raise RuntimeError("source broke")

    seen: list[str] = []
    with pytest.raises(RuntimeError, match="source broke"):
        async with aclosing(sse_stream(failing(), keepalive_s=1)) as chunks:
            seen.extend([chunk async for chunk in chunks])
    assert seen == []  # the comprehension never finished; the event before was sent

    got: list[str] = []

    async def drain() -> None:
        async with aclosing(sse_stream(failing(), keepalive_s=1)) as chunks:
            async for chunk in chunks:
                got.append(chunk)  # noqa: PERF401 - the loop must see chunks before the error

    with pytest.raises(RuntimeError, match="source broke"):
        await drain()
    assert len(got) == 1


@pytest.mark.anyio
async def test_closing_early_stops_the_source() -> None:
    finished = anyio.Event()

    async def endless() -> AsyncIterator[RunEvent]:
        try:
            seq = 0
            while True:
                seq += 1
                yield RunPhaseChanged(seq=seq, phase="planning", **BASE)
        finally:
            finished.set()

    async with aclosing(sse_stream(endless(), keepalive_s=1)) as chunks:
        async for chunk in chunks:
            if chunk.startswith("id: 3\n"):
                break
    with anyio.fail_after(2):
        await finished.wait()
    assert finished.is_set(), "closing the SSE stream must close its source"


@pytest.mark.anyio
async def test_keepalive_must_be_positive() -> None:
    with pytest.raises(ValueError, match="keepalive_s"):
        await collect(paced([], 0), keepalive_s=0)
