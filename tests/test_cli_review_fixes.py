"""Review findings on the ``opsrun plan`` command line: signals, stdin that is not UTF-8,
malformed traces, ``--check-timeout`` values, secrets in ``--json``, undo conflicts."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from opsrun.cli import main

TOKEN = "ghp_0123456789abcdefghijABCDEFGHIJ0123456789"
CREATE = {
    "actions": [{"kind": "CREATE_FILE", "path": "new.txt", "content": "new\n"}],
    "summary": "s",
}


def run(argv: list[str], stdin: io.TextIOBase | None = None) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(argv, stdin=stdin or io.StringIO(), stdout=out, stderr=err)  # type: ignore[arg-type]
    return code, out.getvalue(), err.getvalue()


def write_plan(tmp_path: Path, doc: object = CREATE) -> Path:
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(doc))
    return plan


def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "f.txt").write_text("old\n")
    return root


def journal_status(root: Path) -> str:
    tx_id = (root / ".opsrun" / "current").read_text().strip()
    return str(
        json.loads((root / ".opsrun" / "tx" / tx_id / "manifest.json").read_text())["status"]
    )


def wait_for(path: Path, process: subprocess.Popen[str]) -> None:
    """Poll until the check wrote ``path`` (or the apply ended, which the caller reports)."""
    while not path.exists() or not path.read_text().strip():
        if process.poll() is not None:
            out, err = process.communicate()
            raise AssertionError(f"apply ended before its check started:\n{out}\n{err}")
        time.sleep(0.02)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


# --- signals while the check runs ----------------------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_signal_during_check_kills_it_rolls_back_and_reports(
    tmp_path: Path, sig: signal.Signals
) -> None:
    root = project(tmp_path)
    pidfile = tmp_path / "check.pid"
    check = f"sh -c 'echo $$ > {pidfile}; exec sleep 600'"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "opsrun.cli",
            "plan",
            "apply",
            str(write_plan(tmp_path)),
            "--root",
            str(root),
            "--check",
            check,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for(pidfile, process)
    check_pid = int(pidfile.read_text())

    process.send_signal(sig)
    out, err = process.communicate()
    orphaned = alive(check_pid)
    if orphaned:  # never leave the check behind, even when the assertions below fail
        os.kill(check_pid, signal.SIGKILL)

    assert not orphaned
    assert process.returncode == 128 + sig, (out, err)
    assert "not applied: ERR_APPLY_CANCELLED" in out
    assert "Traceback" not in err
    assert f"interrupted by {sig.name}" in err
    assert sorted(os.listdir(root)) == [".opsrun", "f.txt"]
    assert journal_status(root) == "rolled_back"


def test_ctrl_c_outside_a_transaction_prints_no_traceback() -> None:
    class Interrupting(io.StringIO):
        def read(self, size: int | None = -1) -> str:
            raise KeyboardInterrupt

    try:
        code, _, err = run(["plan", "check", "-"], stdin=Interrupting())
    except KeyboardInterrupt:
        pytest.fail("KeyboardInterrupt escaped main()")
    assert code == 130
    assert err == "opsrun: interrupted\n"


# --- stdin that is not UTF-8 ---------------------------------------------------------

LATIN1_PLAN = (
    b'{"actions":[{"kind":"CREATE_FILE","path":"a.txt","content":"caf\xe9"}],"summary":"s"}'
)


def strict_stdin(data: bytes) -> io.TextIOWrapper:
    """A stdin as Python opens it under a UTF-8 locale: decoding errors raise."""
    return io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", errors="strict")


def test_check_of_non_utf8_stdin_reports_invalid_json(tmp_path: Path) -> None:
    code, out, err = run(
        ["plan", "check", "-", "--root", str(project(tmp_path))], stdin=strict_stdin(LATIN1_PLAN)
    )
    assert (code, err) == (1, "")
    assert "ERR_INVALID_JSON answer is not valid UTF-8 at byte 63" in out


def test_check_of_a_non_utf8_file_says_where_it_is_not_utf8(tmp_path: Path) -> None:
    answer = tmp_path / "answer.json"
    answer.write_bytes(LATIN1_PLAN)
    code, out, err = run(["plan", "check", str(answer)])
    assert (code, err) == (1, "")
    assert "ERR_INVALID_JSON answer is not valid UTF-8 at byte 63" in out


def test_apply_of_non_utf8_stdin_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = project(tmp_path)
    code, _, _ = run(["plan", "apply", "-", "--root", str(root)], stdin=strict_stdin(LATIN1_PLAN))
    assert code == 2
    assert "cannot read -" in capsys.readouterr().err
    assert not (root / "a.txt").exists()


def test_non_utf8_stdin_through_a_real_process(tmp_path: Path) -> None:
    root = project(tmp_path)
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
    for command, expected in (("check", 1), ("apply", 2)):
        done = subprocess.run(
            [sys.executable, "-m", "opsrun.cli", "plan", command, "-", "--root", str(root)],
            input=LATIN1_PLAN,
            capture_output=True,
            env=env,
        )
        assert done.returncode == expected, done.stderr
        assert b"Traceback" not in done.stderr


# --- plan report over malformed traces -----------------------------------------------


def test_report_counts_malformed_traces_as_unreadable(tmp_path: Path) -> None:
    root = project(tmp_path)
    traces = root / ".opsrun" / "traces"
    traces.mkdir(parents=True)
    (traces / "a.json").write_text('{"mode": "apply", "created_at": "2024", "errors": 5}')
    (traces / "b.json").write_text("[" * 100_000 + "]" * 100_000)
    (traces / "c.json").write_text('{"mode": "apply", "created_at": "2025", "errors": []}')

    code, out, err = run(["plan", "report", "--root", str(root), "--json"])

    assert (code, err) == (0, "")
    doc = json.loads(out)
    assert (doc["traces"], doc["unreadable"]) == (1, 2)


# --- --check-timeout -----------------------------------------------------------------


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0", "soon"])
def test_check_timeout_must_be_a_positive_number(tmp_path: Path, value: str) -> None:
    root = project(tmp_path)
    code, _, err = run(
        [
            "plan",
            "apply",
            str(write_plan(tmp_path)),
            "--root",
            str(root),
            "--check",
            "true",
            "--check-timeout",
            value,
        ]
    )
    assert code == 2
    assert "--check-timeout" in err
    assert not (root / "new.txt").exists()


# --- secrets in --json ---------------------------------------------------------------


def test_json_output_masks_the_check_argv(tmp_path: Path) -> None:
    root = project(tmp_path)
    check = f"{sys.executable} -c 'raise SystemExit(1)' -- Bearer {TOKEN}"
    code, out, _ = run(
        [
            "plan",
            "apply",
            str(write_plan(tmp_path)),
            "--root",
            str(root),
            "--check",
            check,
            "--json",
        ]
    )
    assert code == 1
    assert TOKEN not in out
    doc = json.loads(out)
    assert doc["error"]["code"] == "ERR_CHECK_FAILED"
    assert "[REDACTED]" in doc["error"]["details"]["argv"][-1]


# --- undo over a created directory that gained a file --------------------------------


def test_undo_conflict_for_a_file_added_to_a_created_directory(tmp_path: Path) -> None:
    root = project(tmp_path)
    plan = write_plan(
        tmp_path,
        {
            "actions": [{"kind": "CREATE_FILE", "path": "src/new/a.py", "content": "x\n"}],
            "summary": "s",
        },
    )
    assert run(["plan", "apply", str(plan), "--root", str(root)])[0] == 0
    (root / "src" / "new" / "mine.py").write_text("mine\n")

    code, out, _ = run(["plan", "undo", "--root", str(root)])

    assert code == 1
    assert out.startswith("not undone: ERR_UNDO_CONFLICT")
    assert "src/new/mine.py" in out
    assert (root / "src" / "new" / "a.py").read_text() == "x\n"
    code, out, _ = run(["plan", "recover", "--root", str(root)])
    assert (code, out.split(" (")[0]) == (0, "recover: nothing")


def test_non_utf8_name_in_a_deleted_directory_through_a_strict_utf8_stdout(
    tmp_path: Path,
) -> None:
    root = project(tmp_path)
    os.mkdir(root / "old")
    with open(os.path.join(os.fsencode(root), b"old", b"caf\xe9.txt"), "wb") as handle:
        handle.write(b"data\n")
    plan = write_plan(
        tmp_path, {"actions": [{"kind": "DELETE_DIR", "path": "old"}], "summary": "s"}
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "opsrun.cli",
            "plan",
            "apply",
            str(plan),
            "--root",
            str(root),
            "--allow-delete",
        ],
        capture_output=True,
        env={**os.environ, "PYTHONIOENCODING": "utf-8"},
    )
    assert done.returncode == 0, done.stderr
    assert b"old/caf\\xe9.txt" in done.stdout
    assert not (root / "old").exists()
