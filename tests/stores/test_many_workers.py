"""Many worker processes on one shared store, one of them killed in the middle of a run.

Four worker processes (``_many_workers.py``) run 50 submissions each on ten shared
chats, so several of them work on one chat branch at the same time; some submissions
repeat another worker's turn with the same idempotency key. One worker is killed
(SIGKILL) while a run of its holds a branch; another then resubmits that worker's turns.
Afterwards the store is read back and every guarantee is checked on what it holds. No
test asserts anything about time; the processes only wait for leases to run out.
"""

from __future__ import annotations

import importlib
import os
import signal
import sqlite3
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

import anyio
import pytest
from _many_workers import (
    CHATS,
    PROFILE,
    RECOVERER,
    SESSION,
    VICTIM,
    WORKERS,
    Target,
    chat_id,
    counter_profile,
    open_stores,
    plan,
    read_journal,
    unique_turns,
    work,
)
from _processes import worker_context

from opsrun.model import (
    Artifact,
    ChatMessage,
    ChatRole,
    OperationProfileSessionKey,
    OperationRun,
    OperationStatus,
    Run,
    RunEvent,
    RunStatus,
)

SAFETY_SECONDS = 120
"""How long the workers may take before the test gives up on them (not a measurement)."""


@dataclass
class Outcome:
    """What the workers reported and what the store holds afterwards."""

    journals: dict[int, list[dict[str, Any]]]
    victim_run: str
    """The run the victim was killed in."""
    histories: dict[str, list[ChatMessage]]
    counters: dict[str, Artifact | None]
    runs: dict[str, tuple[Run, list[OperationRun]]]
    """Every run any worker started, by id."""
    events: dict[str, list[RunEvent]]
    stored_run_ids: set[str]
    """Every run id the store holds, read from its table."""

    def entries(self, kind: str) -> list[dict[str, Any]]:
        """Journal entries of every worker that have the key ``kind`` (``llm``, ``submitted``)."""
        return [entry for w in range(WORKERS) for entry in self.journals[w] if kind in entry]


def _errors(sync_dir: Path, worker: int) -> str:
    """The tracebacks ``worker`` journaled."""
    journal = read_journal(sync_dir / f"worker-{worker}.jsonl")
    return "".join(entry["error"] for entry in journal if "error" in entry)


def _wait_until(
    done: Callable[[], bool], processes: Sequence[BaseProcess], sync_dir: Path, what: str
) -> None:
    deadline = time.monotonic() + SAFETY_SECONDS
    while not done():
        for w, process in enumerate(processes):
            if process.exitcode not in (None, 0):
                pytest.fail(f"worker {w} failed:\n{_errors(sync_dir, w)}")
        assert time.monotonic() < deadline, f"the workers did not {what}"
        time.sleep(0.005)


def _run_workers(target: Target, sync_dir: Path) -> str:
    """Start the workers, kill the victim inside a run, wait for the others; returns the
    victim's run id."""
    context = worker_context()
    processes = [
        context.Process(target=work, args=(target, str(sync_dir), w), name=f"worker-{w}")
        for w in range(WORKERS)
    ]
    for process in processes:
        process.start()
    try:
        ready = [sync_dir / f"ready-{w}" for w in range(WORKERS)]
        _wait_until(lambda: all(p.exists() for p in ready), processes, sync_dir, "get ready")
        (sync_dir / "go").touch()
        inside = sync_dir / "victim-inside"
        _wait_until(inside.exists, processes, sync_dir, "reach the kill point")
        victim = processes[VICTIM]
        victim.kill()
        victim.join()
        (sync_dir / "killed").touch()
        for process in processes:
            process.join(SAFETY_SECONDS)
    finally:
        for process in processes:
            if process.is_alive():
                process.kill()
                process.join()
    for w, process in enumerate(processes):
        if w != VICTIM:
            assert process.exitcode == 0, f"worker {w} failed:\n{_errors(sync_dir, w)}"
    assert processes[VICTIM].exitcode == -signal.SIGKILL
    return inside.read_text()


async def _save_profile(target: Target) -> None:
    async with open_stores(target) as stores:
        await stores.profiles.save_profile(counter_profile())


