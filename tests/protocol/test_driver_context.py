"""The driver's context rounds, diet and cache in a turn, and engineering memory."""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from opsrun.ports import LlmRequest
from opsrun.protocol import (
    ContextLimits,
    DriverConfig,
    FileMemory,
    InMemoryMemory,
    PlanDriver,
    PlanEvent,
    ProjectPrefs,
    UserPrefs,
)
from opsrun.testing import FunctionProvider, ScriptedProvider

pytestmark = pytest.mark.anyio

APP = "def parse(value):\n    return value.strip()\n"
UTIL = "def clean(text):\n    return text\n"


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def shown(request: LlmRequest) -> dict[str, str]:
    """path -> sha256 of every FILE block in the last user message."""
    return dict(
        re.findall(r"FILE\[([^\]]+)\] \(sha256=([0-9a-f]{64})", request.messages[-1].content)
    )


def plan(**fields: Any) -> str:
    return json.dumps({"actions": [], "summary": "a plan", **fields})


def read(*paths: str) -> list[dict[str, str]]:
    return [{"type": "read_file", "path": p} for p in paths]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "app.py").write_text(APP)
    (tmp_path / "util.py").write_text(UTIL)
    return tmp_path


def make(
    project: Path,
    provider: Any,
    events: list[PlanEvent] | None = None,
    memory: InMemoryMemory | None = None,
    **config: Any,
) -> PlanDriver:
    return PlanDriver(
        provider=provider,
        model="m",
        root=project,
        config=DriverConfig(**config),
        events=(events if events is not None else []).append,
        memory=memory if memory is not None else InMemoryMemory(),
    )


async def test_plan_asks_for_two_files_then_apply_patches_them_with_their_hashes(
    project: Path,
) -> None:
    def model(request: LlmRequest) -> str:
        prompt = request.messages[-1].content
        files = shown(request)
        if "MODE: PLAN" in prompt:
            if not files:
                return plan(context_requests=read("app.py", "util.py"))
            return plan(summary="Guard None in parse, strip in clean.")
        patches = [
            {
                "kind": "PATCH_FILE",
                "path": "app.py",
                "base_sha256": files["app.py"],
                "patch": "--- a/app.py\n+++ b/app.py\n@@ -1,2 +1,2 @@\n def parse(value):\n"
                "-    return value.strip()\n+    return (value or '').strip()\n",
            },
            {
                "kind": "PATCH_FILE",
                "path": "util.py",
                "base_sha256": files["util.py"],
                "patch": "--- a/util.py\n+++ b/util.py\n@@ -1,2 +1,2 @@\n def clean(text):\n"
                "-    return text\n+    return text.strip()\n",
            },
        ]
        return json.dumps({"actions": patches, "summary": "done"})

    provider = FunctionProvider(model)
    events: list[PlanEvent] = []
    driver = make(project, provider, events)
    planned = await driver.turn("plan: make parsing robust")

    assert planned.status == "planned"
    assert provider.calls == 2
    assert shown(provider.requests[0]) == {}
    assert shown(provider.requests[1]) == {"app.py": sha(APP), "util.py": sha(UTIL)}
    assert planned.trace["context_rounds"] == 1
    assert planned.trace["read_paths"] == ["app.py", "util.py"]
    saved = await driver.state.load()
    assert saved is not None
    assert [r.path for r in saved.context_requests] == ["app.py", "util.py"]
    misses = [e.fields["key"] for e in events if e.name == "CONTEXT_CACHE_MISS"]
    assert misses == ["app.py None None", "util.py None None"]

    applied = await driver.turn("ok")
    assert applied.status == "applied"
    assert shown(provider.requests[2]) == {"app.py": sha(APP), "util.py": sha(UTIL)}
    assert (project / "app.py").read_text().endswith("return (value or '').strip()\n")
    assert (project / "util.py").read_text().endswith("return text.strip()\n")
    assert applied.trace["cache_stats"]["misses"]["read"] == 2


