"""apply_plan, preview_plan and undo on real directories."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from opsrun.errors import ApplyError, OpsrunError, PlanError
from opsrun.protocol import (
    Action,
    ActionKind,
    CheckCommand,
    FileSystem,
    Plan,
    apply_plan,
    preview_plan,
    recover,
    sha256_hex,
    undo,
)
from opsrun.protocol._fs import Tree

sys.path.insert(0, str(Path(__file__).parent))
from test_apply_helpers import make_project, picture, sample_plan


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    make_project(root)
    return root


def plan_of(*actions: Action) -> Plan:
    return Plan(version=2, summary="t", actions=actions)


def error_code(
    root: Path, plan: Plan, *, check: CheckCommand | None = None, allow_delete: bool = False
) -> str:
    with pytest.raises(OpsrunError) as info:
        apply_plan(plan, root, check=check, allow_delete=allow_delete)
    assert isinstance(info.value, ApplyError)
    return info.value.code


def test_apply_changes_every_kind_and_undo_restores(project: Path) -> None:
    before = picture(project)
    result = apply_plan(sample_plan(project), project, allow_delete=True)
    assert (project / "src" / "app.py").read_text().count("five") == 2
    assert "sixteen\n" in (project / "src" / "app.py").read_text()
    assert (project / "src" / "util.py").read_text().endswith("return 3\n")
    assert os.stat(project / "src" / "util.py").st_mode & 0o777 == 0o755
    assert (project / "crlf.txt").read_bytes() == b"one\r\nTWO\r\nthree\r\n"
    assert (project / "pkg" / "sub" / "new.py").read_text() == "x = 1\n"
    assert (project / "docs" / "guide").is_dir()
    assert not (project / "old.txt").exists()
    assert not (project / "build").exists()
    assert "src/app.py" in result.changed
    assert undo(project).outcome == "undone"
    assert picture(project) == before
    with pytest.raises(ApplyError) as info:
        undo(project)
    assert info.value.code == "ERR_NOTHING_TO_UNDO"


def create(path: str, content: str) -> Plan:
    return plan_of(Action(kind=ActionKind.CREATE_FILE, path=path, content=content))


@pytest.mark.parametrize(
    ("umask", "file_mode", "dir_mode"), [(0o077, 0o600, 0o700), (0o002, 0o664, 0o775)]
)
def test_new_files_and_directories_follow_the_umask(
    tmp_path: Path, umask: int, file_mode: int, dir_mode: int
) -> None:
    plan = plan_of(
        Action(kind=ActionKind.CREATE_FILE, path="new/x.txt", content="x\n"),
        Action(kind=ActionKind.CREATE_DIR, path="d"),
    )
    old = os.umask(umask)
    try:
        apply_plan(plan, tmp_path)
    finally:
        os.umask(old)
    modes = {p: os.stat(tmp_path / p).st_mode & 0o777 for p in ("new", "new/x.txt", "d")}
    assert modes == {"new": dir_mode, "new/x.txt": file_mode, "d": dir_mode}


def test_an_apply_that_rolled_back_leaves_the_last_commit_to_undo(project: Path) -> None:
    before = picture(project)
    apply_plan(create("t1.txt", "1\n"), project)
    after_t1 = picture(project)
    for _ in range(2):  # two failed applies in a row
        assert error_code(project, create("t2.txt", "2\n"), check=lambda root: False) == (
            "ERR_CHECK_FAILED"
        )
        assert picture(project) == after_t1
    assert undo(project).outcome == "undone"
    assert picture(project) == before
    with pytest.raises(ApplyError) as again:
        undo(project)
    assert again.value.code == "ERR_NOTHING_TO_UNDO"
    apply_plan(create("t3.txt", "3\n"), project)  # a new commit is the one to undo now
    assert error_code(project, create("t4.txt", "4\n"), check=lambda root: False) == (
        "ERR_CHECK_FAILED"
    )
    assert undo(project).outcome == "undone"
    assert picture(project) == before


def test_preview_lists_diffs_and_writes_nothing(project: Path) -> None:
    before = picture(project)
    items = preview_plan(sample_plan(project), project)
    assert picture(project) == before
    by_path = {i.path: i for i in items}
    assert "+five and a half\n" in by_path["src/app.py"].diff
    assert by_path["pkg/sub/new.py"].diff.startswith("--- /dev/null\n+++ b/pkg/sub/new.py\n")
    assert by_path["old.txt"].diff.startswith("--- a/old.txt\n+++ /dev/null\n")
    assert by_path["build/cache/a.bin"].diff.startswith("Binary files")
    assert by_path["docs/guide"].diff == ""
    assert not (project / ".opsrun").exists()


def test_check_failure_rolls_back_byte_identical(project: Path) -> None:
    before = picture(project)
    plan = sample_plan(project)
    argv = [sys.executable, "-c", "import sys; print('boom'); sys.exit(3)"]
    with pytest.raises(ApplyError) as info:
        apply_plan(plan, project, check=argv, allow_delete=True)
    assert info.value.code == "ERR_CHECK_FAILED"
    assert info.value.details["returncode"] == 3
    assert "boom" in info.value.details["output"]
    assert picture(project) == before
    assert recover(project).outcome == "nothing"


def test_check_sees_the_new_tree_and_callable_checks(project: Path) -> None:
    plan = sample_plan(project)
    seen: list[str] = []

    def check(root: Path) -> bool:
        seen.append((root / "pkg" / "sub" / "new.py").read_text())
        return False

    before = picture(project)
    assert error_code(project, plan, check=check, allow_delete=True) == "ERR_CHECK_FAILED"
    assert seen == ["x = 1\n"]
    assert picture(project) == before
    ok = apply_plan(plan, project, check=[sys.executable, "-c", "print('fine')"], allow_delete=True)
    assert ok.check_returncode == 0
    assert "fine" in ok.check_output


def test_check_timeout_rolls_back(project: Path) -> None:
    before = picture(project)
    argv = [sys.executable, "-c", "import time; time.sleep(30)"]
    plan = plan_of(Action(kind=ActionKind.CREATE_FILE, path="n.txt", content="n\n"))
    with pytest.raises(ApplyError) as info:
        apply_plan(plan, project, check=argv, check_timeout=0.5)
    assert info.value.code == "ERR_CHECK_FAILED"
    assert info.value.details["timed_out"] is True
    assert picture(project) == before


def test_deletes_need_confirmation(project: Path) -> None:
    before = picture(project)
    plan = plan_of(Action(kind=ActionKind.DELETE_FILE, path="old.txt"))
    assert error_code(project, plan) == "ERR_DELETE_NOT_CONFIRMED"
    assert picture(project) == before


def test_base_changed_between_preview_and_apply(project: Path) -> None:
    plan = sample_plan(project)
    preview_plan(plan, project)
    (project / "src" / "app.py").write_text("changed by someone\n")
    edited = picture(project)
    assert error_code(project, plan, allow_delete=True) == "ERR_BASE_MISMATCH"
    assert picture(project) == edited


def test_patch_that_does_not_apply_writes_nothing(project: Path) -> None:
    app = (project / "src" / "app.py").read_bytes()
    plan = plan_of(
        Action(kind=ActionKind.CREATE_FILE, path="first.txt", content="1\n"),
        Action(
            kind=ActionKind.PATCH_FILE,
            path="src/app.py",
            base_sha256=sha256_hex(app),
            patch="@@ -2,3 +2,3 @@\n line 2\n-nope\n+x\n line 4\n",
        ),
    )
    before = picture(project)
    with pytest.raises(ApplyError) as info:
        apply_plan(plan, project)
    assert info.value.code == "ERR_PATCH_APPLY_FAILED"
    assert info.value.details["hunk"] == 1
    assert picture(project) == before


def test_invalid_plan_reports_all_violations(project: Path) -> None:
    plan = plan_of(
        Action(kind=ActionKind.CREATE_FILE, path="../escape.txt", content="x"),
        Action(kind=ActionKind.CREATE_FILE, path="/abs.txt", content="x"),
    )
    with pytest.raises(ApplyError) as info:
        apply_plan(plan, project)
    assert len(info.value.details["violations"]) >= 2
    with pytest.raises(PlanError):
        preview_plan(plan, project)


def test_undo_refuses_when_the_tree_changed_since(project: Path) -> None:
    apply_plan(plan_of(Action(kind=ActionKind.CREATE_FILE, path="n.txt", content="n\n")), project)
    (project / "n.txt").write_text("edited\n")
    with pytest.raises(ApplyError) as info:
        undo(project)
    assert info.value.code == "ERR_UNDO_CONFLICT"
    assert (project / "n.txt").read_text() == "edited\n"


# --- no escape ---------------------------------------------------------------------------


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    out = tmp_path / "outside"
    out.mkdir()
    (out / "secret.txt").write_text("keep\n")
    return out


ESCAPE_CODES = {"ERR_PATH_SYMLINK", "ERR_PATH_ESCAPES_ROOT"}


def test_symlinked_directory_pointing_outside_is_refused(project: Path, outside: Path) -> None:
    os.symlink(outside, project / "link")
    seen = picture(outside)
    for action in (
        Action(kind=ActionKind.CREATE_FILE, path="link/new.txt", content="x\n"),
        Action(kind=ActionKind.DELETE_FILE, path="link/secret.txt"),
        Action(kind=ActionKind.DELETE_DIR, path="link"),
        Action(kind=ActionKind.CREATE_DIR, path="link/sub"),
    ):
        assert error_code(project, plan_of(action), allow_delete=True) in ESCAPE_CODES
    assert picture(outside) == seen


def test_symlinked_file_and_dangling_link_are_refused(project: Path, outside: Path) -> None:
    os.symlink(outside / "secret.txt", project / "f.txt")
    os.symlink(outside / "nothing-yet.txt", project / "dangling.txt")
    seen = picture(outside)
    base = sha256_hex(b"keep\n")
    for action in (
        Action(
            kind=ActionKind.PATCH_FILE,
            path="f.txt",
            base_sha256=base,
            patch="@@ -1 +1 @@\n-keep\n+gone\n",
        ),
        Action(kind=ActionKind.CREATE_FILE, path="dangling.txt", content="x\n"),
        Action(kind=ActionKind.DELETE_FILE, path="f.txt"),
    ):
        assert error_code(project, plan_of(action), allow_delete=True) in ESCAPE_CODES
    assert picture(outside) == seen


def test_tree_refuses_links_even_without_validation(project: Path, outside: Path) -> None:
    # The file-system layer itself checks each segment: a link swapped in after
    # validation is still refused.
    os.symlink(outside, project / "link")
    os.symlink(outside / "secret.txt", project / "f.txt")
    tree = Tree(FileSystem(), project)
    try:
        for call in (
            lambda: tree.write("link/x.txt", b"x", 0o644, temp=".t"),
            lambda: tree.write("f.txt", b"x", 0o644, temp=".t"),
            lambda: tree.state("f.txt"),
            lambda: tree.mkdir("link/d"),
            lambda: tree.walk("link"),
        ):
            with pytest.raises(ApplyError) as info:
                call()
            assert info.value.code == "ERR_PATH_SYMLINK"
        for bad in ("../x", "/etc/passwd", "a/./b", ".git/config", ".opsrun/current"):
            with pytest.raises(ApplyError) as info:
                tree.write(bad, b"x", 0o644, temp=".t")
            assert info.value.code in {"ERR_PATH_ESCAPES_ROOT", "ERR_PATH_PROTECTED"}
    finally:
        tree.close()
    assert (outside / "secret.txt").read_text() == "keep\n"
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]


def test_directory_delete_with_a_link_inside_is_refused(project: Path, outside: Path) -> None:
    os.symlink(outside, project / "build" / "out")
    before = picture(project)
    plan = plan_of(Action(kind=ActionKind.DELETE_DIR, path="build"))
    assert error_code(project, plan, allow_delete=True) in ESCAPE_CODES
    assert picture(project) == before
    assert (outside / "secret.txt").exists()
