"""Review findings on the journal: created directories that gain foreign files, file names
that are not UTF-8, set-id bits on the way back, and the check's argv in error details."""

from __future__ import annotations

import json
import math
import os
import stat
import subprocess
import sys
import textwrap
from collections.abc import Mapping
from pathlib import Path

import pytest

from opsrun.errors import ApplyError, ConfigError
from opsrun.protocol import Plan, apply_plan, parse_plan, recover, sha256_hex, undo

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from test_apply_helpers import picture  # noqa: E402

TOKEN = "ghp_0123456789abcdefghijABCDEFGHIJ0123456789"


def plan_of(*actions: Mapping[str, object]) -> Plan:
    return parse_plan(json.dumps({"actions": list(actions), "summary": "s"}))


def status(root: Path) -> str:
    tx_id = (root / ".opsrun" / "current").read_text().strip()
    manifest = json.loads((root / ".opsrun" / "tx" / tx_id / "manifest.json").read_text())
    return str(manifest["status"])


CREATE_MOD = {"kind": "CREATE_FILE", "path": "pkg/mod.py", "content": "x = 1\n"}


# --- created directories that later hold other files -----------------------------------


def test_undo_refuses_a_created_directory_that_gained_a_file_and_changes_nothing(
    tmp_path: Path,
) -> None:
    apply_plan(plan_of({"kind": "CREATE_FILE", "path": "src/new/a.py", "content": "x\n"}), tmp_path)
    (tmp_path / "src" / "new" / "mine.py").write_text("precious\n")
    before = picture(tmp_path)

    with pytest.raises(ApplyError) as caught:
        undo(tmp_path)

    assert caught.value.code == "ERR_UNDO_CONFLICT"
    assert "src/new/mine.py" in caught.value.details["paths"]
    assert picture(tmp_path) == before
    assert status(tmp_path) == "committed"
    # Once the user's file is gone, the undo goes through.
    (tmp_path / "src" / "new" / "mine.py").unlink()
    assert undo(tmp_path).outcome == "undone"
    assert sorted(os.listdir(tmp_path)) == [".opsrun"]


def test_failed_check_leaves_a_created_directory_holding_foreign_files(tmp_path: Path) -> None:
    (tmp_path / "keep.txt").write_text("keep\n")

    def check(root: Path) -> bool:
        # What `python -c 'import pkg.mod'` or pytest does before failing.
        (root / "pkg" / "__pycache__").mkdir()
        (root / "pkg" / "__pycache__" / "mod.pyc").write_bytes(b"\x00pyc")
        return False

    with pytest.raises(ApplyError) as caught:
        apply_plan(plan_of(CREATE_MOD), tmp_path, check=check)

    assert caught.value.code == "ERR_CHECK_FAILED"
    assert caught.value.details["kept"] == ["pkg"]
    assert "left in place" in caught.value.message
    assert not (tmp_path / "pkg" / "mod.py").exists()
    assert (tmp_path / "pkg" / "__pycache__" / "mod.pyc").read_bytes() == b"\x00pyc"
    assert status(tmp_path) == "rolled_back"
    # The root is not wedged: recover has nothing to do and the next apply works.
    assert recover(tmp_path).outcome == "nothing"
    apply_plan(plan_of({"kind": "CREATE_FILE", "path": "other.txt", "content": "hi\n"}), tmp_path)
    assert (tmp_path / "other.txt").read_text() == "hi\n"


def test_created_directory_named_with_a_trailing_slash_rolls_back(tmp_path: Path) -> None:
    plan = plan_of(
        {"kind": "CREATE_DIR", "path": "src/new/"},
        {"kind": "CREATE_FILE", "path": "src/new/a.py", "content": "x\n"},
    )
    with pytest.raises(ApplyError) as caught:
        apply_plan(plan, tmp_path, check=lambda root: False)
    assert caught.value.code == "ERR_CHECK_FAILED"
    assert sorted(os.listdir(tmp_path)) == [".opsrun"]
    apply_plan(plan, tmp_path)
    assert undo(tmp_path).outcome == "undone"
    assert sorted(os.listdir(tmp_path)) == [".opsrun"]


# A process that dies while its check runs, after the check wrote into a created directory:
# the journal says "prepared" and recover() must finish it.
CRASH_IN_CHECK = textwrap.dedent(
    """
    import json, os, sys
    from pathlib import Path
    from opsrun.protocol import apply_plan, parse_plan

    def check(root):
        (root / "pkg" / "__pycache__").mkdir()
        (root / "pkg" / "__pycache__" / "mod.pyc").write_bytes(b"pyc")
        os._exit(9)

    plan = parse_plan(json.dumps({"actions": [json.loads(sys.argv[2])], "summary": "s"}))
    apply_plan(plan, sys.argv[1], check=check)
    """
)


def test_recover_finishes_a_crashed_apply_whose_created_directory_gained_files(
    tmp_path: Path,
) -> None:
    (tmp_path / "keep.txt").write_text("keep\n")
    crashed = subprocess.run(
        [sys.executable, "-c", CRASH_IN_CHECK, str(tmp_path), json.dumps(CREATE_MOD)],
        capture_output=True,
        text=True,
    )
    assert crashed.returncode == 9, crashed.stderr
    assert status(tmp_path) == "prepared"

    outcome = recover(tmp_path)

    assert outcome.outcome == "rolled_back"
    assert "pkg" in outcome.kept
    assert status(tmp_path) == "rolled_back"
    assert not (tmp_path / "pkg" / "mod.py").exists()
    assert (tmp_path / "pkg" / "__pycache__" / "mod.pyc").read_bytes() == b"pyc"
    assert (tmp_path / "keep.txt").read_text() == "keep\n"
    assert recover(tmp_path).outcome == "nothing"


