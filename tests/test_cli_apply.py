"""``opsrun plan apply`` and ``opsrun plan undo`` through the real entry point."""

from __future__ import annotations

import io
import json
from pathlib import Path

from opsrun.cli import main


def test_apply_then_undo_through_main(tmp_path: Path) -> None:
    root = tmp_path / "project"
    root.mkdir()
    (root / "keep.txt").write_text("keep\n", encoding="utf-8")
    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps(
            {
                "actions": [{"kind": "CREATE_FILE", "path": "src/new.py", "content": "x = 1\n"}],
                "summary": "add a module",
            }
        ),
        encoding="utf-8",
    )
    out = io.StringIO()
    assert main(["plan", "apply", str(plan), "--root", str(root)], stdout=out) == 0
    assert "+x = 1" in out.getvalue()
    assert (root / "src" / "new.py").read_text(encoding="utf-8") == "x = 1\n"

    assert main(["plan", "undo", "--root", str(root)], stdout=io.StringIO()) == 0
    assert not (root / "src" / "new.py").exists()
    assert (root / "keep.txt").read_text(encoding="utf-8") == "keep\n"


def test_apply_refuses_an_invalid_plan_and_writes_nothing(tmp_path: Path) -> None:
    root = tmp_path / "project"
    root.mkdir()
    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps({"actions": [{"kind": "CREATE_FILE", "path": "../escape.txt", "content": "x"}]}),
        encoding="utf-8",
    )
    assert main(["plan", "apply", str(plan), "--root", str(root)], stdout=io.StringIO()) == 1
    assert not (tmp_path / "escape.txt").exists()
    assert [p.name for p in root.iterdir() if p.name != ".opsrun"] == []
