"""What the multi-process store tests share: the workers' turns and catalog, the profile
they run, and starting and watching worker processes.

Imported by the workers (``_sqlite_worker.py``, ``_postgres_worker.py``), which run as
scripts from this folder, and by the tests that start them.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from opsrun.model import (
    Hook,
    OperationConfig,
    OperationProfile,
    OperationResult,
    ProfileOperation,
    Run,
    RunRequest,
    Trigger,
    WindowRetention,
)
from opsrun.operations import OperationCatalog, OperationContext
from opsrun.ports import Stores
from opsrun.runner import Runner
from opsrun.testing import ScriptedMainLlm

KEYS = 12
"""Turn keys every process claims."""
TURNS = 4
"""Turns every process runs on the shared branch."""
CHAT = "chat"
"""The shared chat (branch ``main``)."""
DEAD_CHAT = "dead"
"""The chat whose branch ``main`` a process holds when it dies."""


def counter_catalog() -> OperationCatalog:
    """``count`` writes art.count = previous + 1, keeping two previous values."""
    catalog = OperationCatalog()

    @catalog.function("count", name="Count", write_tag="count")
    async def count(ctx: OperationContext) -> OperationResult:
        previous = ctx.art_value("count", 0)
        assert isinstance(previous, int)
        retention = WindowRetention(max_versions=2)
        return OperationResult.done(artifact=ctx.write(previous + 1, retention=retention))

    return catalog


COUNTER_PROFILE = OperationProfile(
    profile_id="counter",
    name="Counter",
    operation_profile_session_id="s1",
    operations=(
        ProfileOperation(
            operation_id="count",
            config=OperationConfig(hooks=(Hook.AFTER_MAIN_LLM,), order=1, required=True),
        ),
    ),
)
"""The profile the workers run (it suits :func:`counter_catalog`)."""


def ready_then_wait(sync_dir: Path, name: str) -> None:
    """Say ready, then wait for the go signal."""
    (sync_dir / f"ready-{name}").touch()
    while not (sync_dir / "go").exists():
        time.sleep(0.002)


async def run_turns(stores: Stores, sync_dir: Path, name: str) -> dict[str, Any]:
    """Once every worker is ready: claim the shared turn keys, then run turns on the
    shared chat branch; return what happened."""
    ready_then_wait(sync_dir, name)
    claims: dict[str, str] = {}
    for k in range(KEYS):
        run = Run(
            run_id=f"claim-{name}-{k}",
            trigger=Trigger.GENERATE,
            chat_id="claims",
            branch_id="main",
            user_message_id=f"u{k}",
            dedupe_key=f"key-{k}",
            started_at=datetime.now(UTC),
        )
        claims[f"key-{k}"] = (await stores.runs.claim(run)).run_id
    main_llm = ScriptedMainLlm(default="an answer", chunk_size=3)
    runner = Runner(catalog=counter_catalog(), stores=stores, main_llm=main_llm)
    done = []
    for t in range(TURNS):
        request = RunRequest(
            trigger="generate", chat_id=CHAT, profile_id="counter", user_message=f"{name}/{t}"
        )
        result = await runner.run(request)
        done.append({"run_id": result.run.run_id, "status": result.status.value})
    sent = [len(request.messages) for request in main_llm.requests]
    return {"claims": claims, "turns": done, "sent": sent}


def start_worker(worker: Path, *args: str) -> subprocess.Popen[str]:
    """``python worker args…`` with its output captured."""
    return subprocess.Popen(
        [sys.executable, str(worker), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_until(done: Callable[[], bool], processes: list[subprocess.Popen[str]]) -> None:
    """Wait for ``done()``; fail at once when a worker fails."""
    deadline = time.monotonic() + 60  # a safety net for a hung worker, not a measurement
    while not done():
        for process in processes:
            if process.poll() not in (None, 0):
                pytest.fail(f"a worker failed:\n{process.communicate()[1]}")
        assert time.monotonic() < deadline, "workers did not get ready"
        time.sleep(0.01)
