"""The plan commands tell the truth: check agrees with apply, user errors are clear."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from opsrun.cli import main
from opsrun.protocol import parse_plan, sha256_hex, validate_plan

APP = "def f():\n    return 1\n\n\ndef g():\n    return 2\n"


def plan_file(tmp_path: Path, *actions: dict[str, object]) -> Path:
    path = tmp_path / "answer.json"
    path.write_text(json.dumps({"actions": list(actions), "summary": "s"}))
    return path


def patch(body: str, path: str = "app.py") -> dict[str, object]:
    return {"kind": "PATCH_FILE", "path": path, "base_sha256": sha256_hex(APP.encode()),
            "patch": body}  # fmt: skip


STALE = "--- a/app.py\n+++ b/app.py\n@@ -1,2 +1,2 @@\n def f():\n-    return 9\n+    return 3\n"
TWO_FILES = STALE + "--- a/other.py\n+++ b/other.py\n@@ -1 +1 @@\n-x\n+y\n"
OTHER_HEADER = STALE.replace("a/app.py", "a/lib.py").replace("b/app.py", "b/lib.py")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    (project / "app.py").write_text(APP)
    (project / "old.txt").write_text("bye\n")
    return project


@pytest.mark.parametrize(
    "action",
    [
        patch(STALE),
        patch(TWO_FILES),
        patch(OTHER_HEADER),
        {"kind": "DELETE_FILE", "path": "old.txt"},
    ],
    ids=["stale-context", "two-files", "other-header", "unconfirmed-delete"],
)
def test_check_with_a_root_reports_what_apply_refuses(
    root: Path, action: dict[str, object], capsys: pytest.CaptureFixture[str]
) -> None:
    answer = plan_file(root.parent, action)
    assert main(["plan", "check", str(answer), "--root", str(root), "--json"]) == 1
    checked = json.loads(capsys.readouterr().out)
    assert main(["plan", "apply", str(answer), "--root", str(root), "--json"]) == 1
    applied = json.loads(capsys.readouterr().out)
    assert checked["ok"] is False
    assert applied["error"]["code"] in {v["code"] for v in checked["violations"]}
    assert (root / "app.py").read_text() == APP
    assert (root / "old.txt").exists()


def test_check_passes_a_plan_that_applies(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = (
        "--- a/app.py\n+++ b/app.py\n@@ -1,3 +1,3 @@\n def f():\n-    return 1\n+    return 3\n \n"
    )
    answer = plan_file(root.parent, patch(good))
    assert main(["plan", "check", str(answer), "--root", str(root)]) == 0
    assert "valid: 1 actions, 0 findings" in capsys.readouterr().out
    delete = plan_file(root.parent, {"kind": "DELETE_FILE", "path": "old.txt"})
    assert main(["plan", "check", str(delete), "--root", str(root), "--allow-delete"]) == 0


@pytest.mark.parametrize("command", ["check", "apply", "undo", "recover"])
@pytest.mark.parametrize("bad", ["missing", "a-file"])
def test_a_bad_root_is_a_usage_error_without_a_traceback(
    root: Path, command: str, bad: str, capsys: pytest.CaptureFixture[str]
) -> None:
    target = root / "nope" if bad == "missing" else root / "app.py"
    answer = plan_file(root.parent, {"kind": "CREATE_DIR", "path": "d"})
    argv = ["plan", command, *([str(answer)] if command in ("check", "apply") else [])]
    assert main([*argv, "--root", str(target)]) == 2
    err = capsys.readouterr().err
    expected = "does not exist" if bad == "missing" else "is not a directory"
    assert f"--root {str(target)!r} {expected}" in err
    assert "Traceback" not in err


def test_a_bad_root_in_a_real_process(root: Path) -> None:
    answer = plan_file(root.parent, {"kind": "CREATE_DIR", "path": "d"})
    done = subprocess.run(
        [sys.executable, "-m", "opsrun.cli", "plan", "apply", str(answer), "--root", "nowhere"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert "--root 'nowhere' does not exist" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_failing_check_shows_its_command_and_output(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    answer = plan_file(root.parent, {"kind": "CREATE_DIR", "path": "d"})
    script = "import sys; print('collected 3 items'); print('FAILED test_x - boom'); sys.exit(3)"
    check = f'{sys.executable} -c "{script}"'
    code = main(["plan", "apply", str(answer), "--root", str(root), "--check", check])
    out = capsys.readouterr().out
    assert code == 1
    assert "ERR_CHECK_FAILED" in out
    assert "exited with status 3" in out
    assert "-c 'import sys; print(" in out  # the full command
    assert "FAILED test_x - boom" in out
    assert not (root / "d").exists()


def test_a_check_output_is_masked(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    key = "sk-proj-" + "Zx9Qw8Er7Ty6Ui5Op4As3Df2" * 2
    answer = plan_file(root.parent, {"kind": "CREATE_DIR", "path": "d"})
    check = f"{sys.executable} -c \"print('token {key}'); raise SystemExit(1)\""
    assert main(["plan", "apply", str(answer), "--root", str(root), "--check", check]) == 1
    out = capsys.readouterr().out
    assert key not in out
    assert "[REDACTED]" in out


def test_deletes_are_refused_before_any_diff(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (root / "big.txt").write_text("".join(f"line {i}\n" for i in range(150)))
    answer = plan_file(root.parent, {"kind": "DELETE_FILE", "path": "big.txt"})
    assert main(["plan", "apply", str(answer), "--root", str(root)]) == 1
    out = capsys.readouterr().out
    assert "line 10" not in out  # no diff first
    assert "--allow-delete" in out
    assert "allow_delete=True" not in out
    assert "error: ERR_DELETE_NOT_CONFIRMED [action 0, 'big.txt']" in out
    assert (root / "big.txt").exists()


def test_apply_errors_name_the_action_and_path_like_check(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    answer = plan_file(root.parent, {"kind": "CREATE_DIR", "path": "ok"}, patch(STALE))
    assert main(["plan", "apply", str(answer), "--root", str(root)]) == 1
    applied = capsys.readouterr().out
    assert main(["plan", "check", str(answer), "--root", str(root)]) == 1
    checked = capsys.readouterr().out
    line = next(x for x in checked.splitlines() if x.startswith("error: "))
    assert "[action 1, 'app.py']" in line
    assert line in applied


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_the_journal_folder_stays_out_of_git_status(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    answer = plan_file(root.parent, {"kind": "CREATE_FILE", "path": "new.py", "content": "x\n"})
    assert main(["plan", "apply", str(answer), "--root", str(root)]) == 0
    (root / ".opsrun" / "project.json").write_text("{}\n")
    status = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    listed = {line[3:] for line in status.splitlines()}
    assert "new.py" in listed
    assert ".opsrun/project.json" in listed  # the shared preferences may be committed
    assert not any(p.startswith(".opsrun/") and p != ".opsrun/project.json" for p in listed)


def test_a_base_hash_of_lf_text_for_a_crlf_file_says_so(root: Path) -> None:
    crlf = APP.replace("\n", "\r\n").encode()
    (root / "app.py").write_bytes(crlf)
    action = patch(
        "--- a/app.py\n+++ b/app.py\n@@ -1,3 +1,3 @@\n def f():\n-    return 1\n+    return 3\n \n"
    )
    action["base_sha256"] = sha256_hex(APP.encode())  # the LF text's hash
    plan = parse_plan(json.dumps({"actions": [action], "summary": "s"}))
    (found,) = [v for v in validate_plan(plan, root=root) if v.code == "ERR_BASE_MISMATCH"]
    assert "CRLF line endings turned into LF" in found.message


def test_apply_json_and_the_version_flags(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    answer = plan_file(root.parent, {"kind": "CREATE_DIR", "path": "d"})
    assert main(["plan", "apply", str(answer), "--root", str(root), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["ok"] is True
    assert result["outcome"] == "applied"
    assert result["changed"] == ["d"]
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("opsrun ")
    assert main(["plan", "check", str(answer), "--protocol", "1"]) == 0


def test_raw_newlines_in_strings_are_named_and_repaired(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    answer = root.parent / "answer.txt"
    answer.write_text(
        '{"actions": [{"kind": "CREATE_FILE", "path": "a.py", "content": "x = 1\ny = 2\n"}]}'
    )
    assert main(["plan", "check", str(answer), "--strict"]) == 1
    strict = capsys.readouterr().out
    assert "ERR_INVALID_JSON" in strict
    assert "line 1, column" in strict
    assert "'actions' is a required property" not in strict
    assert main(["plan", "check", str(answer), "--json"]) == 0
    repaired = json.loads(capsys.readouterr().out)
    assert repaired["ok"] is True
    assert repaired["repairs"]
    assert main(["plan", "check", str(answer)]) == 0
    assert "repaired: escaped raw control characters" in capsys.readouterr().out


def test_relocated_hunks_are_reported_not_silent(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (root / "app.py").write_text("# header\n" * 3 + APP)
    moved = (
        "--- a/app.py\n+++ b/app.py\n@@ -1,3 +1,3 @@\n def f():\n-    return 1\n+    return 3\n \n"
    )
    answer = plan_file(root.parent, patch(moved))
    answer.write_text(
        answer.read_text().replace(
            sha256_hex(APP.encode()), sha256_hex(("# header\n" * 3 + APP).encode())
        )
    )
    assert main(["plan", "check", str(answer), "--root", str(root)]) == 0
    checked = capsys.readouterr().out
    assert "note: app.py hunk 1 applied at line 4 (stated 1, offset +3" in checked
    assert main(["plan", "apply", str(answer), "--root", str(root)]) == 0
    assert "note: app.py hunk 1 applied at line 4 (stated 1, offset +3" in capsys.readouterr().out
