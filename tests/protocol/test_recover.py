"""A process killed mid-apply: recover() yields exactly the old or the new tree."""

from __future__ import annotations

import random
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

from opsrun.protocol import apply_plan, recover, undo
from opsrun.testing import FaultyFileSystem

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from test_apply_helpers import make_project, picture, sample_plan  # noqa: E402

# Imports opsrun once, then forks one process per (root, k) pair; each is killed by
# SIGKILL at its k-th system call through the real FileSystem, fsync included.
CHILD = textwrap.dedent(
    """
    import os, signal, sys, traceback
    from pathlib import Path
    sys.path.insert(0, sys.argv[1])
    from test_apply_helpers import sample_plan
    from opsrun.protocol import FileSystem, apply_plan

    class Killer(FileSystem):
        def __init__(self, kill_at):
            self.kill_at = kill_at
            self.calls = 0
        def before(self, op):
            self.calls += 1
            if self.calls == self.kill_at:
                os.kill(os.getpid(), signal.SIGKILL)

    for root, k in zip(sys.argv[2::2], sys.argv[3::2]):
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                apply_plan(sample_plan(Path(root)), root, allow_delete=True, fs=Killer(int(k)))
            except BaseException:
                traceback.print_exc()
                code = 1
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        print(k, os.waitstatus_to_exitcode(status), flush=True)
    """
)


def test_killed_apply_recovers_to_old_or_new_tree(tmp_path: Path) -> None:
    source = tmp_path / "source"
    make_project(source)
    old_picture = picture(source)
    probe = tmp_path / "probe"
    shutil.copytree(source, probe)
    counter = FaultyFileSystem()
    apply_plan(sample_plan(probe), probe, allow_delete=True, fs=counter)
    new_picture = picture(probe)
    rng = random.Random(20240601)
    points = sorted({1, counter.calls, *rng.sample(range(2, counter.calls), 10)})
    roots = {k: tmp_path / f"kill{k}" for k in points}
    for root in roots.values():
        shutil.copytree(source, root)
    pairs = [str(item) for k, root in roots.items() for item in (root, k)]
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(HERE), *pairs],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    exits = dict(line.split() for line in done.stdout.splitlines())
    assert exits == {str(k): "-9" for k in points}, done.stderr
    outcomes: set[str] = set()
    for k, root in roots.items():
        recover(root)
        after = picture(root)
        assert after in (old_picture, new_picture), k
        outcomes.add("old" if after == old_picture else "new")
        if after == new_picture:
            undo(root)
            assert picture(root) == old_picture
    assert outcomes == {"old", "new"} or outcomes == {"old"}


def test_recover_on_a_clean_root_does_nothing(tmp_path: Path) -> None:
    make_project(tmp_path)
    before = picture(tmp_path)
    assert recover(tmp_path).outcome == "nothing"
    assert picture(tmp_path) == before
