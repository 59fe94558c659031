"""Saving engineering memory: a failed save never loses the turn, concurrent drivers keep
each other's keys, and the project's test command must be a command line."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest

from opsrun.ports import LlmRequest
from opsrun.protocol import (
    DriverConfig,
    FileMemory,
    InMemoryMemory,
    PlanDriver,
    ProjectPrefs,
    check_memory_patch,
)
from opsrun.testing import FunctionProvider, ScriptedProvider

pytestmark = pytest.mark.anyio


def create(memory_patch: dict[str, Any] | None = None) -> str:
    action = {"kind": "CREATE_FILE", "path": "R.md", "content": "x\n"}
    doc: dict[str, Any] = {"actions": [action], "summary": "add R"}
    if memory_patch is not None:
        doc["memory_patch"] = memory_patch
    return json.dumps(doc)


def broken_user_file(tmp_path: Path) -> Path:
    """A preferences file that reads as missing but cannot be written: its name is so
    long that the temporary file written beside it exceeds the 255-byte name limit."""
    folder = tmp_path.parent / f"{tmp_path.name}-user"
    folder.mkdir()
    return folder / ("p" * 243 + ".json")


async def test_a_failed_memory_save_after_a_commit_is_reported(tmp_path: Path) -> None:
    memory = FileMemory(broken_user_file(tmp_path), tmp_path / ".opsrun" / "project.json")
    driver = PlanDriver(
        provider=ScriptedProvider([create({"user.preferred_style": "brief"})]),
        model="m",
        root=tmp_path,
        memory=memory,
        config=DriverConfig(write_traces=True),
    )
    result = await driver.turn("apply: add R.md, and remember: answer briefly")

    assert (result.status, result.error_code) == ("applied", None)
    assert (tmp_path / "R.md").read_text() == "x\n"
    assert result.memory_applied == {}
    assert [(v.code, v.severity) for v in result.memory_dropped] == [
        ("ERR_MEMORY_SAVE_FAILED", "warning")
    ]
    assert (tmp_path / ".opsrun" / "traces" / f"{result.trace_id}.json").is_file()


async def test_only_the_scope_the_patch_changes_is_written(tmp_path: Path) -> None:
    project_file = tmp_path / ".opsrun" / "project.json"
    memory = FileMemory(broken_user_file(tmp_path), project_file)
    driver = PlanDriver(
        provider=ScriptedProvider([create({"project.default_test_command": "pytest -q"})]),
        model="m",
        root=tmp_path,
        memory=memory,
        config=DriverConfig(use_project_test_command=False),
    )
    result = await driver.turn("apply: add R.md, and remember to test with pytest -q")

    assert result.status == "applied"
    assert result.memory_applied == {"project.default_test_command": "pytest -q"}
    assert result.memory_dropped == ()
    assert json.loads(project_file.read_text()) == {"default_test_command": "pytest -q"}


async def test_two_drivers_on_one_root_keep_each_others_keys(tmp_path: Path) -> None:
    user_file = tmp_path.parent / f"{tmp_path.name}-user.json"
    project_file = tmp_path / ".opsrun" / "project.json"
    gate = anyio.Event()

    def answering(key: str, value: str, wait: bool) -> FunctionProvider:
        async def answer(request: LlmRequest) -> str:
            if wait:
                await gate.wait()  # answers after the other driver saved
            return json.dumps({"actions": [], "summary": "ok", "memory_patch": {key: value}})

        return FunctionProvider(answer)

    def make(provider: FunctionProvider) -> PlanDriver:
        return PlanDriver(
            provider=provider,
            model="m",
            root=tmp_path,
            memory=FileMemory(user_file, project_file),
        )

    late = make(answering("project.default_lint_command", "ruff check .", wait=True))
    early = make(answering("project.default_test_command", "pytest -q", wait=False))
    async with anyio.create_task_group() as group:
        group.start_soon(late.turn, "plan: remember to lint with ruff")
        await anyio.sleep(0)  # the late turn has loaded memory and waits for its model
        await early.turn("plan: remember to test with pytest -q")
        gate.set()

    assert json.loads(project_file.read_text()) == {
        "default_test_command": "pytest -q",
        "default_lint_command": "ruff check .",
    }


async def test_concurrent_updates_of_one_file_keep_every_key(tmp_path: Path) -> None:
    memory = FileMemory(tmp_path / "user.json", tmp_path / ".opsrun" / "project.json")
    keys = [
        ("project.default_test_command", "pytest -q"),
        ("project.default_lint_command", "ruff check ."),
        ("project.default_format_command", "ruff format ."),
        ("project.package_manager", "uv"),
        ("project.build_command", "make"),
        ("project.ci_notes", "GitHub Actions"),
    ]
    barrier = threading.Barrier(len(keys))

    def update(key: str, value: str) -> None:
        barrier.wait()
        anyio.run(memory.update, {key: value})

    threads = [threading.Thread(target=update, args=kv) for kv in keys]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    _, project = await memory.load()
    assert {f"project.{k}": v for k, v in project.model_dump().items() if v} == dict(keys)


async def test_an_unsplittable_project_test_command_fails_the_turn(tmp_path: Path) -> None:
    memory = InMemoryMemory(project=ProjectPrefs(default_test_command="sh -c 'exit 1"))
    driver = PlanDriver(
        provider=ScriptedProvider([create()]), model="m", root=tmp_path, memory=memory
    )
    result = await driver.turn("apply: add R.md")

    assert (result.status, result.error_code) == ("failed", "ERR_CHECK_COMMAND_INVALID")
    assert "default_test_command" in (result.error_message or "")
    assert not (tmp_path / "R.md").exists()
    assert result.trace["check"] == "project.default_test_command"


def test_a_memory_patch_with_an_unsplittable_command_is_refused() -> None:
    clean, problems = check_memory_patch(
        {
            "project.default_test_command": "sh -c 'exit 1",
            "project.default_lint_command": "ruff check .",
        }
    )
    assert clean == {"project.default_lint_command": "ruff check ."}
    assert [(v.code, v.severity) for v in problems] == [("ERR_MEMORY_PATCH_TYPE", "error")]
