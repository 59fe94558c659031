"""One run's events as an async iterator, for a web handler that streams them (SSE)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import suppress

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from .._logs import run_logger
from ..errors import OpsrunError, RunError
from ..model import RunEvent, RunResult
from ..ports import EventSink

__all__ = ["BUFFER", "RunEvents", "Tee"]

_log = run_logger("opsrun.runner")

BUFFER = 256
"""Events buffered for a slow reader before the run's event delivery waits for it."""


class RunEvents:
    """The events of one run in ``seq`` order, then its :attr:`result`.

    Iterate it inside ``async with runner.stream(request) as events``; the iteration ends
    when the run is finished. Leaving the ``async with`` block before that aborts the
    run, which is then recorded ``aborted`` with reason ``cancelled``.
    """

    def __init__(self, receive: MemoryObjectReceiveStream[RunEvent]) -> None:
        self._receive = receive
        self._result: RunResult | None = None
        self._error: BaseException | None = None
        self._tee: Tee | None = None

    def __aiter__(self) -> RunEvents:
        return self

    async def __anext__(self) -> RunEvent:
        try:
            return await self._receive.receive()
        except anyio.EndOfStream:
            if self._error is not None:
                raise self._error from None
            raise StopAsyncIteration from None

    async def collect(
        self,
        send: MemoryObjectSendStream[RunEvent],
        run: Callable[[EventSink], Awaitable[RunResult]],
        sink: EventSink | None,
    ) -> None:
        """Execute ``run`` with a sink feeding this reader (and ``sink``); keep its result.

        An error of the run is kept too: the reader gets it at the end of the events.
        """
        tee = self._tee = Tee(send, sink)
        async with send:
            try:
                self._result = await run(tee)
            except Exception as exc:  # handed to the reader as it iterates
                self._error = exc

    async def settle(self, load: Callable[[str], Awaitable[RunResult]]) -> None:
        """After the reader left early and the run was aborted: keep its stored result
        (``load(run_id)``), if the run had started. A store that fails here leaves
        :attr:`result` unset (the run is recorded all the same)."""
        run_id = self._tee.run_id if self._tee is not None else None
        if self.finished or run_id is None:
            return
        try:
            self._result = await load(run_id)
        except OpsrunError:
            _log.warning("run %s: its result could not be read after the reader left", run_id)

    @property
    def result(self) -> RunResult:
        """The run's result, once every event was read or the ``async with`` block was
        left (a run left early is recorded ``aborted``, reason ``cancelled``).

        Raises:
            RunError: the run is not finished yet, or it failed before it started (code
                ``run_not_finished``).
        """
        if self._result is None:
            raise RunError(
                "the run is not finished: read its events to the end, or leave the"
                " `async with runner.stream(...)` block first",
                code="run_not_finished",
            )
        return self._result

    @property
    def finished(self) -> bool:
        """True once the run finished (successfully or not)."""
        return self._result is not None or self._error is not None


class Tee:
    """Hands each event to the run's reader, then to the runner's own sink."""

    def __init__(self, send: MemoryObjectSendStream[RunEvent], sink: EventSink | None) -> None:
        self._send = send
        self._sink = sink
        self.run_id: str | None = None
        """The run's id, from its first event."""

    async def emit(self, event: RunEvent) -> None:
        """Deliver ``event`` to the reader (unless it left) and the runner's sink."""
        self.run_id = event.run_id
        # A reader that left has its run aborted; its events still reach the store.
        with suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
            await self._send.send(event)
        if self._sink is not None:
            await self._sink.emit(event)
