"""``opsrun plan check`` and ``opsrun --version``: exit codes and output."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from opsrun.cli import main

VALID = json.dumps({"actions": [{"kind": "CREATE_DIR", "path": "src"}], "summary": "made src"})
INVALID = json.dumps({"actions": [{"kind": "DELETE_FILE", "path": "../etc/passwd"}]})


def run(argv: list[str], stdin: str = "") -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(argv, stdin=io.StringIO(stdin), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def answer(tmp_path: Path) -> Path:
    path = tmp_path / "answer.txt"
    path.write_text(f"Plan:\n```json\n{VALID}\n```\n")
    return path


def test_valid_file_exits_0(answer: Path) -> None:
    code, out, _ = run(["plan", "check", str(answer)])
    assert code == 0
    assert "valid" in out


def test_violations_exit_1_with_json(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(INVALID)
    code, out, _ = run(["plan", "check", str(path), "--json", "--protocol", "1"])
    assert code == 1
    result = json.loads(out)
    assert result["ok"] is False
    assert result["protocol"] == 1
    assert [v["code"] for v in result["violations"]] == ["ERR_PATH_TRAVERSAL"]
    assert result["violations"][0]["action_index"] == 0


def test_parse_error_exits_1(answer: Path) -> None:
    code, out, _ = run(["plan", "check", str(answer), "--strict", "--json"])
    assert code == 1
    assert json.loads(out)["error"]["code"] == "ERR_INVALID_JSON"
    code, out, _ = run(["plan", "check", "-"], stdin="not json")
    assert code == 1
    assert "ERR_INVALID_JSON" in out


def test_stdin_mode_and_root(tmp_path: Path) -> None:
    (tmp_path / "src").write_text("a file, not a directory")
    code, out, _ = run(["plan", "check", "-", "--mode", "apply", "--root", str(tmp_path)], VALID)
    assert code == 1
    assert "ERR_CREATE_EXISTS" in out
    code, _, _ = run(["plan", "check", "-", "--mode", "plan"], VALID)
    assert code == 1
    code, _, _ = run(["plan", "check", "-", "--mode", "plan"], '{"actions": [], "summary": "x"}')
    assert code == 0


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["plan"],
        ["plan", "check"],
        ["plan", "check", "x", "--protocol", "3"],
        ["plan", "check", "x", "--mode", "later"],
        ["plan", "check", "/nonexistent/answer.json"],
    ],
)
def test_usage_errors_exit_2(argv: list[str]) -> None:
    code, _, err = run(argv)
    assert code == 2
    assert err


def test_version_through_main() -> None:
    code, out, err = run(["--version"])
    assert code == 0
    assert out == f"opsrun {metadata.version('opsrun')}\n"
    assert err == ""


def test_version_wins_over_a_missing_command() -> None:
    assert run(["--version", "plan"])[:2] == (0, f"opsrun {metadata.version('opsrun')}\n")


@pytest.mark.parametrize("version", [1, 2])
def test_plan_check_protocol_names_the_protocol_version(answer: Path, version: int) -> None:
    code, out, _ = run(["plan", "check", str(answer), "--json", "--protocol", str(version)])
    assert code == 0
    assert json.loads(out)["protocol"] == version


def test_version_in_a_real_process() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "opsrun.cli", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"opsrun {metadata.version('opsrun')}\n"