async def _read_back(
    target: Target, run_ids: set[str]
) -> tuple[
    dict[str, list[ChatMessage]],
    dict[str, Artifact | None],
    dict[str, tuple[Run, list[OperationRun]]],
    dict[str, list[RunEvent]],
]:
    histories: dict[str, list[ChatMessage]] = {}
    counters: dict[str, Artifact | None] = {}
    runs: dict[str, tuple[Run, list[OperationRun]]] = {}
    events: dict[str, list[RunEvent]] = {}
    async with open_stores(target) as stores:
        for index in range(CHATS):
            chat = chat_id(index)
            histories[chat] = await stores.chats.history(chat, "main")
            key = OperationProfileSessionKey(
                chat_id=chat,
                branch_id="main",
                profile_ref=PROFILE,
                operation_profile_session_id=SESSION,
            )
            counters[chat] = (await stores.sessions.get_artifacts(key)).get("count")
        for run_id in sorted(run_ids):
            runs[run_id] = await stores.runs.get_run(run_id)
            events[run_id] = await stores.runs.events(run_id)
    return histories, counters, runs, events


def _stored_run_ids(target: Target) -> set[str]:
    """Every run id the store holds, read from its table."""
    if target.backend == "sqlite":
        with sqlite3.connect(target.location) as conn:
            return {run_id for (run_id,) in conn.execute("SELECT run_id FROM runs")}
    from psycopg import connect, sql

    with connect(target.location) as conn:
        query = sql.SQL("SELECT run_id FROM {}.runs").format(sql.Identifier(target.schema))
        return {run_id for (run_id,) in conn.execute(query)}


