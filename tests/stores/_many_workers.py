"""One worker process of the many-worker store test (``test_many_workers.py``).

Every worker opens the shared store, says ready, waits for the go signal and submits its
list of turns (:func:`plan`) one after another, on chats that the other workers use at
the same time. Some submissions repeat another worker's turn with the same
``client_request_id`` and ``user_message_id`` (a client retrying through another
worker). The worker :data:`VICTIM` stops in the main LLM call of :data:`KILL_TURN` and
waits there to be killed. The worker :data:`RECOVERER` waits for that death halfway
through its list, goes on with its own turns (some on the dead run's chat), and then
submits the victim's whole list again, as clients that retry would: the dead run's turn
is taken over once its leases ran out, after later turns of its chat were answered.

Each worker appends what happened to ``SYNC_DIR/worker-N.jsonl``, one JSON object a
line: ``{"llm": run_id, "turn": ..., "roles": [...]}`` for each main LLM call (with the
roles of the prompt it received), ``{"submitted": ..., "run_id": ..., "status": ...,
"deduplicated": ...}`` for each finished submission, ``{"error": traceback}`` when it
failed, and ``{"finished": true}`` at the end.
"""

from __future__ import annotations

import importlib
import json
import traceback
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, TextIO

import anyio

from opsrun.model import (
    Hook,
    OperationConfig,
    OperationProfile,
    OperationResult,
    ProfileOperation,
    RunRequest,
)
from opsrun.operations import OperationCatalog, OperationContext
from opsrun.ports import MainLlmDone, MainLlmRequest, ProviderCapabilities, Stores
from opsrun.runner import MainLlmRetry, Runner

WORKERS = 4
"""Worker processes."""
CHATS = 10
"""Chats the workers share (branch ``main`` of each)."""
OWN_TURNS = 40
"""Turns of each worker's own; with its repeats of another's, it submits 50."""
REPEAT_EVERY = 4
"""After every fourth own turn, a worker repeats the next worker's turn of that position."""
VICTIM = 3
"""The worker that is killed (SIGKILL) in the middle of a run."""
KILL_TURN = "w3-t01"
"""The victim waits to be killed in the main LLM call of this turn of its own (which no
other worker repeats)."""
RECOVERER = 0
"""The worker that resubmits the victim's turns once the victim is dead."""
RECOVERER_WAITS_AT = 25
"""The recoverer waits for the victim's death before this submission of its list."""
BRANCH_LEASE = 1.5
"""Seconds a dead worker's branch hold outlives it (the stores' branch lease)."""
RUN_LEASE = 0.6
"""Seconds of the runner's lease on a run: short, so that the dead run's lease runs out
soon. The recoverer waits for that before it resubmits the dead run's turn (a claim
before then gets the dead run back: docs/engine.md, "Leases")."""
PROFILE = "counter"
"""The profile every turn runs: ``count`` after the main LLM."""
SESSION = "s1"
"""Its operation profile session."""
POLL = 0.005
"""Seconds between looks at a signal file."""


@dataclass(frozen=True)
class Turn:
    """One chat turn of the plan; its id is also the user message id."""

    chat_id: str
    turn_id: str

    @property
    def client_request_id(self) -> str:
        """The idempotency key every submission of this turn carries."""
        return f"req-{self.turn_id}"

    def request(self) -> RunRequest:
        """The request a client sends for this turn (the same for every submission)."""
        return RunRequest(
            trigger="generate",
            chat_id=self.chat_id,
            profile_id=PROFILE,
            user_message=f"message {self.turn_id}",
            user_message_id=self.turn_id,
            client_request_id=self.client_request_id,
        )


def chat_id(index: int) -> str:
    """The id of shared chat ``index`` (0 to ``CHATS - 1``)."""
    return f"chat-{index}"


def own_turns(worker: int) -> list[Turn]:
    """The turns ``worker`` submits first: its position ``j`` goes to chat ``(j + w) % 10``,
    so the workers cycle through the chats side by side and meet on them."""
    return [Turn(chat_id((j + worker) % CHATS), f"w{worker}-t{j:02d}") for j in range(OWN_TURNS)]


def plan(worker: int) -> list[Turn]:
    """Everything ``worker`` submits, in order: its own turns with repeats mixed in."""
    mine = own_turns(worker)
    theirs = own_turns((worker + 1) % WORKERS)
    submissions: list[Turn] = []
    for j, turn in enumerate(mine):
        submissions.append(turn)
        if j % REPEAT_EVERY == REPEAT_EVERY - 1:
            submissions.append(theirs[j])
    return submissions


def unique_turns() -> list[Turn]:
    """Every turn of the plan once."""
    return [turn for worker in range(WORKERS) for turn in own_turns(worker)]


def counter_catalog() -> OperationCatalog:
    """``count`` writes art.count = previous + 1 (so its version counts its writes)."""
    catalog = OperationCatalog()

    @catalog.function("count", name="Count", write_tag="count")
    async def count(ctx: OperationContext) -> OperationResult:
        previous = ctx.art_value("count", 0)
        assert isinstance(previous, int)
        return OperationResult.done(artifact=ctx.write(previous + 1))

    return catalog


