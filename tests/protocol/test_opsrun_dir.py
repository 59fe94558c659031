"""Every writer of ``.opsrun`` (journal, traces, saved plan, project memory) prepares it
the same way: its ``.gitignore`` is written, and a linked ``.opsrun`` is refused."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from opsrun.protocol import (
    DriverConfig,
    FileMemory,
    FilePlanState,
    PlanDriver,
    SavedPlan,
    parse_plan,
)
from opsrun.protocol._trace import write_trace
from opsrun.testing import ScriptedProvider

pytestmark = pytest.mark.anyio

PLAN = json.dumps(
    {
        "actions": [],
        "summary": "Diagnosis",
        "memory_patch": {"project.default_test_command": "pytest -q"},
    }
)


def driver(root: Path, user_file: Path) -> PlanDriver:
    return PlanDriver(
        provider=ScriptedProvider([PLAN]),
        model="m",
        root=root,
        state=FilePlanState(root / ".opsrun" / "driver" / "plan.json"),
        memory=FileMemory(user_file, root / ".opsrun" / "project.json"),
        config=DriverConfig(write_traces=True),
    )


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
async def test_a_plan_turn_keeps_opsrun_out_of_git_status(tmp_path: Path) -> None:
    root = tmp_path / "project"
    root.mkdir()
    (root / "app.py").write_text("print(1)\n")
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    result = await driver(root, tmp_path / "user.json").turn(
        "plan: fix it, and remember to test with pytest -q"
    )
    assert result.status == "planned"
    assert (root / ".opsrun" / "driver" / "plan.json").is_file()
    assert (root / ".opsrun" / "project.json").is_file()

    status = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert sorted(status) == ["?? .opsrun/project.json", "?? app.py"]


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs links")
async def test_no_writer_follows_a_linked_opsrun(tmp_path: Path) -> None:
    root = tmp_path / "project"
    root.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(elsewhere, root / ".opsrun")

    state = FilePlanState(root / ".opsrun" / "driver" / "plan.json")
    plan = parse_plan(json.dumps({"actions": [], "summary": "s"}), version=2)
    saved = SavedPlan(
        goal="g", plan=plan, protocol_version=2, trace_id="t", saved_at=datetime.now(UTC)
    )
    with pytest.raises(OSError) as caught:
        await state.save(saved)
    assert caught.value.errno == errno.ELOOP

    assert write_trace(root, {"trace_id": "t"}) is None

    memory = FileMemory(tmp_path / "user.json", root / ".opsrun" / "project.json")
    with pytest.raises(OSError):
        await memory.update({"project.default_test_command": "pytest -q"})

    assert list(elsewhere.rglob("*")) == []