async def test_context_rounds_stop_at_the_limit_and_the_rest_is_read_for_apply(
    project: Path,
) -> None:
    (project / "more.py").write_text("x = 1\n")
    provider = ScriptedProvider(
        [
            plan(context_requests=read("app.py")),
            plan(context_requests=read("util.py")),
            plan(context_requests=read("more.py")),  # the limit (2 rounds) is reached
            plan(summary="NO_CHANGES: all fine"),
        ],
        default=None,
    )
    driver = make(project, provider)
    planned = await driver.turn("plan: look around")
    assert planned.status == "planned"
    assert provider.calls == 3
    assert planned.trace["context_rounds"] == 2
    saved = await driver.state.load()
    assert saved is not None
    assert [r.path for r in saved.context_requests] == ["app.py", "util.py", "more.py"]
    result = await driver.turn("ok")
    assert result.status == "no_changes"
    assert set(shown(provider.requests[3])) == {"app.py", "util.py", "more.py"}


async def test_an_apply_answer_may_ask_for_context_first(project: Path) -> None:
    patch = {
        "kind": "PATCH_FILE",
        "path": "util.py",
        "base_sha256": sha(UTIL),
        "patch": "--- a/util.py\n+++ b/util.py\n@@ -1,2 +1,2 @@\n def clean(text):\n"
        "-    return text\n+    return text.strip()\n",
    }
    provider = ScriptedProvider(
        [
            plan(summary="need util.py", context_requests=read("util.py")),
            json.dumps({"actions": [patch]}),
        ],
        default=None,
    )
    result = await make(project, provider).turn("apply: strip in clean()")
    assert result.status == "applied"
    assert shown(provider.requests[1]) == {"util.py": sha(UTIL)}
    assert result.trace["context_rounds"] == 1
    assert result.plan is not None
    assert result.plan.summary == "Changes: PATCH_FILE util.py"  # written from the actions


async def test_the_diet_is_applied_and_reported(project: Path) -> None:
    (project / "big.py").write_text("# filler\n" * 5_000)
    provider = ScriptedProvider([plan(context_requests=read("big.py")), plan()], default=None)
    events: list[PlanEvent] = []
    result = await make(project, provider, events).turn("plan: read the big file")
    assert result.status == "planned"
    diet = [e for e in events if e.name == "CONTEXT_DIET_APPLIED"]
    assert len(diet) == 1
    assert diet[0].fields["truncated"] == 1
    assert diet[0].fields["dropped"] == 0
    stats = result.trace["context_stats"]
    assert stats["context_truncated_files_count"] == 1
    assert stats["context_files_count"] == 1
    prompt = provider.requests[1].messages[-1].content
    assert "...[TRUNCATED " in prompt
    assert shown(provider.requests[1]) == {"big.py": sha("# filler\n" * 5_000)}
    assert stats["context_total_chars"] <= ContextLimits().max_total_chars


async def test_a_traceback_in_the_report_is_read_before_the_first_call(project: Path) -> None:
    report = 'Traceback (most recent call last):\n  File "app.py", line 2, in parse\nAttributeError'
    provider = ScriptedProvider([plan()], default=None)
    result = await make(project, provider).turn("plan: why does it crash?", report=report)
    assert result.status == "planned"
    assert shown(provider.requests[0]) == {"app.py": sha(APP)}
    assert "lines 1-2):" in provider.requests[0].messages[-1].content  # 2-80..2+80, clamped
    off = ScriptedProvider([plan()], default=None)
    await make(project, off, auto_collect=False).turn("plan: why?", report=report)
    assert shown(off.requests[0]) == {}


# -- engineering memory ----------------------------------------------------------------------


