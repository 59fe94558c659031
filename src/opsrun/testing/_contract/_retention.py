"""The contract of the run queries: a chat's runs page by page, and pruning old runs.

The pruning tests delete finished runs that started before 2001 (:data:`T_OLD`), in
every chat, and leave every other run alone; they clean up the runs they made.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ...errors import ConfigError, NotFound, StoreError
from ...model import Run, RunStatus
from ...ports import Stores
from ._support import (
    QUICK_PROPERTY,
    T0,
    T_OLD,
    ContractBase,
    forged_cursors,
    make_event,
    make_message,
    make_run,
    new_id,
)

__all__ = ["RetentionContract"]

_STATUSES = st.sampled_from(list(RunStatus))


def _newest_first(runs: list[Run]) -> list[str]:
    """Run ids in ``list_runs`` order: started_at descending, then run id descending."""
    ordered = sorted(runs, key=lambda run: (run.started_at, run.run_id), reverse=True)
    return [run.run_id for run in ordered]


class RetentionContract(ContractBase):
    """``list_runs`` and ``prune_runs``."""

    async def _all_runs(self, stores: Stores, chat_id: str, limit: int = 100) -> list[str]:
        listed: list[str] = []
        cursor: str | None = None
        while True:
            page = await stores.runs.list_runs(chat_id, limit=limit, cursor=cursor)
            listed += [run.run_id for run in page.items]
            if page.next_cursor is None:
                return listed
            cursor = page.next_cursor

    # --- list_runs -----------------------------------------------------------------------

    async def test_a_chats_runs_are_listed_newest_first(self, stores: Stores) -> None:
        """``list_runs`` returns the chat's runs of every branch and status, newest
        ``started_at`` first, runs that started at the same instant by run id
        descending; times in other time zones compare as instants. Other chats' runs
        are not listed, and a chat without runs has an empty last page."""
        chat_id = new_id("chat")
        plus_two = timezone(timedelta(hours=2))
        runs = [
            make_run("run-b", chat_id=chat_id, started_at=T0),
            make_run("run-a", chat_id=chat_id, started_at=T0, status=RunStatus.DONE),
            make_run("run-c", chat_id=chat_id, started_at=T0 + timedelta(microseconds=1)),
            # 01:00+02:00 is 23:00 UTC the day before: the oldest of the four.
            make_run("run-d", chat_id=chat_id, started_at=datetime(2026, 1, 1, 1, tzinfo=plus_two)),
        ]
        for run in runs:
            await stores.runs.claim(run)
        await stores.runs.claim(make_run(chat_id=new_id("chat")))
        page = await stores.runs.list_runs(chat_id)
        assert [run.run_id for run in page.items] == ["run-c", "run-b", "run-a", "run-d"]
        assert page.items[2] == runs[1]
        assert page.next_cursor is None
        empty = await stores.runs.list_runs(new_id("chat"))
        assert (empty.items, empty.next_cursor) == ((), None)

    @QUICK_PROPERTY
    @given(
        starts=st.lists(st.integers(min_value=0, max_value=3), max_size=9),
        limit=st.integers(min_value=1, max_value=4),
    )
    async def test_run_pages_hold_every_run_once(
        self, stores: Stores, starts: list[int], limit: int
    ) -> None:
        """Paging through a chat's runs with ``next_cursor`` yields every run exactly once
        in ``list_runs`` order, at most ``limit`` a page, also when runs started at the
        same time."""
        chat_id = new_id("chat")
        runs = [
            make_run(new_id("run"), chat_id=chat_id, started_at=T0 + timedelta(seconds=s))
            for s in starts
        ]
        for run in runs:
            await stores.runs.claim(run)
        listed: list[str] = []
        cursor: str | None = None
        while True:
            page = await stores.runs.list_runs(chat_id, limit=limit, cursor=cursor)
            assert len(page.items) <= limit
            assert page.items or page.next_cursor is None
            listed += [run.run_id for run in page.items]
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        assert listed == _newest_first(runs)

    async def test_a_bad_run_list_request_is_refused(self, stores: Stores) -> None:
        """A cursor ``list_runs`` did not make raises ``StoreError`` (code
        ``bad_cursor``), a chat-list cursor too; a limit below 1 raises ``ConfigError``."""
        chat_id = new_id("chat")
        for _ in range(2):
            await stores.runs.claim(make_run(chat_id=chat_id))
        for other in (chat_id, new_id("chat")):
            await stores.chats.save_message(make_message(other, "m1"))
        chats_cursor = (await stores.chats.list_chats(limit=1)).next_cursor
        assert chats_cursor is not None
        for cursor in ("", "%%%", "WyJydW5zIl0", chats_cursor, *forged_cursors("runs")):
            with pytest.raises(StoreError) as bad:
                await stores.runs.list_runs(chat_id, cursor=cursor)
            assert bad.value.code == "bad_cursor"
        with pytest.raises(ConfigError):
            await stores.runs.list_runs(chat_id, limit=0)

    # --- prune_runs ----------------------------------------------------------------------

    async def test_pruning_deletes_old_finished_runs_with_everything_of_theirs(
        self, stores: Stores
    ) -> None:
        """``prune_runs(older_than=...)`` deletes the finished runs that started before
        that time, with their operation runs and events, frees their turn keys and
        returns how many it deleted; running runs and newer runs stay."""
        chat_id = new_id("chat")
        day = timedelta(days=1)
        old_done = make_run(
            chat_id=chat_id, key=new_id("key"), started_at=T_OLD, status=RunStatus.DONE
        )
        old_failed = make_run(chat_id=chat_id, started_at=T_OLD + day, status=RunStatus.FAILED)
        old_running = make_run(chat_id=chat_id, started_at=T_OLD)
        newer = make_run(chat_id=chat_id, started_at=T_OLD + 3 * day, status=RunStatus.ABORTED)
        try:
            for run in (old_done, old_failed, old_running, newer):
                await stores.runs.claim(run)
                await stores.runs.save_run(run, [])
                await stores.runs.append_events(run.run_id, [make_event(run.run_id, 1)])
            assert await stores.runs.prune_runs(older_than=T_OLD + 2 * day) == 2
            for gone in (old_done, old_failed):
                with pytest.raises(NotFound):
                    await stores.runs.get_run(gone.run_id)
                assert await stores.runs.events(gone.run_id) == []
            for kept in (old_running, newer):
                assert (await stores.runs.get_run(kept.run_id))[0] == kept
                assert len(await stores.runs.events(kept.run_id)) == 1
            retry = make_run(chat_id=chat_id, key=old_done.dedupe_key)
            assert await stores.runs.claim(retry) == retry
            assert await self._all_runs(stores, chat_id) == [
                retry.run_id,
                newer.run_id,
                old_running.run_id,
            ]
        finally:
            await self._forget_chat(stores, chat_id)

    async def test_keep_last_keeps_the_newest_runs_of_every_chat(self, stores: Stores) -> None:
        """With ``keep_last``, each chat keeps its newest ``keep_last`` runs (running ones
        count) and only older finished runs are deleted; with ``older_than`` as well, a
        run must be old *and* beyond the newest ``keep_last`` to go."""
        chats = [new_id("chat"), new_id("chat")]
        hour = timedelta(hours=1)
        try:
            for chat_id in chats:
                for n in range(5):
                    status = RunStatus.RUNNING if n == 3 else RunStatus.DONE
                    run = make_run(f"{chat_id}-{n}", chat_id=chat_id, started_at=T_OLD + n * hour)
                    await stores.runs.claim(run.model_copy(update={"status": status}))
            # Old means before T_OLD + 1 h: only runs 0 of each chat, whatever keep_last says.
            assert await stores.runs.prune_runs(older_than=T_OLD + hour, keep_last=1) == 2
            assert await stores.runs.prune_runs(older_than=T_OLD + 10 * hour, keep_last=2) == 4
            for chat_id in chats:  # 4 and 3 are the newest two; 3 is running anyway
                assert await self._all_runs(stores, chat_id) == [f"{chat_id}-4", f"{chat_id}-3"]
            assert await stores.runs.prune_runs(older_than=T_OLD + 10 * hour, keep_last=0) == 2
            for chat_id in chats:
                assert await self._all_runs(stores, chat_id) == [f"{chat_id}-3"]
        finally:
            for chat_id in chats:
                await self._forget_chat(stores, chat_id)

    @QUICK_PROPERTY
    @given(
        runs=st.lists(st.tuples(st.integers(0, 5), _STATUSES, st.booleans()), max_size=8),
        cutoff=st.integers(min_value=0, max_value=6),
        keep_last=st.none() | st.integers(min_value=0, max_value=4),
    )
    async def test_pruning_deletes_exactly_what_its_rules_select(
        self,
        stores: Stores,
        runs: list[tuple[int, RunStatus, bool]],
        cutoff: int,
        keep_last: int | None,
    ) -> None:
        """Over any mix of runs in two chats, ``prune_runs`` deletes exactly the finished
        runs older than ``older_than`` and beyond each chat's newest ``keep_last``, and
        never a running one."""
        chats = [new_id("chat"), new_id("chat")]
        made = [
            make_run(
                new_id("run"),
                chat_id=chats[second],
                started_at=T_OLD + timedelta(minutes=minute),
                status=status,
            )
            for minute, status, second in runs
        ]
        try:
            for run in made:
                await stores.runs.claim(run)
            kept: set[str] = set()
            for chat_id in chats:
                newest = _newest_first([r for r in made if r.chat_id == chat_id])
                for rank, run_id in enumerate(newest):
                    run = next(r for r in made if r.run_id == run_id)
                    doomed = (
                        run.status != RunStatus.RUNNING
                        and run.started_at < T_OLD + timedelta(minutes=cutoff)
                        and (keep_last is None or rank >= keep_last)
                    )
                    if not doomed:
                        kept.add(run_id)
            older_than = T_OLD + timedelta(minutes=cutoff)
            deleted = await stores.runs.prune_runs(older_than=older_than, keep_last=keep_last)
            assert deleted == len(made) - len(kept)
            remaining = {r for chat_id in chats for r in await self._all_runs(stores, chat_id)}
            assert remaining == kept
            assert {r.run_id for r in made if r.status == RunStatus.RUNNING} <= remaining
        finally:
            for chat_id in chats:
                await self._forget_chat(stores, chat_id)

    async def test_a_prune_without_a_rule_is_refused(self, stores: Stores) -> None:
        """``prune_runs()`` without ``older_than`` or ``keep_last``, or with a negative
        ``keep_last``, raises ``ConfigError`` and deletes nothing."""
        with pytest.raises(ConfigError):
            await stores.runs.prune_runs()
        with pytest.raises(ConfigError):
            await stores.runs.prune_runs(older_than=T_OLD, keep_last=-1)

    async def _forget_chat(self, stores: Stores, chat_id: str) -> None:
        for run_id in await self._all_runs(stores, chat_id):
            await stores.runs.delete_run(run_id)
