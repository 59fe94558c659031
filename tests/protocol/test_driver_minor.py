"""Smaller driver guarantees: one driver across event loops, secrets masked in a failed
result, and a provider that raises something other than a ProviderError."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import anyio
import pytest

from opsrun.protocol import DriverConfig, InMemoryMemory, PlanDriver
from opsrun.testing import ScriptedProvider


def create(path: str) -> str:
    action = {"kind": "CREATE_FILE", "path": path, "content": "x\n"}
    return json.dumps({"actions": [action], "summary": "s"})


def test_one_driver_serves_event_loops_of_both_backends(tmp_path: Path) -> None:
    driver = PlanDriver(
        provider=ScriptedProvider([create("R.md"), create("S.md"), create("T.md")]),
        model="m",
        root=tmp_path,
        memory=InMemoryMemory(),
    )

    async def turn(message: str) -> str:
        return (await driver.turn(message)).status

    assert anyio.run(turn, "apply: add R.md", backend="asyncio") == "applied"
    assert anyio.run(turn, "apply: add S.md", backend="trio") == "applied"
    assert anyio.run(turn, "apply: add T.md", backend="asyncio") == "applied"
    assert sorted(p.name for p in tmp_path.glob("*.md")) == ["R.md", "S.md", "T.md"]


@pytest.mark.anyio
async def test_secrets_are_masked_in_a_failed_result(tmp_path: Path) -> None:
    key = "sk-proj-" + "Ab3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF"
    config = f'OPENAI_API_KEY = "{key}"\nTIMEOUT = 5\n'
    (tmp_path / "config.py").write_text(config)
    patch = (
        "--- a/config.py\n+++ b/config.py\n@@ -1,2 +1,2 @@\n"
        f' OPENAI_API_KEY = "{key}x"\n-TIMEOUT = 5\n+TIMEOUT = 10\n'
    )
    action = {
        "kind": "PATCH_FILE",
        "path": "config.py",
        "base_sha256": hashlib.sha256(config.encode()).hexdigest(),
        "patch": patch,
    }
    answer = json.dumps({"actions": [action], "summary": "raise the timeout"})
    driver = PlanDriver(
        provider=ScriptedProvider([answer, answer]),
        model="m",
        root=tmp_path,
        memory=InMemoryMemory(),
        config=DriverConfig(fallback_to_v1=False),
    )
    result = await driver.turn("apply: raise the timeout", report='File "config.py", line 2')

    assert (result.status, result.error_code) == ("failed", "ERR_PATCH_APPLY_FAILED")
    assert result.violations
    assert key not in (result.error_message or "")
    assert all(key not in v.message for v in result.violations)


@pytest.mark.anyio
async def test_a_provider_raising_an_unexpected_error_fails_the_turn(tmp_path: Path) -> None:
    driver = PlanDriver(
        provider=ScriptedProvider([ConnectionResetError("peer reset")]),
        model="m",
        root=tmp_path,
        memory=InMemoryMemory(),
    )
    result = await driver.turn("apply: add R.md")

    assert (result.status, result.error_code) == ("failed", "ERR_LLM_REQUEST_FAILED")
    assert "ConnectionResetError" in (result.error_message or "")
    assert [c["outcome"] for c in result.trace["calls"]] == ["provider_error"]