async def test_the_memory_block_follows_the_system_prompt(project: Path) -> None:
    memory = InMemoryMemory(
        UserPrefs(preferred_style="brief"), ProjectPrefs(default_test_command="pytest -q")
    )
    provider = ScriptedProvider([plan()], default=None)
    await make(project, provider, memory=memory).turn("plan: anything")
    system = provider.requests[0].messages[0].content
    head, block = system.split(
        "ENGINEERING_MEMORY (trusted by user; update only when user requests):\n"
    )
    assert "Protocol v2" in head
    line = block.splitlines()[0]
    assert json.loads(line) == {
        "user": {"preferred_style": "brief"},
        "project": {"default_test_command": "pytest -q"},
    }
    empty = ScriptedProvider([plan()], default=None)
    await make(project, empty).turn("plan: anything")
    assert "ENGINEERING_MEMORY" not in empty.requests[0].messages[0].content


def saved_test_command(memory: InMemoryMemory) -> str | None:
    return memory.project.default_test_command


async def test_a_memory_patch_is_saved_only_when_the_user_asks(project: Path) -> None:
    patch = {"project.default_test_command": "pytest -x", "user.favourite_colour": "blue"}
    memory = InMemoryMemory()
    provider = ScriptedProvider([plan(memory_patch=patch), plan(memory_patch=patch)])
    driver = make(project, provider, memory=memory)

    ignored = await driver.turn("plan: tidy up")
    assert ignored.memory_applied == {}
    assert {v.code for v in ignored.memory_dropped} == {
        "ERR_MEMORY_PATCH_UNKNOWN_KEY",
        "ERR_MEMORY_PATCH_NOT_ALLOWED",
    }
    assert saved_test_command(memory) is None

    asked = await driver.turn("plan: remember that tests run with pytest -x")
    assert asked.memory_applied == {"project.default_test_command": "pytest -x"}
    assert [v.code for v in asked.memory_dropped] == ["ERR_MEMORY_PATCH_UNKNOWN_KEY"]
    assert saved_test_command(memory) == "pytest -x"
    assert asked.trace["memory"]["applied"] == ["project.default_test_command"]


async def test_a_memory_patch_of_the_wrong_type_is_rejected(project: Path) -> None:
    bad = plan(memory_patch={"user.ask_budget": "lots"})
    provider = ScriptedProvider([bad, plan()], default=None)
    result = await make(project, provider, memory_updates="always").turn("plan: x")
    assert result.status == "planned"  # the repair round dropped the bad patch
    assert "ERR_MEMORY_PATCH_TYPE" in provider.requests[1].messages[-1].content


async def test_file_memory_round_trip(
    project: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    user_file = tmp_path_factory.mktemp("home") / "prefs.json"
    store = FileMemory(user_file, project / ".opsrun" / "project.json")
    assert await store.load() == (UserPrefs(), ProjectPrefs())
    await store.save(UserPrefs(ask_budget=1), ProjectPrefs(src_roots=("src",)))
    assert json.loads(user_file.read_text()) == {"ask_budget": 1}
    assert json.loads((project / ".opsrun" / "project.json").read_text()) == {"src_roots": ["src"]}
    again = FileMemory(user_file, project / ".opsrun" / "project.json")
    assert await again.load() == (UserPrefs(ask_budget=1), ProjectPrefs(src_roots=("src",)))
    user_file.write_text('{"ask_budget": 9}')
    with pytest.raises(Exception) as caught:
        await again.load()
    assert getattr(caught.value, "code", None) == "memory_invalid"


async def test_the_project_test_command_is_the_default_check(project: Path) -> None:
    failing = f"{sys.executable} -c 'raise SystemExit(3)'"
    memory = InMemoryMemory(project=ProjectPrefs(default_test_command=failing))
    create = {"kind": "CREATE_FILE", "path": "new.py", "content": "x = 1\n"}
    provider = ScriptedProvider([json.dumps({"actions": [create], "summary": "add"})])
    result = await make(project, provider, memory=memory).turn("apply: add new.py")
    assert (result.status, result.error_code) == ("failed", "ERR_CHECK_FAILED")
    assert result.trace["check"] == "project.default_test_command"
    assert not (project / "new.py").exists()
    passing = ScriptedProvider([json.dumps({"actions": [create], "summary": "add"})])
    off = make(project, passing, memory=memory, use_project_test_command=False)
    assert (await off.turn("apply: add new.py")).status == "applied"