@contextmanager
def _postgres_schema() -> Iterator[Target]:
    """A schema of its own in the test server, dropped afterwards; skipped (failed with
    ``CI=true``) when the server or the PostgreSQL store is missing."""
    try:
        support: Any = importlib.import_module("_postgres_support")
    except ImportError as exc:
        message = f"the PostgreSQL store cannot be imported: {exc}"
        if os.environ.get("CI") == "true":
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    dsn: str = support.require_postgres()
    schema: str = support.new_schema()
    try:
        yield Target("postgres", dsn, schema)
    finally:
        support.drop_schema(dsn, schema)


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def outcome(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Outcome:
    """What the workers left in a SQLite file, or in a PostgreSQL schema."""
    root = tmp_path_factory.mktemp(f"many-workers-{request.param}")
    if request.param == "sqlite":
        return _observe(Target("sqlite", str(root / "chat.db")), root)
    with _postgres_schema() as target:
        return _observe(target, root)


def _observe(target: Target, root: Path) -> Outcome:
    """Run the workers on ``target`` and read back what they left."""
    anyio.run(_save_profile, target)
    victim_run = _run_workers(target, root)
    journals = {w: read_journal(root / f"worker-{w}.jsonl") for w in range(WORKERS)}
    run_ids = {victim_run}
    for entries in journals.values():
        run_ids |= {e["llm"] for e in entries if "llm" in e}
        run_ids |= {e["run_id"] for e in entries if "submitted" in e}
    histories, counters, runs, events = anyio.run(_read_back, target, run_ids)
    return Outcome(
        journals=journals,
        victim_run=victim_run,
        histories=histories,
        counters=counters,
        runs=runs,
        events=events,
        stored_run_ids=_stored_run_ids(target),
    )


def _killed_turn(outcome: Outcome) -> str:
    return outcome.runs[outcome.victim_run][0].user_message_id


def test_every_submission_of_a_turn_gets_the_one_done_run(outcome: Outcome) -> None:
    survivors = [w for w in range(WORKERS) if w != VICTIM]
    submitted = outcome.entries("submitted")
    assert {e["status"] for e in submitted} == {"done"}
    # every survivor submitted its whole plan; the recoverer the victim's too
    for w in survivors:
        expected = [t.turn_id for t in plan(w)]
        if w == RECOVERER:
            expected += [t.turn_id for t in plan(VICTIM)]
        assert [e["submitted"] for e in outcome.journals[w] if "submitted" in e] == expected
    run_of_turn: defaultdict[str, set[str]] = defaultdict(set)
    for entry in submitted:
        run_of_turn[entry["submitted"]].add(entry["run_id"])
    assert set(run_of_turn) == {t.turn_id for t in unique_turns()}
    assert {turn: len(ids) for turn, ids in run_of_turn.items() if len(ids) != 1} == {}
    repeats = sum(e["deduplicated"] for e in submitted)
    assert repeats >= len(submitted) - len(run_of_turn)


def test_every_turn_is_answered_exactly_once(outcome: Outcome) -> None:
    killed = _killed_turn(outcome)
    calls = Counter(e["turn"] for e in outcome.entries("llm"))
    expected_calls = {t.turn_id: 2 if t.turn_id == killed else 1 for t in unique_turns()}
    assert dict(calls) == expected_calls  # the killed call, then one after the take-over
    for chat, history in outcome.histories.items():
        planned = sorted(t.turn_id for t in unique_turns() if t.chat_id == chat)
        users = sorted(m.message_id for m in history if m.role == ChatRole.USER)
        answers = [m for m in history if m.role == ChatRole.ASSISTANT]
        assert users == planned
        assert sorted(str(m.turn_id) for m in answers) == planned
        assert all(m.prompt_text == f"answer to {m.turn_id}" for m in answers)


def _pairs_in_order(messages: list[ChatMessage]) -> bool:
    """True when ``messages`` are user, assistant, user, … with each answer after its turn."""
    roles = [m.role for m in messages]
    if roles != [ChatRole.USER, ChatRole.ASSISTANT] * (len(messages) // 2):
        return False
    return all(
        a.turn_id == u.message_id for u, a in zip(messages[::2], messages[1::2], strict=True)
    )


def test_history_alternates_apart_from_the_taken_over_turn(outcome: Outcome) -> None:
    # The branch hold serialises the workers' turns on each chat: without the killed
    # turn, every branch is user, assistant, … with each answer right after its turn.
    killed = _killed_turn(outcome)
    for chat, history in outcome.histories.items():
        rest = [m for m in history if killed not in (m.message_id, m.turn_id)]
        assert _pairs_in_order(rest), chat
    # The killed turn's user message stays where its run stored it; the answer of the
    # run that took the turn over names it (docs/engine.md, "Failed and aborted turns").
    (chat,) = [c for c, h in outcome.histories.items() if any(m.message_id == killed for m in h)]
    ids = [m.message_id if m.role == ChatRole.USER else m.turn_id for m in outcome.histories[chat]]
    assert ids.count(killed) == 2
    assert outcome.histories[chat][ids.index(killed)].role == ChatRole.USER


def test_every_prompt_alternates_and_ends_with_its_turn(outcome: Outcome) -> None:
    for entry in outcome.entries("llm"):
        roles = [role for role in entry["roles"] if role != "system"]
        assert roles == ["user", "assistant"] * (len(roles) // 2) + ["user"], entry


def test_no_artifact_write_is_lost(outcome: Outcome) -> None:
    writers: defaultdict[str, list[int]] = defaultdict(list)
    for run, operation_runs in outcome.runs.values():
        if run.status == RunStatus.ABORTED:
            continue
        written = [
            e.version
            for e in run.applied_effects
            if e.type == "artifact.write" and e.tag == "count" and e.version is not None
        ]
        if written:
            writers[run.chat_id] += written
            continue
        # a write that lost its compare-and-set is surfaced as a conflict
        (count,) = [o for o in operation_runs if o.operation_id == "count"]
        assert count.status == OperationStatus.ERROR, run.run_id
        assert count.error is not None
        assert count.error.code == "artifact_conflict", run.run_id
    for chat, counter in outcome.counters.items():
        assert counter is not None, chat
        versions = sorted(writers[chat])
        assert versions == list(range(1, len(versions) + 1)), chat
        assert (counter.version, counter.value) == (len(versions), len(versions)), chat


def test_every_run_is_finished_and_the_killed_one_taken_over(outcome: Outcome) -> None:
    statuses = Counter(run.status for run, _ in outcome.runs.values())
    assert statuses == {RunStatus.DONE: len(unique_turns()), RunStatus.ABORTED: 1}
    killed, _ = outcome.runs[outcome.victim_run]
    assert (killed.status, killed.abort_reason) == (RunStatus.ABORTED, "lease_expired")
    assert outcome.stored_run_ids == set(outcome.runs)  # no run the workers did not report


def test_every_run_has_a_gap_free_event_log(outcome: Outcome) -> None:
    for run_id, events in outcome.events.items():
        assert [e.seq for e in events] == list(range(1, len(events) + 1)), run_id
        # The killed run's log is what reached the store before the kill (events are
        # stored in batches): a prefix, possibly empty.
        if events:
            assert events[0].type == "run.started", run_id
        if run_id != outcome.victim_run:
            assert events, run_id
            assert [e.type for e in events].count("run.finished") == 1, run_id
            assert events[-1].type == "run.finished", run_id
