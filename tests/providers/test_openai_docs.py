"""docs/providers.md's OpenAI examples run as documented."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def blocks() -> list[str]:
    text = (ROOT / "docs" / "providers.md").read_text(encoding="utf-8")
    return re.findall(r"```python\n(.*?)```", text, re.S)


def test_connecting_a_model_builds_a_runner(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    connect = next(b for b in blocks() if "runner = Runner(" in b)
    scope: dict[str, object] = {"__name__": "docs_example"}
    exec(compile(connect, "docs/providers.md", "exec"), scope)
    assert scope["runner"].main_llm is scope["model"]  # type: ignore[attr-defined]


def test_the_fake_server_example_prints_what_it_says() -> None:
    example = next(b for b in blocks() if "FakeOpenAIServer([" in b)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(example, "docs/providers.md", "exec"), {"__name__": "docs_example"})
    assert out.getvalue().splitlines() == [
        "- the door is locked",
        "2.0",
        "[{'role': 'user', 'content': 'notes?'}]",
    ]
