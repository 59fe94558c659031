"""SQLite stores shared by real processes: one winner per turn key, one run per branch.

The workers (``_sqlite_worker.py``) start together on a go signal, so their claims and
turns overlap; no test asserts anything about time.
"""

from __future__ import annotations

import json
import sqlite3
from contextlib import aclosing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from _processes import (
    CHAT,
    COUNTER_PROFILE,
    DEAD_CHAT,
    KEYS,
    TURNS,
    join_workers,
    kill_workers,
    start_worker,
    wait_until,
)
from _sqlite_worker import STREAM_CHAT, STREAM_REPLY, hold_worker, stream_worker, turns_worker

from opsrun.model import (
    ChatRole,
    MainLlmDelta,
    OperationProfileSessionKey,
    RunEvent,
    RunStatus,
)
from opsrun.operations import OperationCatalog
from opsrun.runner import Runner
from opsrun.stores.sqlite import SqliteStores
from opsrun.testing import ScriptedMainLlm

WORKERS = 3


@dataclass
class Outcome:
    db: Path
    reports: list[dict[str, Any]]


async def _save_profile(db: Path) -> None:
    with SqliteStores(db) as stores:
        await stores.profiles.save_profile(COUNTER_PROFILE)


@pytest.fixture(scope="module")
def outcome(tmp_path_factory: pytest.TempPathFactory) -> Outcome:
    """Three processes claim the same turn keys, then run turns on one chat branch; a
    fourth holds another branch and dies."""
    root = tmp_path_factory.mktemp("processes")
    db = root / "chat.db"
    anyio.run(_save_profile, db)
    names = [str(n) for n in range(WORKERS)]
    workers = [start_worker(hold_worker, root, "dead", str(db), root, "dead")] + [
        start_worker(turns_worker, root, n, str(db), root, n) for n in names
    ]
    try:
        ready = ["dead", *names]
        wait_until(lambda: all((root / f"ready-{n}").exists() for n in ready), workers)
        (root / "go").touch()
        join_workers(workers)
    finally:
        kill_workers(workers)
    return Outcome(db, [worker.report() for worker in workers[1:]])


def _query(db: Path, sql: str, *params: object) -> list[tuple[Any, ...]]:
    with sqlite3.connect(db) as conn:
        return conn.execute(sql, params).fetchall()


def test_processes_claiming_one_turn_key_get_one_run(outcome: Outcome) -> None:
    for k in range(KEYS):
        winners = {report["claims"][f"key-{k}"] for report in outcome.reports}
        assert len(winners) == 1, winners
    stored = _query(outcome.db, "SELECT dedupe_key, run_id FROM runs WHERE chat_id = 'claims'")
    assert sorted(stored) == sorted(outcome.reports[0]["claims"].items())


async def _chat_state(db: Path) -> tuple[Any, ...]:
    key = OperationProfileSessionKey(
        chat_id=CHAT, branch_id="main", profile_ref="counter", operation_profile_session_id="s1"
    )
    with SqliteStores(db) as stores:
        history = await stores.chats.history(CHAT, "main")
        count = (await stores.sessions.get_artifacts(key))["count"]
        archived = await stores.archive.versions(key, "count")
        return history, count, archived


def test_turns_of_processes_on_one_branch_take_turns(outcome: Outcome) -> None:
    total = WORKERS * TURNS
    assert {t["status"] for report in outcome.reports for t in report["turns"]} == {"done"}
    history, count, archived = anyio.run(_chat_state, outcome.db)
    assert [m.role for m in history] == [ChatRole.USER, ChatRole.ASSISTANT] * total
    for user, assistant in zip(history[::2], history[1::2], strict=True):
        assert assistant.turn_id == user.message_id
    # every turn saw every earlier turn answered: prompts of 1, 3, 5, … messages
    sent = sorted(n for report in outcome.reports for n in report["sent"])
    assert sent == list(range(1, 2 * total, 2))
    # each turn's artifact write was based on the previous turn's: no conflict, no loss
    assert (count.value, count.version) == (total, total)
    assert [item.version.version for item in archived] == list(range(total - 3, 0, -1))


def test_no_event_of_any_run_is_lost(outcome: Outcome) -> None:
    run_ids = [t["run_id"] for report in outcome.reports for t in report["turns"]]
    assert len(set(run_ids)) == WORKERS * TURNS
    for run_id in run_ids:
        rows = _query(
            outcome.db, "SELECT seq, data FROM events WHERE run_id = ? ORDER BY seq", run_id
        )
        types = [json.loads(data)["type"] for _, data in rows]
        assert [seq for seq, _ in rows] == list(range(1, len(rows) + 1))
        assert types[0] == "run.started"
        assert types[-1] == "run.finished"
        assert types.count("run.finished") == 1


def test_a_branch_held_by_a_process_that_died_is_free_once_its_lease_runs_out(
    outcome: Outcome,
) -> None:
    held = "SELECT owner FROM branch_queue WHERE chat_id = ?"
    assert len(_query(outcome.db, held, DEAD_CHAT)) == 1  # it died holding the branch

    async def take_over() -> None:
        with SqliteStores(outcome.db) as stores, anyio.fail_after(30):
            async with stores.runs.hold_branch(DEAD_CHAT, "main"):
                pass

    anyio.run(take_over)
    assert _query(outcome.db, held, DEAD_CHAT) == []


async def _follow_the_streamed_run(db: Path) -> tuple[list[RunEvent], list[RunEvent], bool]:
    """Follow the other process's run from its start: what was followed, what is stored,
    and whether the run was still running when its first event arrived here."""
    with SqliteStores(db) as stores, anyio.fail_after(60):
        runner = Runner(catalog=OperationCatalog(), stores=stores, main_llm=ScriptedMainLlm())
        while not (page := await stores.runs.list_runs(STREAM_CHAT)).items:
            await anyio.sleep(0.005)
        run_id = page.items[0].run_id
        followed: list[RunEvent] = []
        running_at_first = False
        async with aclosing(runner.follow(run_id)) as events:
            async for event in events:
                if not followed:
                    run, _ = await stores.runs.get_run(run_id)
                    running_at_first = run.status == RunStatus.RUNNING
                followed.append(event)
        return followed, await stores.runs.events(run_id), running_at_first


def test_a_run_executing_in_another_process_is_followed_to_its_end(tmp_path: Path) -> None:
    db = tmp_path / "chat.db"
    SqliteStores(db).close()
    streamer = start_worker(stream_worker, tmp_path, "streamer", str(db), tmp_path, "streamer")
    try:
        wait_until(lambda: (tmp_path / "ready-streamer").exists(), [streamer])
        (tmp_path / "go").touch()
        followed, stored, running_at_first = anyio.run(_follow_the_streamed_run, db)
        join_workers([streamer])
    finally:
        kill_workers([streamer])
    report = streamer.report()
    assert report["status"] == "done"
    assert running_at_first  # events were appended while this process followed
    assert followed == stored
    assert {event.run_id for event in followed} == {report["run_id"]}
    assert followed[-1].type == "run.finished"
    assert "".join(e.text for e in followed if isinstance(e, MainLlmDelta)) == STREAM_REPLY