def counter_profile() -> OperationProfile:
    """The profile of every turn: ``count``, required, after the main LLM."""
    counter_catalog()  # the workers' catalog: the profile must suit it
    config = OperationConfig(hooks=(Hook.AFTER_MAIN_LLM,), order=1, required=True)
    return OperationProfile(
        profile_id=PROFILE,
        name="Counter",
        operation_profile_session_id=SESSION,
        operations=(ProfileOperation(operation_id="count", config=config),),
    )


@dataclass(frozen=True)
class Target:
    """The shared store: a SQLite file, or a schema of a PostgreSQL database."""

    backend: Literal["sqlite", "postgres"]
    location: str
    """The SQLite file, or the PostgreSQL DSN."""
    schema: str = ""
    """The PostgreSQL schema."""


@asynccontextmanager
async def open_stores(target: Target) -> AsyncIterator[Stores]:
    """The shared stores, open (a dead holder's SQLite branch frees after
    :data:`BRANCH_LEASE`; PostgreSQL frees it when the holder's connection ends)."""
    if target.backend == "sqlite":
        from opsrun.stores.sqlite import SqliteStores

        with SqliteStores(target.location, branch_lease_seconds=BRANCH_LEASE) as stores:
            yield stores
    else:
        # Imported by name: the module needs the postgres extra.
        postgres: Any = importlib.import_module("opsrun.stores.postgres")
        async with postgres.PostgresStores(target.location, schema=target.schema) as stores:
            yield stores


class Journal:
    """The worker's line-per-event log, flushed line by line so a kill loses nothing."""

    def __init__(self, path: Path) -> None:
        self._file: TextIO = path.open("a", encoding="utf-8", buffering=1)

    def write(self, **entry: Any) -> None:
        self._file.write(json.dumps(entry) + "\n")

    def close(self) -> None:
        self._file.close()


class AnsweringLlm:
    """Answers ``answer to <turn>`` at once and journals each call with its prompt roles.

    In the victim, the call of :data:`KILL_TURN` says so (writing its run id to
    ``victim-inside``) and waits there to be killed.
    """

    capabilities = ProviderCapabilities()

    def __init__(self, journal: Journal, sync_dir: Path, *, victim: bool) -> None:
        self._journal = journal
        self._sync_dir = sync_dir
        self._victim = victim

    def stream(self, request: MainLlmRequest) -> AsyncIterator[str | MainLlmDone]:
        return self._reply(request)

    async def _reply(self, request: MainLlmRequest) -> AsyncIterator[str | MainLlmDone]:
        roles = [message.role for message in request.messages]
        self._journal.write(llm=request.run_id, turn=request.user_message_id, roles=roles)
        if self._victim and request.user_message_id == KILL_TURN:
            inside = self._sync_dir / "victim-inside"
            inside.with_suffix(".tmp").write_text(request.run_id)
            inside.with_suffix(".tmp").rename(inside)
            await anyio.sleep(600)  # killed here
        text = f"answer to {request.user_message_id}"
        yield text
        yield MainLlmDone(text=text)


async def _wait_for(path: Path) -> None:
    while not path.exists():
        await anyio.sleep(POLL)


async def _submit(runner: Runner, turns: list[Turn], journal: Journal) -> None:
    for turn in turns:
        result = await runner.run(turn.request())
        journal.write(
            submitted=turn.turn_id,
            run_id=result.run.run_id,
            status=result.status.value,
            deduplicated=result.deduplicated,
        )


async def _wait_for_lease_to_run_out(stores: Stores, run_id: str) -> None:
    """Wait until the lease of the dead run ``run_id`` has run out (a retry before that
    gets the dead run back, as docs/engine.md says)."""
    run, _ = await stores.runs.get_run(run_id)
    expires = run.lease_expires_at
    while expires is not None and datetime.now(UTC) <= expires:
        await anyio.sleep(POLL)


async def _work(target: Target, sync_dir: Path, worker: int) -> None:
    journal = Journal(sync_dir / f"worker-{worker}.jsonl")
    try:
        async with open_stores(target) as stores:
            main_llm = AnsweringLlm(journal, sync_dir, victim=worker == VICTIM)
            runner = Runner(
                catalog=counter_catalog(),
                stores=stores,
                main_llm=main_llm,
                lease_seconds=RUN_LEASE,
                main_llm_retry=MainLlmRetry(max_attempts=1),
            )
            (sync_dir / f"ready-{worker}").touch()
            await _wait_for(sync_dir / "go")
            turns = plan(worker)
            if worker == RECOVERER:
                await _submit(runner, turns[:RECOVERER_WAITS_AT], journal)
                await _wait_for(sync_dir / "killed")
                await _submit(runner, turns[RECOVERER_WAITS_AT:], journal)
                dead_run = (sync_dir / "victim-inside").read_text()
                await _wait_for_lease_to_run_out(stores, dead_run)
                await _submit(runner, plan(VICTIM), journal)
            else:
                await _submit(runner, turns, journal)
        journal.write(finished=True)
    except BaseException:
        journal.write(error=traceback.format_exc())
        raise
    finally:
        journal.close()


def work(target: Target, sync_dir: str, worker: int) -> None:
    """The worker process: run the plan of ``worker`` against the shared store."""
    anyio.run(_work, target, Path(sync_dir), worker)


def read_journal(path: Path) -> list[dict[str, Any]]:
    """The entries a worker journaled (none when it never started)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
