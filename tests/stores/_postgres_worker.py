"""The worker function of the multi-process PostgreSQL tests (``test_postgres_processes.py``),
run in processes of their own (``_processes.start_worker``).

``postgres_worker(mode, dsn, schema, sync_dir, name)``, with ``mode``:

- ``turns``: open the stores, say ready, wait for the go signal, then claim the shared
  turn keys and run turns on the shared chat branch; return what happened.
- ``hold``: hold branch ``main`` of chat :data:`DEAD_CHAT`, say ready, wait for the go
  signal, append events 2 to :data:`FOLLOWED_EVENTS` of run :data:`FOLLOWED_RUN` in small
  batches (the last one ``run.finished``), then die without releasing the branch.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
from _processes import DEAD_CHAT, ready_then_wait, run_turns

from opsrun.model import MainLlmDelta, RunEvent, RunFinished, RunStatus, Trigger
from opsrun.stores.postgres import PostgresStores

FOLLOWED_RUN = "followed"
"""The run whose events another process appends while the test follows it."""
FOLLOWED_EVENTS = 30
"""Events of :data:`FOLLOWED_RUN`, ``run.finished`` last."""
T0 = datetime(2026, 1, 1, tzinfo=UTC)


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


async def events(stores: PostgresStores) -> None:
    for start in range(2, FOLLOWED_EVENTS + 1, 3):
        batch = [followed_event(s) for s in range(start, min(start + 3, FOLLOWED_EVENTS + 1))]
        await stores.runs.append_events(FOLLOWED_RUN, batch)


async def main(mode: str, dsn: str, schema: str, sync_dir: Path, name: str) -> dict[str, Any]:
    async with PostgresStores(dsn, schema=schema, migrate=False) as stores:
        if mode == "hold":
            async with stores.runs.hold_branch(DEAD_CHAT, "main"):
                ready_then_wait(sync_dir, name)
                await events(stores)
                os._exit(0)  # dies holding the branch: its connection ends with it
        return await run_turns(stores, sync_dir, name)


def postgres_worker(mode: str, dsn: str, schema: str, sync_dir: Path, name: str) -> dict[str, Any]:
    return anyio.run(main, mode, dsn, schema, sync_dir, name)
