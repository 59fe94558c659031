"""One process of the multi-process PostgreSQL tests (``test_postgres_processes.py``).

``python _postgres_worker.py MODE DSN SCHEMA SYNC_DIR NAME``, with MODE:

- ``turns``: open the stores, say ready, wait for the go signal, then claim the shared
  turn keys and run turns on the shared chat branch; print what happened as one JSON line.
- ``hold``: hold branch ``main`` of chat :data:`DEAD_CHAT`, say ready, wait for the go
  signal, append events 2 to :data:`FOLLOWED_EVENTS` of run :data:`FOLLOWED_RUN` in small
  batches (the last one ``run.finished``), then die without releasing the branch.
"""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio

from opsrun.model import (
    MainLlmDelta,
    OperationResult,
    RunEvent,
    RunFinished,
    RunRequest,
    RunStatus,
    Trigger,
    WindowRetention,
)
from opsrun.model import Run as RunRecord
from opsrun.operations import OperationCatalog, OperationContext
from opsrun.runner import Runner
from opsrun.stores.postgres import PostgresStores
from opsrun.testing import ScriptedMainLlm

KEYS = 12
"""Turn keys every process claims."""
TURNS = 4
"""Turns every process runs on the shared branch."""
CHAT = "chat"
"""The shared chat (branch ``main``)."""
DEAD_CHAT = "dead"
"""The chat whose branch ``main`` a process holds when it dies."""
FOLLOWED_RUN = "followed"
"""The run whose events another process appends while the test follows it."""
FOLLOWED_EVENTS = 30
"""Events of :data:`FOLLOWED_RUN`, ``run.finished`` last."""
T0 = datetime(2026, 1, 1, tzinfo=UTC)


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


def followed_event(seq: int) -> RunEvent:
    """Event ``seq`` of :data:`FOLLOWED_RUN`."""
    base: dict[str, Any] = {
        "seq": seq,
        "ts": T0 + timedelta(milliseconds=seq),
        "run_id": FOLLOWED_RUN,
        "chat_id": "follow",
        "user_message_id": "u1",
        "trigger": Trigger.GENERATE,
    }
    if seq == FOLLOWED_EVENTS:
        return RunFinished(**base, status=RunStatus.DONE)
    return MainLlmDelta(**base, text=f"part {seq}")


def _ready_then_wait(sync_dir: Path, name: str) -> None:
    (sync_dir / f"ready-{name}").touch()
    while not (sync_dir / "go").exists():
        time.sleep(0.002)


async def turns(stores: PostgresStores, sync_dir: Path, name: str) -> dict[str, Any]:
    _ready_then_wait(sync_dir, name)
    claims: dict[str, str] = {}
    for k in range(KEYS):
        run = RunRecord(
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


async def events(stores: PostgresStores) -> None:
    for start in range(2, FOLLOWED_EVENTS + 1, 3):
        batch = [followed_event(s) for s in range(start, min(start + 3, FOLLOWED_EVENTS + 1))]
        await stores.runs.append_events(FOLLOWED_RUN, batch)


async def main(mode: str, dsn: str, schema: str, sync_dir: Path, name: str) -> None:
    async with PostgresStores(dsn, schema=schema, migrate=False) as stores:
        if mode == "hold":
            async with stores.runs.hold_branch(DEAD_CHAT, "main"):
                _ready_then_wait(sync_dir, name)
                await events(stores)
                os._exit(0)  # dies holding the branch: its connection ends with it
        else:
            print(json.dumps(await turns(stores, sync_dir, name)))


if __name__ == "__main__":
    mode, dsn, schema, sync_dir, name = sys.argv[1:6]
    anyio.run(main, mode, dsn, schema, Path(sync_dir), name)
