"""The worker functions of the multi-process SQLite tests (``test_sqlite_processes.py``),
each run in a process of its own (``_processes.start_worker``).

:func:`turns_worker`: open the stores, say ready, wait for the go signal, then claim the
shared turn keys and run turns on the shared chat branch; return what happened.

:func:`hold_worker`: hold branch ``main`` of chat :data:`DEAD_CHAT`, say ready and die
without releasing it.

:func:`stream_worker`: say ready, wait for the go signal, then run one slowly streamed
turn on chat :data:`STREAM_CHAT`; return its run id and status.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio
from _processes import DEAD_CHAT, ready_then_wait, run_turns

from opsrun.model import RunRequest
from opsrun.operations import OperationCatalog
from opsrun.runner import Runner
from opsrun.stores.sqlite import SqliteStores
from opsrun.testing import ScriptedMainLlm

DEAD_LEASE = 0.5
"""The branch lease of the process that dies (seconds)."""
STREAM_CHAT = "streamed"
"""The chat of the slowly streamed turn another process follows."""
STREAM_REPLY = "a reply that arrives in many small pieces"
"""The streamed turn's answer: ten pieces of four characters, 50 ms apart."""


async def turns(db: str, sync_dir: Path, name: str) -> dict[str, Any]:
    with SqliteStores(db) as stores:
        return await run_turns(stores, sync_dir, name)


async def hold(db: str, sync_dir: Path, name: str) -> None:
    stores = SqliteStores(db, branch_lease_seconds=DEAD_LEASE)
    async with stores.runs.hold_branch(DEAD_CHAT, "main"):
        (sync_dir / f"ready-{name}").touch()
        os._exit(0)  # dies holding the branch: no release, no more renewals


async def stream(db: str, sync_dir: Path, name: str) -> dict[str, Any]:
    with SqliteStores(db) as stores:
        ready_then_wait(sync_dir, name)
        main_llm = ScriptedMainLlm(default=STREAM_REPLY, chunk_size=4, delay=0.05)
        runner = Runner(catalog=OperationCatalog(), stores=stores, main_llm=main_llm)
        request = RunRequest(trigger="generate", chat_id=STREAM_CHAT, user_message="go on")
        result = await runner.run(request)
        return {"run_id": result.run.run_id, "status": result.status.value}


def turns_worker(db: str, sync_dir: Path, name: str) -> dict[str, Any]:
    return anyio.run(turns, db, sync_dir, name)


def hold_worker(db: str, sync_dir: Path, name: str) -> None:
    anyio.run(hold, db, sync_dir, name)


def stream_worker(db: str, sync_dir: Path, name: str) -> dict[str, Any]:
    return anyio.run(stream, db, sync_dir, name)
