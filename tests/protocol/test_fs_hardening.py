"""File-system hardening: validation reads like apply writes, set-id files, journal links."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from opsrun.errors import ApplyError
from opsrun.protocol import FileSystem, _fscheck, apply_plan, parse_plan, undo, validate_plan

SECRET = "outside secret\nsecond line\n"


def plan(*actions: dict[str, Any], version: int = 2) -> Any:
    return parse_plan(json.dumps({"actions": list(actions), "summary": "s"}), version=version)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    (project / "app.py").write_text("x = 1\n")
    (tmp_path / "outside.txt").write_text(SECRET)
    return project


def codes_of_validation(p: Any, root: Path) -> set[str]:
    return {v.code for v in validate_plan(p, root=root) if v.blocking}


def code_of_apply(p: Any, root: Path) -> str:
    with pytest.raises(ApplyError) as caught:
        apply_plan(p, root, allow_delete=True)
    return caught.value.code


@pytest.mark.parametrize(
    "setup",
    ["git-inside", "link-inside", "fifo-inside"],
)
def test_validation_refuses_directory_deletes_that_apply_refuses(root: Path, setup: str) -> None:
    victim = root / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("k\n")
    if setup == "git-inside":
        (victim / ".git").mkdir()
    elif setup == "link-inside":
        os.symlink(root / "app.py", victim / "link.py")
    else:
        os.mkfifo(victim / "pipe")
    p = plan({"kind": "DELETE_DIR", "path": "victim"})
    applied = code_of_apply(p, root)
    assert applied in codes_of_validation(p, root)
    assert (victim / "keep.txt").exists()


def test_validation_refuses_writes_through_an_in_root_link(root: Path) -> None:
    (root / "real").mkdir()
    os.symlink(root / "real", root / "alias")
    p = plan({"kind": "CREATE_FILE", "path": "alias/new.py", "content": "y = 2\n"})
    assert code_of_apply(p, root) == "ERR_PATH_SYMLINK"
    assert "ERR_PATH_SYMLINK" in codes_of_validation(p, root)
    assert not (root / "real" / "new.py").exists()


@pytest.mark.parametrize("link", [".opsrun", ".opsrun/lock"])
def test_a_linked_journal_is_refused_by_validation_and_apply(
    root: Path, tmp_path: Path, link: str
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    if link == ".opsrun/lock":
        (root / ".opsrun").mkdir()
        os.symlink(elsewhere / "lock", root / ".opsrun" / "lock")
    else:
        os.symlink(elsewhere, root / ".opsrun")
    p = plan({"kind": "CREATE_DIR", "path": "d"})
    assert "ERR_PATH_SYMLINK" in codes_of_validation(p, root)
    assert code_of_apply(p, root) == "ERR_PATH_SYMLINK"
    assert list(elsewhere.iterdir()) == []


def test_a_link_to_an_outside_file_reveals_nothing(root: Path, tmp_path: Path) -> None:
    os.symlink(tmp_path / "outside.txt", root / "leak.py")
    outside_hash = hashlib.sha256(SECRET.encode()).hexdigest()
    patch = "--- a/leak.py\n+++ b/leak.py\n@@ -1 +1 @@\n-a\n+b\n"
    p = plan({"kind": "PATCH_FILE", "path": "leak.py", "base_sha256": "0" * 64, "patch": patch})
    text = json.dumps([v.model_dump() for v in validate_plan(p, root=root)])
    assert "ERR_PATH_SYMLINK" in text
    assert outside_hash not in text
    assert "2 lines" not in text


def test_a_link_swapped_in_during_validation_is_not_followed(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file is regular when looked at, a link to outside when opened: no outside read."""
    outside_hash = hashlib.sha256(SECRET.encode()).hexdigest()

    class Swapping(FileSystem):
        swapped = False

        def open(
            self, name: str, flags: int, *, mode: int = 0o600, dir_fd: int | None = None
        ) -> int:
            if name == "app.py" and not Swapping.swapped:
                Swapping.swapped = True
                os.remove(root / "app.py")
                os.symlink(tmp_path / "outside.txt", root / "app.py")
            return super().open(name, flags, mode=mode, dir_fd=dir_fd)

    monkeypatch.setattr(_fscheck, "FileSystem", Swapping)
    patch = "--- a/app.py\n+++ b/app.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n"
    p = plan({"kind": "PATCH_FILE", "path": "app.py", "base_sha256": "1" * 64, "patch": patch})
    found = validate_plan(p, root=root)
    assert Swapping.swapped
    text = json.dumps([v.model_dump() for v in found])
    assert outside_hash not in text
    assert {v.code for v in found} & {"ERR_FS_UNREADABLE", "ERR_PATH_SYMLINK"}


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file another owner needs root")
def test_a_set_id_file_of_another_owner_keeps_its_owner(root: Path) -> None:
    target = root / "tool.sh"
    target.write_text("echo 1\n")
    os.chown(target, 65534, 65534)
    os.chmod(target, 0o4755)
    p = plan({"kind": "UPDATE_FILE", "path": "tool.sh", "content": "echo 2\n"}, version=1)
    apply_plan(p, root)
    st = target.stat()
    assert (st.st_uid, st.st_gid) == (65534, 65534)
    assert stat.S_IMODE(st.st_mode) == 0o4755
    assert target.read_text() == "echo 2\n"


def test_set_id_bits_are_dropped_when_the_owner_cannot_be_kept(root: Path) -> None:
    class NoChown(FileSystem):
        def fchown(self, fd: int, uid: int, gid: int) -> None:
            raise PermissionError(1, "Operation not permitted")

    target = root / "tool.sh"
    target.write_text("echo 1\n")
    os.chmod(target, 0o6755)
    uid, gid = target.stat().st_uid, target.stat().st_gid
    if os.geteuid() == 0:
        os.chown(target, 65534, 65534)
        uid, gid = 65534, 65534
    if (uid, gid) == (os.geteuid(), os.getegid()):
        pytest.skip("needs a file of another owner")  # pragma: no cover - CI runs as root
    p = plan({"kind": "UPDATE_FILE", "path": "tool.sh", "content": "echo 2\n"}, version=1)
    apply_plan(p, root, fs=NoChown())
    assert stat.S_IMODE(target.stat().st_mode) == 0o755


def test_set_id_bits_are_never_restored_from_a_journal(root: Path) -> None:
    target = root / "tool.sh"
    target.write_text("echo 1\n")
    os.chmod(target, 0o4755)
    p = plan({"kind": "UPDATE_FILE", "path": "tool.sh", "content": "echo 2\n"}, version=1)
    apply_plan(p, root)
    assert stat.S_IMODE(target.stat().st_mode) == 0o4755  # an edit in place keeps it
    undo(root)
    assert target.read_text() == "echo 1\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o755  # a restore from the journal does not
