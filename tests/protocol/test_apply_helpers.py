"""Helpers shared by the apply tests (no tests here): a sample project and a tree picture."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from opsrun.protocol import Action, ActionKind, Plan, sha256_hex

Picture = dict[str, tuple[object, ...]]


def picture(root: Path) -> Picture:
    """Every path under ``root`` except the journal: kind, mode and bytes or link target."""
    out: Picture = {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        if rel_dir == ".":
            dirnames[:] = [d for d in dirnames if d != ".opsrun"]
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            rel = os.path.normpath(os.path.join(rel_dir, name))
            st = os.lstat(full)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(full))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", stat.S_IMODE(st.st_mode))
            else:
                out[rel] = ("file", stat.S_IMODE(st.st_mode), Path(full).read_bytes())
    return out


def make_project(root: Path) -> None:
    """A small project with files to patch, replace, delete and a directory to delete."""
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("".join(f"line {i}\n" for i in range(1, 21)))
    (root / "src" / "util.py").write_text("def f():\n    return 1\n\n\ndef g():\n    return 2\n")
    os.chmod(root / "src" / "util.py", 0o755)
    (root / "old.txt").write_text("remove me\n")
    (root / "build" / "cache").mkdir(parents=True)
    (root / "build" / "cache" / "a.bin").write_bytes(b"\x00\x01binary")
    (root / "build" / "notes.md").write_text("notes\n")
    (root / "crlf.txt").write_bytes(b"one\r\ntwo\r\nthree\r\n")


def sample_plan(root: Path) -> Plan:
    """A plan touching every kind of action over :func:`make_project`'s tree."""
    app = (root / "src" / "app.py").read_bytes()
    util = (root / "src" / "util.py").read_bytes()
    crlf = (root / "crlf.txt").read_bytes()
    return Plan(
        version=2,
        summary="sample",
        actions=(
            Action(
                kind=ActionKind.PATCH_FILE,
                path="src/app.py",
                base_sha256=sha256_hex(app),
                patch=(
                    "--- a/src/app.py\n+++ b/src/app.py\n"
                    "@@ -4,3 +4,4 @@\n line 4\n-line 5\n+five\n+five and a half\n line 6\n"
                    "@@ -15,3 +16,3 @@\n line 15\n-line 16\n+sixteen\n line 17\n"
                ),
            ),
            Action(
                kind=ActionKind.REPLACE_RANGE,
                path="src/util.py",
                base_sha256=sha256_hex(util),
                start_line=5,
                end_line=6,
                content="def g():\n    return 3\n",
            ),
            Action(
                kind=ActionKind.PATCH_FILE,
                path="crlf.txt",
                base_sha256=sha256_hex(crlf),
                patch="@@ -1,3 +1,3 @@\n one\n-two\n+TWO\n three\n",
            ),
            Action(kind=ActionKind.CREATE_FILE, path="pkg/sub/new.py", content="x = 1\n"),
            Action(kind=ActionKind.CREATE_DIR, path="docs/guide"),
            Action(kind=ActionKind.DELETE_FILE, path="old.txt"),
            Action(kind=ActionKind.DELETE_DIR, path="build"),
        ),
    )


def small_plan(root: Path) -> Plan:
    """Four actions over :func:`make_project`'s tree: patch, create, delete file and directory."""
    app = (root / "src" / "app.py").read_bytes()
    return Plan(
        version=2,
        summary="small",
        actions=(
            Action(
                kind=ActionKind.PATCH_FILE,
                path="src/app.py",
                base_sha256=sha256_hex(app),
                patch="@@ -4,3 +4,3 @@\n line 4\n-line 5\n+five\n line 6\n",
            ),
            Action(kind=ActionKind.CREATE_FILE, path="pkg/new.py", content="x = 1\n"),
            Action(kind=ActionKind.DELETE_FILE, path="old.txt"),
            Action(kind=ActionKind.DELETE_DIR, path="build/cache"),
        ),
    )
