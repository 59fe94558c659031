"""The ``plan apply`` / ``plan undo`` / ``plan recover`` command handlers."""

from __future__ import annotations

import argparse
import io
import json
import sys
from pathlib import Path

import pytest

from opsrun.protocol import sha256_hex
from opsrun.protocol._apply_cli import add_apply_commands


def run(argv: list[str]) -> tuple[int, str]:
    parser = argparse.ArgumentParser(prog="opsrun")
    commands = parser.add_subparsers(dest="command", required=True)
    plan = commands.add_parser("plan")
    add_apply_commands(plan.add_subparsers(dest="plan_command", required=True))
    args = parser.parse_args(argv)
    out = io.StringIO()
    code: int = args.func(args, io.StringIO(), out)
    return code, out.getvalue()


@pytest.fixture
def project(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "p"
    root.mkdir()
    (root / "a.py").write_text("x = 1\ny = 2\n")
    answer = {
        "actions": [
            {
                "kind": "PATCH_FILE",
                "path": "a.py",
                "base_sha256": sha256_hex(b"x = 1\ny = 2\n"),
                "patch": "--- a/a.py\n+++ b/a.py\n@@ -1,2 +1,2 @@\n x = 1\n-y = 2\n+y = 3\n",
            }
        ],
        "summary": "bump y",
    }
    plan_file = tmp_path / "answer.json"
    plan_file.write_text(json.dumps(answer))
    return root, plan_file


def test_dry_run_prints_the_diff_and_changes_nothing(project: tuple[Path, Path]) -> None:
    root, plan_file = project
    code, out = run(["plan", "apply", str(plan_file), "--root", str(root), "--dry-run"])
    assert code == 0
    assert "-y = 2\n+y = 3\n" in out
    assert (root / "a.py").read_text() == "x = 1\ny = 2\n"


def test_apply_then_undo(project: tuple[Path, Path]) -> None:
    root, plan_file = project
    check = f"{sys.executable} -c \"print('checked')\""
    code, out = run(["plan", "apply", str(plan_file), "--root", str(root), "--check", check])
    assert code == 0, out
    assert "checked" in out
    assert "applied: 1 path(s)" in out
    assert (root / "a.py").read_text() == "x = 1\ny = 3\n"
    code, out = run(["plan", "undo", "--root", str(root)])
    assert code == 0, out
    assert (root / "a.py").read_text() == "x = 1\ny = 2\n"
    code, out = run(["plan", "undo", "--root", str(root)])
    assert code == 1
    assert "ERR_NOTHING_TO_UNDO" in out
    code, out = run(["plan", "recover", "--root", str(root)])
    assert code == 0
    assert out.startswith("recover: nothing")


def test_failed_check_exits_1_and_rolls_back(project: tuple[Path, Path]) -> None:
    root, plan_file = project
    check = f'{sys.executable} -c "raise SystemExit(4)"'
    code, out = run(["plan", "apply", str(plan_file), "--root", str(root), "--check", check])
    assert code == 1
    assert "ERR_CHECK_FAILED" in out
    assert (root / "a.py").read_text() == "x = 1\ny = 2\n"


def test_usage_and_invalid_plans(project: tuple[Path, Path], tmp_path: Path) -> None:
    root, _ = project
    assert run(["plan", "apply", str(tmp_path / "missing.json"), "--root", str(root)])[0] == 2
    bad = tmp_path / "bad.json"
    bad.write_text("this is not a plan")
    code, out = run(["plan", "apply", str(bad), "--root", str(root)])
    assert code == 1
    assert out.startswith("invalid: ERR_")
