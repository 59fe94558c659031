"""docs/postgres.md's example and examples/chat_postgres.py run as documented."""

from __future__ import annotations

import re
import runpy
import sys
from pathlib import Path

import pytest
from _postgres_support import drop_schema, new_schema, postgres_for_module

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "chat_postgres.py"
DSN = postgres_for_module()


def test_the_example_of_the_docs_runs(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    dsn, schema = DSN, new_schema()
    monkeypatch.setenv("OPSRUN_POSTGRES_DSN", dsn)
    text = (ROOT / "docs" / "postgres.md").read_text(encoding="utf-8")
    first = re.findall(r"```python\n(.*?)```", text, re.S)[0]
    assert 'schema="opsrun_docs"' in first
    code = first.replace('schema="opsrun_docs"', f"schema={schema!r}")
    try:
        exec(compile(code, "docs/postgres.md", "exec"), {"__name__": "docs_example"})
    finally:
        drop_schema(dsn, schema)
    assert capsys.readouterr().out == (
        "run.started run.finished\n['Hello!', 'OK', 'Still there?', 'OK']\n"
    )


def test_the_chat_postgres_example_runs(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    dsn, schema = DSN, new_schema()
    monkeypatch.setenv("OPSRUN_POSTGRES_DSN", dsn)
    monkeypatch.setattr(sys, "argv", ["chat_postgres.py", schema])
    try:
        runpy.run_path(str(EXAMPLE), run_name="__main__")
    finally:
        drop_schema(dsn, schema)
    out = capsys.readouterr().out.splitlines()
    assert out[:2] == ["turn 1: run done", "turn 2, followed from the other store object:"]
    followed = out[2 : out.index(next(line for line in out if line.startswith("history")))]
    assert [int(line.split()[0]) for line in followed] == list(range(1, len(followed) + 1))
    assert followed[0].split()[1] == "run.started"
    assert followed[-1].split()[1] == "run.finished"
    assert any("main_llm.delta" in line for line in followed)
    history = out[len(followed) + 3 :]
    assert [line.split(":")[0].strip() for line in history] == ["user", "assistant"] * 2
    assert history[-1].endswith("You asked me to remember 'teal'.")
