"""Server-Sent Events framing for run events .

Each run event becomes one SSE message: ``id`` is the event's ``seq`` (so a client can
send ``Last-Event-ID`` and feed :class:`EventLog`), ``event`` its
``type``, ``data`` its compact camelCase JSON. Idle streams carry ``: keep-alive``
comments so proxies do not close them.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncGenerator, AsyncIterable
from dataclasses import dataclass

import anyio
from anyio.streams.memory import MemoryObjectSendStream

from ..model import RunEvent

__all__ = ["format_sse", "sse_comment", "sse_event", "sse_stream"]

_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def _one_line(name: str, value: str) -> str:
    if _LINE_BREAK.search(value) or "\0" in value:
        raise ValueError(f"SSE {name} must be one line without NUL, got {value!r}")
    return value


def format_sse(
    data: str, *, event: str | None = None, id: str | None = None, retry_ms: int | None = None
) -> str:
    """Frame one SSE message: optional ``id``/``event``/``retry``, ``data`` lines, blank line.

    Every line of ``data`` (split on CRLF, CR or LF, as the SSE parser splits) gets its
    own ``data:`` field, so the client rebuilds ``data`` with LF line breaks.

    Raises:
        ValueError: if ``event`` or ``id`` spans lines or ``id`` contains NUL.
    """
    fields: list[str] = []
    if id is not None:
        fields.append(f"id: {_one_line('id', id)}")
    if event is not None:
        fields.append(f"event: {_one_line('event', event)}")
    if retry_ms is not None:
        fields.append(f"retry: {int(retry_ms)}")
    fields.extend(f"data: {line}" for line in _LINE_BREAK.split(data))
    return "\n".join(fields) + "\n\n"


def sse_event(event: RunEvent) -> str:
    """Frame a run event: ``id: <seq>``, ``event: <type>``, ``data: <camelCase JSON>``.

    The JSON is the event's ``to_json_dict()`` (camelCase, None fields left out) without
    spaces; ``RunEventAdapter.validate_json(data)`` gives the event back.
    """
    data = json.dumps(event.to_json_dict(), ensure_ascii=False, separators=(",", ":"))
    return format_sse(data, event=event.type, id=str(event.seq))


def sse_comment(text: str = "keep-alive") -> str:
    """Frame an SSE comment (``: text``), one comment line per line of ``text``.

    Clients ignore comments; they keep idle connections open.
    """
    return "".join(f": {line}\n" for line in _LINE_BREAK.split(text)) + "\n"


@dataclass(frozen=True, slots=True)
class _Failed:
    error: Exception


async def _pump(
    events: AsyncIterable[RunEvent], send: MemoryObjectSendStream[RunEvent | _Failed]
) -> None:
    iterator = aiter(events)
    async with send:
        try:
            async for event in iterator:
                await send.send(event)
        except Exception as exc:  # handed to the consumer, re-raised there
            await send.send(_Failed(exc))
        finally:
            aclose = getattr(iterator, "aclose", None)
            if aclose is not None:
                with anyio.CancelScope(shield=True):  # even when the stream was closed early
                    await aclose()


async def sse_stream(
    events: AsyncIterable[RunEvent], *, keepalive_s: float = 15.0
) -> AsyncGenerator[str, None]:
    """Frame ``events`` as SSE text, with a keep-alive comment whenever the source is idle.

    A keep-alive is sent after ``keepalive_s`` seconds without output, and again every
    ``keepalive_s`` seconds while the source stays idle. The stream ends when the source
    ends; the source is closed (``aclose``, when it has one) however the stream ends. A
    helper task reads the source so that waiting for a keep-alive never cancels
    it; like any async generator that holds a task group, iterate it from one task to the
    end or close it with ``contextlib.aclosing`` (web frameworks do both).

    Args:
        events: The run events, in ``seq`` order.
        keepalive_s: Idle seconds before a keep-alive comment.

    Raises:
        ValueError: if ``keepalive_s`` is not positive.
        Exception: whatever the source raises, once the events before it are sent.
    """
    if keepalive_s <= 0:
        raise ValueError(f"keepalive_s must be positive, got {keepalive_s}")
    send, receive = anyio.create_memory_object_stream[RunEvent | _Failed](0)
    failure: _Failed | None = None
    async with anyio.create_task_group() as tg:
        tg.start_soon(_pump, events, send)
        try:
            async with receive:
                while True:
                    item: RunEvent | _Failed | None = None
                    with anyio.move_on_after(keepalive_s):
                        try:
                            item = await receive.receive()
                        except anyio.EndOfStream:
                            break
                    if isinstance(item, _Failed):
                        failure = item
                        break
                    chunk = sse_comment() if item is None else sse_event(item)
                    try:
                        yield chunk
                    except GeneratorExit:
                        # Closed early: stop the helper and leave the task group cleanly,
                        # rather than letting it wrap GeneratorExit in an exception group.
                        break
        finally:
            tg.cancel_scope.cancel()
    if failure is not None:
        raise failure.error
