"""What the local fake provider servers share: a threaded HTTP server on 127.0.0.1,
its lifecycle, the requests it recorded and the connections it tracks."""

from __future__ import annotations

import contextlib
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, ClassVar, Generic, Protocol, Self, TypeVar

__all__ = ["FakeHandler", "LocalFake"]


class _Recorded(Protocol):
    @property
    def closed_early(self) -> threading.Event: ...


R = TypeVar("R", bound=_Recorded)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, handler: type[FakeHandler], fake: LocalFake[Any]) -> None:
        self.fake = fake
        super().__init__(("127.0.0.1", 0), handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away mid-request is normal here; anything else is reported."""
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)


class FakeHandler(BaseHTTPRequestHandler):
    """Serves one connection; the server's fake tracks it while it is open."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # small writes (headers, chunks) leave at once
    server: _Server

    def setup(self) -> None:
        super().setup()
        self.server.fake._track(self.connection, add=True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.fake._track(self.connection, add=False)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: tests read the recorded requests instead of a log."""


class LocalFake(Generic[R]):
    """A fake server's lifecycle (a context manager), its records and its connections."""

    handler: ClassVar[type[FakeHandler]]
    """The request handler subclasses serve with."""

    def __init__(self) -> None:
        self.requests: list[R] = []
        """Every request received, in arrival order."""
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._connections: set[socket.socket] = set()
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> Self:
        """Serve in a background thread (the context manager calls this).

        Raises:
            OSError: no local port could be bound.
        """
        if self._httpd is None:
            self._stopping.clear()
            self._httpd = _Server(self.handler, self)
            self._thread = threading.Thread(
                target=self._httpd.serve_forever,
                kwargs={"poll_interval": 0.01},
                name=type(self).__name__,
                daemon=True,
            )
            self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving, drop open connections and free the port."""
        httpd, thread = self._httpd, self._thread
        if httpd is None:
            return
        self._stopping.set()
        httpd.shutdown()
        with self._lock:
            connections = list(self._connections)
        for conn in connections:
            drop(conn)
        httpd.server_close()
        if thread is not None:
            thread.join()
        self._httpd = self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _root(self) -> str:
        """``http://127.0.0.1:<port>``.

        Raises:
            RuntimeError: the server is not started.
        """
        if self._httpd is None:
            raise RuntimeError(f"the {type(self).__name__} is not started")
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    @property
    def last_request(self) -> R | None:
        """The most recent request, or None."""
        with self._lock:
            return self.requests[-1] if self.requests else None

    def wait_closed_early(self, index: int = -1, timeout: float = 5.0) -> bool:
        """Block until the client closed request ``index``'s stream early (True) or
        ``timeout`` seconds passed (False). In async tests call it in a worker thread
        (``anyio.to_thread.run_sync``)."""
        with self._lock:
            recorded = self.requests[index]
        return recorded.closed_early.wait(timeout)

    def _track(self, conn: socket.socket, *, add: bool) -> None:
        with self._lock:
            if add:
                self._connections.add(conn)
            else:
                self._connections.discard(conn)

    def _sleep(self, seconds: float) -> bool:
        """Wait; False when the server is stopping."""
        return not (seconds > 0 and self._stopping.wait(seconds)) and not self._stopping.is_set()


def drop(conn: socket.socket) -> None:
    """Shut a connection down both ways (nothing when the client went first)."""
    with contextlib.suppress(OSError):
        conn.shutdown(socket.SHUT_RDWR)