def test_recover_finishes_an_undo_cut_short_by_foreign_files(tmp_path: Path) -> None:
    apply_plan(plan_of(CREATE_MOD), tmp_path)
    # An undo that was interrupted after it wrote "undoing" (as an older release left it
    # when it met the foreign file): recover must finish it and keep the file.
    tx_id = (tmp_path / ".opsrun" / "current").read_text().strip()
    manifest_path = tmp_path / ".opsrun" / "tx" / tx_id / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["status"] = "undoing"
    manifest_path.write_text(json.dumps(manifest))
    (tmp_path / "pkg" / "mine.py").write_text("mine\n")

    outcome = recover(tmp_path)

    assert (outcome.outcome, outcome.kept) == ("undone", ("pkg",))
    assert not (tmp_path / "pkg" / "mod.py").exists()
    assert (tmp_path / "pkg" / "mine.py").read_text() == "mine\n"
    assert status(tmp_path) == "undone"


# --- a directory delete over a name that is not UTF-8 ----------------------------------


def test_delete_dir_holding_a_non_utf8_name_applies_rolls_back_and_undoes(
    tmp_path: Path,
) -> None:
    os.mkdir(tmp_path / "old")
    name = os.path.join(os.fsencode(tmp_path), b"old", b"caf\xe9.txt")
    with open(name, "wb") as handle:
        handle.write(b"data\n")
    os.chmod(name, 0o640)
    before = picture(tmp_path)
    plan = plan_of({"kind": "DELETE_DIR", "path": "old"})

    with pytest.raises(ApplyError) as caught:
        apply_plan(plan, tmp_path, allow_delete=True, check=lambda root: False)
    assert caught.value.code == "ERR_CHECK_FAILED"
    assert picture(tmp_path) == before

    apply_plan(plan, tmp_path, allow_delete=True)
    assert not (tmp_path / "old").exists()
    undo(tmp_path)
    assert picture(tmp_path) == before
    assert os.listdir(os.path.join(os.fsencode(tmp_path), b"old")) == [b"caf\xe9.txt"]


# --- set-id bits on the way back ------------------------------------------------------


def setgid_project(root: Path) -> tuple[Path, Plan]:
    tool = root / "tool.sh"
    tool.write_text("echo 1\n")
    os.chmod(tool, 0o2755)
    plan = plan_of(
        {
            "kind": "REPLACE_RANGE",
            "path": "tool.sh",
            "start_line": 1,
            "end_line": 1,
            "content": "echo 2\n",
            "base_sha256": sha256_hex(b"echo 1\n"),
        }
    )
    return tool, plan


def test_rolled_back_apply_gives_a_setgid_file_back_with_its_bit(tmp_path: Path) -> None:
    tool, plan = setgid_project(tmp_path)
    with pytest.raises(ApplyError):
        apply_plan(plan, tmp_path, check=lambda root: False)
    assert stat.S_IMODE(tool.stat().st_mode) == 0o2755
    assert tool.read_text() == "echo 1\n"


def test_undo_clears_set_id_bits_and_says_which_files(tmp_path: Path) -> None:
    tool, plan = setgid_project(tmp_path)
    apply_plan(plan, tmp_path)
    assert stat.S_IMODE(tool.stat().st_mode) == 0o2755

    outcome = undo(tmp_path)

    assert tool.read_text() == "echo 1\n"
    assert stat.S_IMODE(tool.stat().st_mode) == 0o755
    assert outcome.setid_cleared == ("tool.sh",)


# --- the check's argv and time limit -------------------------------------------------


def test_check_argv_in_error_details_is_masked(tmp_path: Path) -> None:
    argv = [sys.executable, "-c", "raise SystemExit(1)", "Bearer", TOKEN]
    with pytest.raises(ApplyError) as caught:
        apply_plan(plan_of(CREATE_MOD), tmp_path, check=argv)
    assert caught.value.code == "ERR_CHECK_FAILED"
    assert TOKEN not in json.dumps(caught.value.to_dict())
    assert len(caught.value.details["argv"]) == len(argv)
    assert "[REDACTED]" in caught.value.details["argv"][-1]


def test_check_that_cannot_start_masks_argv_and_error(tmp_path: Path) -> None:
    with pytest.raises(ApplyError) as caught:
        apply_plan(plan_of(CREATE_MOD), tmp_path, check=[str(tmp_path / TOKEN)])
    assert caught.value.code == "ERR_CHECK_FAILED"
    assert TOKEN not in json.dumps(caught.value.to_dict())


@pytest.mark.parametrize("seconds", [math.nan, -math.inf, -1.0, 0.0])
def test_check_timeout_must_be_a_positive_number(tmp_path: Path, seconds: float) -> None:
    with pytest.raises(ConfigError):
        apply_plan(plan_of(CREATE_MOD), tmp_path, check=["true"], check_timeout=seconds)
    assert not (tmp_path / "pkg").exists()


def test_an_infinite_check_timeout_means_no_limit(tmp_path: Path) -> None:
    result = apply_plan(
        plan_of(CREATE_MOD), tmp_path, check=[sys.executable, "-c", "pass"], check_timeout=math.inf
    )
    assert result.check_returncode == 0
