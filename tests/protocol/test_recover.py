"""A process killed mid-apply: recover() yields exactly the old or the new tree."""

from __future__ import annotations

import random
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

from opsrun.protocol._apply import apply_plan
from opsrun.protocol._fs import FaultyFileSystem
from opsrun.protocol._journal import recover, undo

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from test_apply_helpers import make_project, picture, sample_plan  # noqa: E402

CHILD = textwrap.dedent(
    """
    import os, signal, sys
    sys.path.insert(0, sys.argv[3])
    from test_apply_helpers import sample_plan
    from opsrun.protocol._apply import apply_plan
    from opsrun.protocol._fs import FileSystem

    class Killer(FileSystem):
        calls = 0
        def before(self, op):
            self.calls += 1
            if self.calls == int(sys.argv[2]):
                os.kill(os.getpid(), signal.SIGKILL)

    root = sys.argv[1]
    apply_plan(sample_plan(__import__("pathlib").Path(root)), root, allow_delete=True,
               fs=Killer())
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
    outcomes: set[str] = set()
    for k in points:
        root = tmp_path / f"kill{k}"
        shutil.copytree(source, root)
        done = subprocess.run(
            [sys.executable, "-c", CHILD, str(root), str(k), str(HERE)],
            capture_output=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == -9, done.stderr.decode()
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
