"""docs/postgres.md's migration example runs as pasted (against the test server)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from _postgres_support import drop_schema, new_schema, postgres_for_module

from opsrun.stores.postgres import SCHEMA_VERSION

DOC = Path(__file__).resolve().parents[2] / "docs" / "postgres.md"
DSN = postgres_for_module()


def test_the_migration_example_migrates_then_opens_without_migrating(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    [block] = [b for b in blocks if ".migrate()" in b]
    schema = new_schema()
    assert block.count('schema="opsrun"') == 2
    code = block.replace('schema="opsrun"', f"schema={schema!r}")
    monkeypatch.setenv("OPSRUN_POSTGRES_DSN", DSN)
    try:
        exec(compile(code, "docs/postgres.md", "exec"), {"__name__": "docs_example"})
    finally:
        drop_schema(DSN, schema)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"schema version {SCHEMA_VERSION}"
    assert lines[1].startswith("opened PostgresStores(")
    assert f"schema={schema!r}" in lines[1]
