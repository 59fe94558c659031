"""What the multi-process store tests share: the workers' turns and catalog, the profile
they run, and starting and watching worker processes.

The workers (``_sqlite_worker.py``, ``_postgres_worker.py``, ``_many_workers.py``) are
functions run in processes of their own, forked from one server process that imported
them and opsrun once (:func:`worker_context`); each reports through files in the
``sync_dir`` the test gives it.
"""

from __future__ import annotations

import json
import multiprocessing
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from multiprocessing.context import ForkServerContext
from multiprocessing.process import BaseProcess
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


PRELOAD = [
    "_processes",
    "_sqlite_worker",
    "_postgres_worker",
    "_many_workers",
    "opsrun.stores.sqlite",
    "opsrun.stores.postgres",
]
"""What the fork server imports before it forks workers (one missing, as the PostgreSQL
store without its extra, is left out)."""


def worker_context() -> ForkServerContext:
    """Worker processes forked from a server that imported :data:`PRELOAD` once.

    A spawned worker spends about a second of CPU importing opsrun before it does
    anything; the tests start a dozen. The fork server starts with the first worker and
    lives as long as the test process; it has no state of the tests, so its workers are
    as fresh as spawned ones.
    """
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)  # used when the server starts: always the same
    return context


@dataclass
class Worker:
    """A started worker process and where it reports."""

    process: BaseProcess
    sync_dir: Path
    name: str

    def report(self) -> Any:
        """What the worker function returned."""
        return json.loads((self.sync_dir / f"report-{self.name}.json").read_text())

    def problem(self) -> str:
        """Why the worker failed: its traceback, else its exit code."""
        error = self.sync_dir / f"error-{self.name}.txt"
        if error.exists():
            return error.read_text()
        return f"worker {self.name} exited with {self.process.exitcode}"


def _report(target: Callable[..., Any], sync_dir: str, name: str, args: tuple[Any, ...]) -> None:
    """In the worker: run ``target(*args)`` and write what it returns, or its traceback."""
    try:
        result = target(*args)
    except BaseException:
        Path(sync_dir, f"error-{name}.txt").write_text(traceback.format_exc())
        raise
    Path(sync_dir, f"report-{name}.json").write_text(json.dumps(result))


def start_worker(target: Callable[..., Any], sync_dir: Path, name: str, *args: Any) -> Worker:
    """Start a worker process running ``target(*args)``; its result is :meth:`Worker.report`.

    ``target`` must be a module-level function of a module in :data:`PRELOAD`.
    """
    process = worker_context().Process(
        target=_report, args=(target, str(sync_dir), name, args), name=f"worker-{name}"
    )
    process.start()
    return Worker(process, sync_dir, name)


def wait_until(done: Callable[[], bool], workers: list[Worker]) -> None:
    """Wait for ``done()``; fail at once when a worker fails."""
    deadline = time.monotonic() + 60  # a safety net for a hung worker, not a measurement
    while not done():
        for worker in workers:
            if worker.process.exitcode not in (None, 0):
                pytest.fail(f"a worker failed:\n{worker.problem()}")
        assert time.monotonic() < deadline, "workers did not get ready"
        time.sleep(0.01)


def join_workers(workers: list[Worker]) -> None:
    """Wait for the workers to end; fail unless each exited with status 0."""
    for worker in workers:
        worker.process.join(120)  # a safety net for a hung worker, not a measurement
    for worker in workers:
        assert worker.process.exitcode == 0, worker.problem()


def kill_workers(workers: list[Worker]) -> None:
    """Kill the workers still running (after a failure) and reap them."""
    for worker in workers:
        if worker.process.is_alive():
            worker.process.kill()
        worker.process.join()
