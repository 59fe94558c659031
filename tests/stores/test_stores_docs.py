"""docs/stores.md's example and examples/chat_sqlite.py run as documented."""

from __future__ import annotations

import re
import runpy
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_the_sqlite_example_of_the_docs_runs(capsys: pytest.CaptureFixture[str]) -> None:
    text = (ROOT / "docs" / "stores.md").read_text(encoding="utf-8")
    first = re.findall(r"```python\n(.*?)```", text, re.S)[0]
    exec(compile(first, "docs/stores.md", "exec"), {"__name__": "docs_example"})
    assert capsys.readouterr().out == "['Hello!', 'OK', 'Still there?', 'OK']\n"


def test_the_chat_app_example_of_the_docs_runs(capsys: pytest.CaptureFixture[str]) -> None:
    text = (ROOT / "docs" / "stores.md").read_text(encoding="utf-8")
    example = re.findall(r"```python\n(.*?)```", text, re.S)[1]
    exec(compile(example, "docs/stores.md", "exec"), {"__name__": "docs_example"})
    assert capsys.readouterr().out.splitlines() == [
        "[('alice', 4), ('bob', 2)]",
        "1 1 None",
        "0",
        "1",
    ]


def test_the_chat_sqlite_example_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "chat.db"
    monkeypatch.setattr(sys, "argv", ["chat_sqlite.py", str(db)])
    runpy.run_path(str(ROOT / "examples" / "chat_sqlite.py"), run_name="__main__")
    out = capsys.readouterr().out.splitlines()
    assert out[:3] == [
        "run done: the model saw 1 message(s)",
        "run done: the model saw 3 message(s)",
        "history of chat 'demo' in chat.db:",
    ]
    assert [line.split(":")[0].strip() for line in out[3:]] == ["user", "assistant"] * 2
    assert db.exists()


def test_every_store_error_code_is_documented() -> None:
    """Each code the stores raise has a row in docs/error-codes.md's store table."""
    source = "".join(p.read_text() for p in (ROOT / "src/opsrun/stores").rglob("*.py"))
    raised = set(re.findall(r'code\s*=\s*"([a-z_]+)"', source))
    errors = (ROOT / "src/opsrun/errors.py").read_text()
    store_errors = errors[errors.index("class StoreError") : errors.index("class RunError")]
    raised |= set(re.findall(r'default_code = "([a-z_]+)"', store_errors))
    text = (ROOT / "docs" / "error-codes.md").read_text(encoding="utf-8")
    table = text[text.index("## Store errors") :]
    documented = set(re.findall(r"^\| `([a-z_]+)` \|", table, re.M))
    assert {"bad_cursor", "branch_busy", "not_found", "store_error"} <= raised
    assert raised <= documented
