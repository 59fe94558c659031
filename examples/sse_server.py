"""Stream a demo run's events to a browser or curl as Server-Sent Events.

Standard library only: ``http.server`` answers ``GET /events`` by starting one offline
run and writing its events as they happen, framed by :func:`opsrun.report.sse_stream`. The server
handles a bounded number of requests and stops by itself; importing this module does
not listen.

Run: ``.venv/bin/python examples/sse_server.py --port 8000 --requests 3``
then: ``curl -N http://127.0.0.1:8000/events``
"""

from __future__ import annotations

import argparse
import math
from contextlib import aclosing
from functools import partial
from http.server import BaseHTTPRequestHandler, HTTPServer

import anyio
from anyio.streams.memory import MemoryObjectSendStream

from opsrun import (
    AppendAfterLastUser,
    Hook,
    InMemoryStores,
    OperationCatalog,
    OperationConfig,
    OperationContext,
    OperationProfile,
    OperationResult,
    ProfileOperation,
    Runner,
    RunRequest,
)
from opsrun.report import sse_stream
from opsrun.testing import OfflineMainLlm

IDLE_TIMEOUT_S = 60.0
"""The server stops after this long without a request."""


def demo_runner() -> Runner:
    """A runner with one before-LLM operation and an offline main LLM that streams."""
    catalog = OperationCatalog()

    @catalog.function("mood", name="Mood guard")
    async def mood(ctx: OperationContext) -> OperationResult:
        await anyio.sleep(0.05)
        return OperationResult.done(prompt=[AppendAfterLastUser(content="Be brief.")])

    profile = OperationProfile(
        profile_id="chat",
        name="Chat",
        operation_profile_session_id="s1",
        operations=(
            ProfileOperation(
                operation_id="mood",
                config=OperationConfig(hooks=(Hook.BEFORE_MAIN_LLM,), order=10),
            ),
        ),
    )
    return Runner(
        catalog=catalog,
        stores=InMemoryStores([profile]),
        main_llm=OfflineMainLlm(chunk_size=8, delay=0.02),
    )


async def stream_demo_run(write: MemoryObjectSendStream[str], *, keepalive_s: float) -> None:
    """Run one demo turn and send its SSE text, chunk by chunk, into ``write``.

    ``runner.stream`` yields this run's events; if the client leaves, the task group
    is cancelled, the run is recorded ``aborted`` (reason ``cancelled``) and its turn can
    be retried.
    """
    runner = demo_runner()
    request = RunRequest(trigger="generate", chat_id="c1", profile_id="chat", user_message="Hi!")
    async with (
        write,
        runner.stream(request) as events,
        aclosing(sse_stream(events, keepalive_s=keepalive_s)) as chunks,
    ):
        async for chunk in chunks:
            await write.send(chunk)


class SseHandler(BaseHTTPRequestHandler):
    """``GET /events`` streams one demo run; anything else is 404."""

    keepalive_s = 15.0

    def do_GET(self) -> None:
        """Answer one request."""
        if self.path != "/events":
            self.send_error(404, "try GET /events")
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        anyio.run(self._stream)

    async def _stream(self) -> None:
        write, read = anyio.create_memory_object_stream[str](math.inf)
        async with anyio.create_task_group() as tg:
            tg.start_soon(partial(stream_demo_run, write, keepalive_s=self.keepalive_s))
            async with read:
                async for chunk in read:
                    try:  # a blocking socket write: fine for a one-request-at-a-time demo
                        self.wfile.write(chunk.encode("utf-8"))
                        self.wfile.flush()
                    except (BrokenPipeError, ConnectionResetError):
                        tg.cancel_scope.cancel()  # the client left: stop the run's stream
                        return

    def log_message(self, format: str, *args: object) -> None:
        """Keep the demo quiet."""


def make_server(host: str = "127.0.0.1", port: int = 0) -> HTTPServer:
    """Bind a server (port 0 picks a free port); it does not serve until asked."""
    server = HTTPServer((host, port), SseHandler)
    server.timeout = IDLE_TIMEOUT_S
    return server


def serve(server: HTTPServer, *, requests: int) -> None:
    """Wait for at most ``requests`` requests (each wait ends after the idle timeout)."""
    with server:
        for _ in range(requests):
            server.handle_request()


def main() -> None:
    """Parse arguments and serve."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--requests", type=int, default=1, help="stop after this many")
    args = parser.parse_args()
    server = make_server(port=args.port)
    host, port = server.server_address[:2]
    print(f"serving http://{host!s}:{port}/events for {args.requests} request(s)")
    serve(server, requests=args.requests)


if __name__ == "__main__":
    main()
