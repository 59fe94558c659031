"""Fail the k-th file-system call of an apply, for every k, and check the tree afterwards."""

from __future__ import annotations

import contextlib
import shutil
import sys
from pathlib import Path

import pytest

from opsrun.errors import ApplyError
from opsrun.protocol import apply_plan, recover, undo
from opsrun.testing import FaultyFileSystem

sys.path.insert(0, str(Path(__file__).parent))
from test_apply_helpers import Picture, make_project, picture, sample_plan, small_plan

PLANS = {"small": small_plan, "sample": sample_plan}
# These tests check what the tree holds, not durability: every call goes through a
# FaultyFileSystem, which skips real fsync (test_apply and test_recover use the real one).
NO_FAULT = FaultyFileSystem()
Template = tuple[Path, Picture, int]


def build(base: Path, plan_name: str) -> Template:
    """The project, its picture after the plan, and the calls a clean apply makes."""
    root = base / "project"
    make_project(root)
    work = base / "count"
    shutil.copytree(root, work, symlinks=True)
    counter = FaultyFileSystem()
    apply_plan(PLANS[plan_name](work), work, allow_delete=True, fs=counter)
    assert counter.calls > 50
    return root, picture(work), counter.calls


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Template:
    return build(tmp_path_factory.mktemp("template"), "sample")


def fresh(template_root: Path, tmp: Path, name: str) -> Path:
    root = tmp / name
    shutil.copytree(template_root, root, symlinks=True)
    return root


@pytest.mark.parametrize("persistent", [False, True], ids=["once", "from-then-on"])
@pytest.mark.parametrize(("plan_name", "stride"), [("small", 1), ("sample", 7)])
def test_failing_call_leaves_old_or_new_tree(
    tmp_path: Path, persistent: bool, plan_name: str, stride: int
) -> None:
    """Every call of the small plan (every 7th of the larger one) fails in turn."""
    source, new_picture, calls = build(tmp_path / "template", plan_name)
    old_picture = picture(source)
    for k in [*range(1, calls + 2, stride), calls]:
        root = fresh(source, tmp_path, f"k{k}")
        plan = PLANS[plan_name](root)
        fs = FaultyFileSystem(k, persistent=persistent)
        code = ""
        try:
            apply_plan(plan, root, allow_delete=True, fs=fs)
        except ApplyError as exc:
            code = exc.code
        if code:
            # One fault: the in-process rollback already restored everything.
            expected = {"ERR_IO", "ERR_ROLLBACK_FAILED"} if persistent else {"ERR_IO"}
            assert code in expected, (k, code)
            if not persistent:
                assert picture(root) == old_picture, k
            recover(root, fs=NO_FAULT)
            assert picture(root) == old_picture, k
        else:
            assert picture(root) == new_picture, k
            # A fault the apply could shrug off (pruning old journals) left a clean state.
            assert recover(root, fs=NO_FAULT).outcome == "nothing"
            undo(root, fs=NO_FAULT)
            assert picture(root) == old_picture, k
        shutil.rmtree(root)


def test_a_failure_inside_recover_is_finished_by_the_next_recover(
    template: Template, tmp_path: Path
) -> None:
    source, _, calls = template
    old_picture = picture(source)
    for k in range(5, calls, max(1, calls // 12)):
        root = fresh(source, tmp_path, f"r{k}")
        try:
            apply_plan(
                sample_plan(root), root, allow_delete=True, fs=FaultyFileSystem(k, persistent=True)
            )
        except ApplyError:
            pass
        else:  # pragma: no cover - only the commit's final directory sync may fail harmlessly
            continue
        # Count recover's calls on a copy, then fail each of them in turn.
        probe = fresh(root, tmp_path, f"p{k}")
        counter = FaultyFileSystem()
        recover(probe, fs=counter)
        assert picture(probe) == old_picture
        for j in range(1, counter.calls + 1, max(1, counter.calls // 8)):
            attempt = fresh(root, tmp_path, f"r{k}-{j}")
            with pytest.raises(ApplyError):
                recover(attempt, fs=FaultyFileSystem(j, persistent=True))
            # A second interrupted recover, failing once, before the one that finishes.
            with contextlib.suppress(ApplyError):
                recover(attempt, fs=FaultyFileSystem(j + 1))
            recover(attempt, fs=NO_FAULT)
            assert picture(attempt) == old_picture, (k, j)
            assert recover(attempt, fs=NO_FAULT).outcome == "nothing"
            shutil.rmtree(attempt)


def test_a_failure_inside_undo_is_finished_by_recover(template: Template, tmp_path: Path) -> None:
    source, new_picture, _ = template
    old_picture = picture(source)
    root = fresh(source, tmp_path, "u")
    apply_plan(sample_plan(root), root, allow_delete=True, fs=NO_FAULT)
    probe = fresh(root, tmp_path, "u-probe")
    counter = FaultyFileSystem()
    undo(probe, fs=counter)
    for j in range(1, counter.calls + 1, max(1, counter.calls // 15)):
        attempt = fresh(root, tmp_path, f"u{j}")
        with contextlib.suppress(ApplyError):
            undo(attempt, fs=FaultyFileSystem(j, persistent=True))
        recover(attempt, fs=NO_FAULT)
        assert picture(attempt) in (old_picture, new_picture), j
        if picture(attempt) == new_picture:
            undo(attempt, fs=NO_FAULT)  # the undo had not started: it can simply be run again
        assert picture(attempt) == old_picture, j
        shutil.rmtree(attempt)
