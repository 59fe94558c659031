"""PostgreSQL stores shared by real processes: one winner per turn key, one run per branch,
a dead holder's branch freed by its connection, a run followed while another process
appends its events.

The workers (``_postgres_worker.py``) start together on a go signal, so their claims and
turns overlap; no test asserts anything about time.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from _postgres_support import drop_schema, new_schema, postgres_for_module
from _postgres_worker import FOLLOWED_EVENTS, FOLLOWED_RUN, followed_event, postgres_worker
from _processes import (
    CHAT,
    COUNTER_PROFILE,
    DEAD_CHAT,
    KEYS,
    TURNS,
    Worker,
    join_workers,
    kill_workers,
    start_worker,
    wait_until,
)

from opsrun.model import (
    ArchivedVersion,
    Artifact,
    ChatMessage,
    ChatRole,
    OperationProfileSessionKey,
    Run,
    RunEvent,
    Trigger,
)
from opsrun.stores.postgres import PostgresStores

DSN = postgres_for_module()
WORKERS = 3


@dataclass
class Outcome:
    dsn: str
    schema: str
    reports: list[dict[str, Any]]
    """What each ``turns`` worker printed."""
    followed: list[RunEvent]
    """The events this process followed while the ``events`` worker appended them."""


def _start(mode: str, dsn: str, schema: str, sync_dir: Path, name: str) -> Worker:
    return start_worker(postgres_worker, sync_dir, name, mode, dsn, schema, sync_dir, name)


async def _prepare(dsn: str, schema: str) -> None:
    """The schema, the workers' profile, and the followed run with its first event."""
    followed = Run(
        run_id=FOLLOWED_RUN,
        trigger=Trigger.GENERATE,
        chat_id="follow",
        branch_id="main",
        user_message_id="u1",
        started_at=followed_event(1).ts,
    )
    async with PostgresStores(dsn, schema=schema) as stores:
        await stores.profiles.save_profile(COUNTER_PROFILE)
        await stores.runs.claim(followed)
        await stores.runs.append_events(FOLLOWED_RUN, [followed_event(1)])


async def _follow_then_go(dsn: str, schema: str, sync_dir: Path) -> list[RunEvent]:
    """Follow the run; once the first event came (the follower listens), let the workers
    go: the ``hold`` worker appends the others while this process follows."""
    followed: list[RunEvent] = []
    async with PostgresStores(dsn, schema=schema) as stores:
        with anyio.fail_after(60):  # a safety net, not a measurement
            async for event in stores.runs.follow(FOLLOWED_RUN):
                followed.append(event)
                (sync_dir / "go").touch()
    return followed


@pytest.fixture(scope="module")
def outcome(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Outcome]:
    """Three processes claim the same turn keys, then run turns on one chat branch; a
    fourth holds another branch, appends the events of a run this process follows, and
    dies holding the branch."""
    dsn, schema = DSN, new_schema()
    root = tmp_path_factory.mktemp("postgres-processes")
    try:
        anyio.run(_prepare, dsn, schema)
        names = [str(n) for n in range(WORKERS)]
        workers = [
            _start("hold", dsn, schema, root, "dead"),
            *(_start("turns", dsn, schema, root, n) for n in names),
        ]
        try:
            ready = ["dead", *names]
            wait_until(lambda: all((root / f"ready-{n}").exists() for n in ready), workers)
            followed = anyio.run(_follow_then_go, dsn, schema, root)
            join_workers(workers)
        finally:
            kill_workers(workers)
        reports = [worker.report() for worker in workers[1:]]
        yield Outcome(dsn, schema, reports, followed)
    finally:
        drop_schema(dsn, schema)


@dataclass
class _Stored:
    claims: list[Run]
    history: list[ChatMessage]
    count: Artifact
    archived: list[ArchivedVersion]
    events: dict[str, list[RunEvent]]


async def _read(outcome: Outcome) -> _Stored:
    key = OperationProfileSessionKey(
        chat_id=CHAT, branch_id="main", profile_ref="counter", operation_profile_session_id="s1"
    )
    run_ids = [t["run_id"] for report in outcome.reports for t in report["turns"]]
    async with PostgresStores(outcome.dsn, schema=outcome.schema) as stores:
        claims = (await stores.runs.list_runs("claims", limit=100)).items
        return _Stored(
            claims=list(claims),
            history=await stores.chats.history(CHAT, "main"),
            count=(await stores.sessions.get_artifacts(key))["count"],
            archived=await stores.archive.versions(key, "count"),
            events={run_id: await stores.runs.events(run_id) for run_id in run_ids},
        )


@pytest.fixture(scope="module")
def stored(outcome: Outcome) -> _Stored:
    return anyio.run(_read, outcome)


def test_processes_claiming_one_turn_key_get_one_run(outcome: Outcome, stored: _Stored) -> None:
    for k in range(KEYS):
        winners = {report["claims"][f"key-{k}"] for report in outcome.reports}
        assert len(winners) == 1, winners
    assert sorted((run.dedupe_key, run.run_id) for run in stored.claims) == sorted(
        outcome.reports[0]["claims"].items()
    )


def test_turns_of_processes_on_one_branch_take_turns(outcome: Outcome, stored: _Stored) -> None:
    total = WORKERS * TURNS
    assert {t["status"] for report in outcome.reports for t in report["turns"]} == {"done"}
    assert [m.role for m in stored.history] == [ChatRole.USER, ChatRole.ASSISTANT] * total
    for user, assistant in zip(stored.history[::2], stored.history[1::2], strict=True):
        assert assistant.turn_id == user.message_id
    # every turn saw every earlier turn answered: prompts of 1, 3, 5, … messages
    sent = sorted(n for report in outcome.reports for n in report["sent"])
    assert sent == list(range(1, 2 * total, 2))
    # each turn's artifact write was based on the previous turn's: no conflict, no loss
    assert (stored.count.value, stored.count.version) == (total, total)
    assert [item.version.version for item in stored.archived] == list(range(total - 3, 0, -1))


def test_no_event_of_any_run_is_lost(outcome: Outcome, stored: _Stored) -> None:
    assert len(stored.events) == WORKERS * TURNS
    for events in stored.events.values():
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        types = [e.type for e in events]
        assert types[0] == "run.started"
        assert types[-1] == "run.finished"
        assert types.count("run.finished") == 1


def test_a_run_is_followed_while_another_process_appends_its_events(outcome: Outcome) -> None:
    expected = [followed_event(seq) for seq in range(1, FOLLOWED_EVENTS + 1)]
    assert outcome.followed == expected


def test_a_branch_held_by_a_process_that_died_is_free(outcome: Outcome) -> None:
    async def take_over() -> bool:
        async with PostgresStores(outcome.dsn, schema=outcome.schema) as stores:
            with anyio.fail_after(30):  # free when its connection ended: no lease to wait for
                async with stores.runs.hold_branch(DEAD_CHAT, "main"):
                    return True

    assert anyio.run(take_over)
