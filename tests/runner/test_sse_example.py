"""examples/sse_server.py streams a whole demo run over HTTP as parseable SSE."""

from __future__ import annotations

import importlib.util
import threading
import urllib.error
import urllib.request
from pathlib import Path
from types import ModuleType

import pytest

from opsrun.model import RunEventAdapter

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sse_server.py"


def parse_sse(text: str) -> list[dict[str, str]]:
    """Dispatched SSE messages (id, event, data), comments skipped."""
    messages: list[dict[str, str]] = []
    fields: dict[str, list[str]] = {}
    for line in text.split("\n")[:-1]:
        if not line:
            if "data" in fields:
                messages.append({k: "\n".join(v) for k, v in fields.items()})
            fields = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(":")
            fields.setdefault(name, []).append(value.removeprefix(" "))
    return messages


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sse_server_example", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # importing must not start a server
    return module


def fetch(path: str) -> tuple[int, str, str]:
    example = load_example()
    server = example.make_server(port=0)
    port = server.server_address[1]
    thread = threading.Thread(target=example.serve, args=(server,), kwargs={"requests": 1})
    thread.start()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=20) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, "", ""
    finally:
        thread.join(timeout=20)
        assert not thread.is_alive()


def test_events_endpoint_streams_the_run() -> None:
    status, content_type, body = fetch("/events")
    assert status == 200
    assert content_type.startswith("text/event-stream")
    messages = parse_sse(body)
    events = [RunEventAdapter.validate_json(m["data"]) for m in messages]
    assert [m["id"] for m in messages] == [str(i) for i in range(1, len(messages) + 1)]
    assert [m["event"] for m in messages] == [e.type for e in events]
    assert events[0].type == "run.started"
    assert events[-1].type == "run.finished"
    assert events[-1].status == "done"
    assert any(e.type == "main_llm.delta" for e in events)


@pytest.mark.parametrize("path", ["/", "/nope"])
def test_other_paths_are_404(path: str) -> None:
    assert fetch(path)[0] == 404
