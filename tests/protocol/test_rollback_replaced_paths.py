"""A check (user code running in the root) that puts a directory, a symbolic link or a
special file where the plan wrote or deleted: rollback, undo and recover leave it alone,
say so, and keep the old content in ``.opsrun/saved/<tx_id>/``."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shlex
import shutil
import stat
import subprocess
import sys
import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from opsrun.cli import main
from opsrun.errors import ApplyError
from opsrun.protocol import Plan, apply_plan, parse_plan, recover, sha256_hex, undo
from opsrun.testing import FaultyFileSystem

sys.path.insert(0, str(Path(__file__).parent))
from test_apply_helpers import picture

OLD = b"old build\n"
NEW = b"new build\n"
MADE = b"made by the check\n"


def plan_of(*actions: Mapping[str, object]) -> Plan:
    return parse_plan(json.dumps({"actions": list(actions), "summary": "s"}))


DELETE_BUILD = {"kind": "DELETE_FILE", "path": "build"}


def patch_of(path: str) -> dict[str, object]:
    """A PATCH_FILE turning ``OLD`` into ``NEW`` at ``path``."""
    return {
        "kind": "PATCH_FILE",
        "path": path,
        "base_sha256": sha256_hex(OLD),
        "patch": f"--- a/{path}\n+++ b/{path}\n@@ -1 +1 @@\n-old build\n+new build\n",
    }


PATCH_BUILD = patch_of("build")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A project with a file ``build`` (mode 0o640), beside a folder nobody may touch."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "build").write_bytes(OLD)
    os.chmod(project / "build", 0o640)
    (project / "keep.txt").write_text("keep\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret\n")
    os.chmod(outside / "secret.txt", 0o644)
    return project


def outside_of(root: Path) -> Path:
    return root.parent / "outside"


OUTSIDE_PICTURE = {"secret.txt": ("file", 0o644, b"secret\n")}


def check(body: str, *, fails: bool = True) -> list[str]:
    """An argv check: ``body`` run by Python in the root (:func:`with_outside` gives it the
    outside folder as ``sys.argv[1]``); it exits 1 when ``fails``."""
    script = "import os, sys\n" + textwrap.dedent(body) + ("raise SystemExit(1)\n" if fails else "")
    return [sys.executable, "-c", script]


def replace_with(kind: str, path: str = "build") -> str:
    """Check code putting a ``kind`` (dir, link, fifo, file) at ``path``, whatever is there."""
    make = {
        "dir": f"os.mkdir({path!r})\nopen({path!r} + '/out.o', 'wb').write({MADE!r})\n",
        "link": f"os.symlink(sys.argv[1], {path!r})\n",
        "fifo": f"os.mkfifo({path!r})\n",
        "file": f"open({path!r}, 'wb').write({MADE!r})\n",
    }[kind]
    clear = (
        f"if os.path.isdir({path!r}) and not os.path.islink({path!r}):\n"
        f"    import shutil; shutil.rmtree({path!r})\n"
        f"elif os.path.lexists({path!r}):\n"
        f"    os.remove({path!r})\n"
    )
    return clear + make


def with_outside(argv: list[str], root: Path) -> list[str]:
    return [*argv, str(outside_of(root))]


def what_is_at(path: Path) -> tuple[object, ...]:
    """What is at ``path``, not following a link."""
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        return ("link", os.readlink(path))
    if stat.S_ISDIR(st.st_mode):
        return ("dir", sorted(os.listdir(path)))
    if stat.S_ISFIFO(st.st_mode):
        return ("fifo",)
    return ("file", path.read_bytes())


def placed(kind: str, root: Path) -> tuple[object, ...]:
    """What :func:`replace_with` leaves at a path."""
    return {
        "dir": ("dir", ["out.o"]),
        "link": ("link", str(outside_of(root))),
        "fifo": ("fifo",),
        "file": ("file", MADE),
    }[kind]


def manifest(root: Path) -> dict[str, Any]:
    tx_id = (root / ".opsrun" / "current").read_text().strip()
    data: dict[str, Any] = json.loads(
        (root / ".opsrun" / "tx" / tx_id / "manifest.json").read_text()
    )
    return data


def assert_not_wedged(root: Path) -> None:
    """Nothing is left to recover and the next apply goes through."""
    assert recover(root).outcome == "nothing"
    apply_plan(plan_of({"kind": "CREATE_FILE", "path": "next.txt", "content": "hi\n"}), root)
    assert (root / "next.txt").read_text() == "hi\n"


KINDS = [
    "dir",
    "link",
    pytest.param("fifo", marks=pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs")),
]


# --- a failed check: rollback ---------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("action", [DELETE_BUILD, PATCH_BUILD], ids=["deleted", "patched"])
def test_rollback_leaves_what_replaced_a_file_and_saves_the_old_file(
    root: Path, action: Mapping[str, object], kind: str
) -> None:
    with pytest.raises(ApplyError) as caught:
        apply_plan(
            plan_of(action),
            root,
            check=with_outside(check(replace_with(kind)), root),
            allow_delete=True,
        )

    error = caught.value
    assert error.code == "ERR_CHECK_FAILED"
    # What the check made is untouched; the old file waits in the journal's saved folder.
    assert what_is_at(root / "build") == placed(kind, root)
    assert error.details["not_restored"] == ["build"]
    saved_to = error.details["saved_to"]
    assert saved_to == f".opsrun/saved/{manifest(root)['tx_id']}"
    assert "not restored" in error.message
    assert saved_to in error.message
    saved = root / saved_to / "build"
    assert saved.read_bytes() == OLD
    assert stat.S_IMODE(saved.stat().st_mode) == 0o640
    assert (root / "keep.txt").read_text() == "keep\n"
    assert picture(outside_of(root)) == OUTSIDE_PICTURE
    assert manifest(root)["status"] == "rolled_back"
    assert_not_wedged(root)
    assert saved.read_bytes() == OLD  # the next transaction does not prune it


def test_rollback_leaves_a_link_put_on_the_way_to_a_patched_file(root: Path) -> None:
    (root / "src").mkdir()
    (root / "src" / "app.py").write_bytes(OLD)
    action = patch_of("src/app.py")
    # The check moves src/ aside and puts a link to the outside folder in its place.
    body = "os.rename('src', 'src.moved')\nos.symlink(sys.argv[1], 'src')\n"

    with pytest.raises(ApplyError) as caught:
        apply_plan(plan_of(action), root, check=with_outside(check(body), root))

    assert caught.value.code == "ERR_CHECK_FAILED"
    assert caught.value.details["not_restored"] == ["src/app.py"]
    assert (root / caught.value.details["saved_to"] / "src" / "app.py").read_bytes() == OLD
    assert what_is_at(root / "src") == ("link", str(outside_of(root)))
    assert (root / "src.moved" / "app.py").read_bytes() == NEW
    assert picture(outside_of(root)) == OUTSIDE_PICTURE
    assert_not_wedged(root)


@pytest.mark.parametrize("kind", ["link", "fifo"])
def test_rollback_keeps_a_link_or_fifo_put_where_the_apply_created_a_file(
    root: Path, kind: str
) -> None:
    if kind == "fifo" and not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs")
    action = {"kind": "CREATE_FILE", "path": "gen.py", "content": "x = 1\n"}

    with pytest.raises(ApplyError) as caught:
        apply_plan(
            plan_of(action), root, check=with_outside(check(replace_with(kind, "gen.py")), root)
        )

    assert caught.value.code == "ERR_CHECK_FAILED"
    assert what_is_at(root / "gen.py") == placed(kind, root)
    assert caught.value.details["kept"] == ["gen.py"]
    assert "not_restored" not in caught.value.details
    assert "left in place" in caught.value.message
    assert picture(outside_of(root)) == OUTSIDE_PICTURE
    assert_not_wedged(root)


@pytest.mark.parametrize("kind", ["file", "link"])
def test_rollback_leaves_what_replaced_a_deleted_directory_and_saves_its_files(
    root: Path, kind: str
) -> None:
    (root / "old" / "sub").mkdir(parents=True)
    (root / "old" / "a.txt").write_text("a\n")
    os.chmod(root / "old" / "a.txt", 0o644)
    (root / "old" / "sub" / "b.txt").write_text("b\n")
    os.chmod(root / "old" / "sub" / "b.txt", 0o600)

    with pytest.raises(ApplyError) as caught:
        apply_plan(
            plan_of({"kind": "DELETE_DIR", "path": "old"}),
            root,
            check=with_outside(check(replace_with(kind, "old")), root),
            allow_delete=True,
        )

    assert caught.value.code == "ERR_CHECK_FAILED"
    assert what_is_at(root / "old") == placed(kind, root)
    assert caught.value.details["not_restored"] == ["old"]
    saved = root / caught.value.details["saved_to"] / "old"
    assert picture(saved) == {
        "a.txt": ("file", 0o644, b"a\n"),
        "sub": ("dir", 0o700),
        "sub/b.txt": ("file", 0o600, b"b\n"),
    }
    assert picture(outside_of(root)) == OUTSIDE_PICTURE
    assert_not_wedged(root)


def test_rollback_keeps_a_file_put_where_the_apply_created_a_directory(root: Path) -> None:
    body = "os.rmdir('out')\n" + replace_with("file", "out")

    with pytest.raises(ApplyError) as caught:
        apply_plan(plan_of({"kind": "CREATE_DIR", "path": "out"}), root, check=check(body))

    assert caught.value.code == "ERR_CHECK_FAILED"
    assert what_is_at(root / "out") == ("file", MADE)
    assert caught.value.details["kept"] == ["out"]
    assert_not_wedged(root)


# --- a passing check, then undo --------------------------------------------------------


def test_undo_refuses_to_remove_a_directory_a_passing_check_put_over_a_deleted_file(
    root: Path,
) -> None:
    apply_plan(
        plan_of(DELETE_BUILD),
        root,
        check=check(replace_with("dir"), fails=False),
        allow_delete=True,
    )
    before = picture(root)

    with pytest.raises(ApplyError) as caught:
        undo(root)

    assert caught.value.code == "ERR_UNDO_CONFLICT"
    assert caught.value.details["paths"] == ["build"]
    assert picture(root) == before
    assert manifest(root)["status"] == "committed"
    # Once the directory is moved out of the way, the undo gives the file back.
    shutil.move(root / "build", root.parent / "build.mine")
    assert undo(root).outcome == "undone"
    assert (root / "build").read_bytes() == OLD
    assert (root.parent / "build.mine" / "out.o").read_bytes() == MADE


@pytest.mark.parametrize("action", [DELETE_BUILD, PATCH_BUILD], ids=["deleted", "patched"])
def test_a_passing_check_that_leaves_a_link_commits_and_undo_refuses_it(
    root: Path, action: Mapping[str, object]
) -> None:
    result = apply_plan(
        plan_of(action),
        root,
        check=with_outside(check(replace_with("link"), fails=False), root),
        allow_delete=True,
    )
    assert manifest(root)["status"] == "committed"
    assert result.check_returncode == 0

    with pytest.raises(ApplyError) as caught:
        undo(root)

    assert caught.value.code == "ERR_UNDO_CONFLICT"
    assert caught.value.details["paths"] == ["build"]
    assert what_is_at(root / "build") == placed("link", root)
    assert picture(outside_of(root)) == OUTSIDE_PICTURE
    # With the link gone, the undo gives the old file back.
    (root / "build").unlink()
    assert undo(root).outcome == "undone"
    assert (root / "build").read_bytes() == OLD
    assert picture(outside_of(root)) == OUTSIDE_PICTURE


# --- a crash while the check runs, then recover ----------------------------------------

# The apply's process dies while its check runs; the check (a real argv check, in its own
# session) has already put a directory where the plan deleted the file `build`.
CRASHING_APPLY = textwrap.dedent(
    """
    import json, sys
    from opsrun.protocol import apply_plan, parse_plan

    plan = parse_plan(json.dumps({"actions": [json.loads(sys.argv[2])], "summary": "s"}))
    apply_plan(plan, sys.argv[1], check=json.loads(sys.argv[3]), allow_delete=True)
    """
)
KILL_THE_APPLY = replace_with("dir") + "import signal\nos.kill(os.getppid(), signal.SIGKILL)\n"


def crash_during_check(root: Path) -> None:
    crashed = subprocess.run(
        [
            sys.executable,
            "-c",
            CRASHING_APPLY,
            str(root),
            json.dumps(DELETE_BUILD),
            json.dumps(check(KILL_THE_APPLY, fails=False)),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert crashed.returncode == -9, crashed.stderr
    assert manifest(root)["status"] == "prepared"


def test_recover_leaves_a_directory_a_check_put_over_a_deleted_file(root: Path) -> None:
    crash_during_check(root)

    outcome = recover(root)

    assert outcome.outcome == "rolled_back"
    assert what_is_at(root / "build") == ("dir", ["out.o"])
    assert (root / "build" / "out.o").read_bytes() == MADE
    assert outcome.not_restored == ("build",)
    assert outcome.saved_to == f".opsrun/saved/{outcome.tx_id}"
    assert (root / outcome.saved_to / "build").read_bytes() == OLD
    assert manifest(root)["status"] == "rolled_back"
    assert_not_wedged(root)


def test_recover_cut_short_at_any_call_ends_the_same(root: Path, tmp_path: Path) -> None:
    crash_during_check(root)
    counted = tmp_path / "counted"
    shutil.copytree(root, counted, symlinks=True)
    counter = FaultyFileSystem()
    recover(counted, fs=counter)
    expected = picture(counted)
    assert (counted / "build" / "out.o").read_bytes() == MADE

    for k in range(1, counter.calls + 1):
        copy = tmp_path / f"k{k}"
        shutil.copytree(root, copy, symlinks=True)
        with contextlib.suppress(ApplyError):
            recover(copy, fs=FaultyFileSystem(k))
        outcome = recover(copy)
        assert picture(copy) == expected, k
        assert outcome.outcome in ("rolled_back", "nothing"), k
        saved = copy / ".opsrun" / "saved" / manifest(copy)["tx_id"]
        assert os.listdir(saved) == ["build"], k
        assert (saved / "build").read_bytes() == OLD, k


def test_recover_finishing_an_undo_leaves_a_directory_put_over_a_deleted_file(
    root: Path,
) -> None:
    apply_plan(plan_of(DELETE_BUILD), root, allow_delete=True)
    # An undo interrupted after it wrote "undoing"; meanwhile a build made `build/`.
    tx = manifest(root)
    tx["status"] = "undoing"
    (root / ".opsrun" / "tx" / tx["tx_id"] / "manifest.json").write_text(json.dumps(tx))
    (root / "build").mkdir()
    (root / "build" / "out.o").write_bytes(MADE)

    outcome = recover(root)

    assert outcome.outcome == "undone"
    assert (root / "build" / "out.o").read_bytes() == MADE
    assert outcome.not_restored == ("build",)
    assert outcome.saved_to is not None
    assert (root / outcome.saved_to / "build").read_bytes() == OLD
    assert manifest(root)["status"] == "undone"


# --- what the command line shows --------------------------------------------------------


def run_cli(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    code = main(argv, stdin=io.StringIO(), stdout=out, stderr=io.StringIO())
    return code, out.getvalue()


def test_plan_recover_says_which_path_was_not_restored_and_where_the_old_file_is(
    root: Path,
) -> None:
    crash_during_check(root)

    code, out = run_cli(["plan", "recover", "--root", str(root)])

    assert code == 0
    assert out.startswith("recover: rolled_back")
    assert "note: 'build' not restored" in out
    assert ".opsrun/saved/" in out
    assert what_is_at(root / "build") == ("dir", ["out.o"])


def test_plan_apply_says_which_path_was_not_restored_and_where_the_old_file_is(
    root: Path, tmp_path: Path
) -> None:
    answer = tmp_path / "answer.json"
    answer.write_text(json.dumps({"actions": [DELETE_BUILD], "summary": "s"}))
    argv = ["plan", "apply", str(answer), "--root", str(root), "--allow-delete"]
    argv += ["--check", shlex.join(check(replace_with("dir")))]

    code, out = run_cli(argv)
    assert code == 1
    assert "not applied: ERR_CHECK_FAILED" in out
    assert "1 path was not restored" in out
    assert "'build'" in out
    assert ".opsrun/saved/" in out
    assert (root / "build" / "out.o").read_bytes() == MADE

    shutil.rmtree(root / "build")
    (root / "build").write_bytes(OLD)
    code, out = run_cli([*argv, "--json"])
    details = json.loads(out)["error"]["details"]
    assert code == 1
    assert details["not_restored"] == ["build"]
    assert (root / details["saved_to"] / "build").read_bytes() == OLD


def test_apply_reports_the_interrupted_transaction_it_finished_first(
    root: Path, tmp_path: Path
) -> None:
    crash_during_check(root)
    answer = tmp_path / "answer.json"
    answer.write_text(
        json.dumps(
            {"actions": [{"kind": "CREATE_FILE", "path": "x.txt", "content": "x"}], "summary": "s"}
        )
    )

    code, out = run_cli(["plan", "apply", str(answer), "--root", str(root)])

    assert code == 0, out
    assert "recovered first: rolled_back" in out
    assert "note: 'build' not restored" in out
    assert (root / "x.txt").read_text() == "x"
    assert what_is_at(root / "build") == ("dir", ["out.o"])


def test_apply_result_says_what_it_recovered_first(root: Path) -> None:
    crash_during_check(root)
    create = {"kind": "CREATE_FILE", "path": "x.txt", "content": "x"}

    result = apply_plan(plan_of(create), root)

    assert result.recovered is not None
    assert result.recovered.outcome == "rolled_back"
    assert result.recovered.not_restored == ("build",)
    assert apply_plan(plan_of({**create, "path": "y.txt"}), root).recovered is None
