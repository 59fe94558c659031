"""A contract subclass that forgets to provide its stores fails with a clear message."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SUITE = """
from opsrun.testing import StoreContract


class TestForgotten(StoreContract):
    pass
"""


def test_a_subclass_without_the_stores_fixture_fails_clearly(tmp_path: Path) -> None:
    (tmp_path / "test_forgotten.py").write_text(SUITE)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x",
         "-k", "asyncio", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 1
    assert "TestForgotten must override the `stores` fixture" in done.stdout
    assert "NotImplementedError" not in done.stdout
