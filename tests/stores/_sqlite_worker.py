"""One process of the multi-process SQLite tests (``test_sqlite_processes.py``).

``python _sqlite_worker.py turns DB SYNC_DIR NAME``: open the stores, say ready, wait for
the go signal, then claim the shared turn keys and run turns on the shared chat branch;
print what happened as one JSON line.

``python _sqlite_worker.py hold DB SYNC_DIR NAME``: hold branch ``main`` of chat
:data:`DEAD_CHAT`, say ready and die without releasing it.

``python _sqlite_worker.py stream DB SYNC_DIR NAME``: say ready, wait for the go signal,
then run one slowly streamed turn on chat :data:`STREAM_CHAT`; print its run id and
status as one JSON line.
"""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio

from opsrun.model import OperationResult, Run, RunRequest, Trigger, WindowRetention
from opsrun.operations import OperationCatalog, OperationContext
from opsrun.runner import Runner
from opsrun.stores.sqlite import SqliteStores
from opsrun.testing import ScriptedMainLlm

KEYS = 12
"""Turn keys every process claims."""
TURNS = 4
"""Turns every process runs on the shared branch."""
CHAT = "chat"
"""The shared chat (branch ``main``)."""
DEAD_CHAT = "dead"
"""The chat whose branch ``main`` a process holds when it dies."""
DEAD_LEASE = 0.5
"""The branch lease of the process that dies (seconds)."""
STREAM_CHAT = "streamed"
"""The chat of the slowly streamed turn another process follows."""
STREAM_REPLY = "a reply that arrives in many small pieces"
"""The streamed turn's answer: ten pieces of four characters, 50 ms apart."""


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


def _ready_then_wait(sync_dir: Path, name: str) -> None:
    (sync_dir / f"ready-{name}").touch()
    while not (sync_dir / "go").exists():
        time.sleep(0.002)


async def turns(db: str, sync_dir: Path, name: str) -> dict[str, Any]:
    with SqliteStores(db) as stores:
        _ready_then_wait(sync_dir, name)
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


async def hold(db: str, sync_dir: Path, name: str) -> None:
    stores = SqliteStores(db, branch_lease_seconds=DEAD_LEASE)
    async with stores.runs.hold_branch(DEAD_CHAT, "main"):
        (sync_dir / f"ready-{name}").touch()
        os._exit(0)  # dies holding the branch: no release, no more renewals


async def stream(db: str, sync_dir: Path, name: str) -> dict[str, Any]:
    with SqliteStores(db) as stores:
        _ready_then_wait(sync_dir, name)
        main_llm = ScriptedMainLlm(default=STREAM_REPLY, chunk_size=4, delay=0.05)
        runner = Runner(catalog=OperationCatalog(), stores=stores, main_llm=main_llm)
        request = RunRequest(trigger="generate", chat_id=STREAM_CHAT, user_message="go on")
        result = await runner.run(request)
        return {"run_id": result.run.run_id, "status": result.status.value}


def main() -> None:
    mode, db, sync_dir, name = sys.argv[1:5]
    if mode == "hold":
        anyio.run(hold, db, Path(sync_dir), name)
    elif mode == "stream":
        print(json.dumps(anyio.run(stream, db, Path(sync_dir), name)))
    else:
        print(json.dumps(anyio.run(turns, db, Path(sync_dir), name)))


if __name__ == "__main__":
    main()
