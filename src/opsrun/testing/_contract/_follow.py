"""The contract of following a run: its events, then each new one, until it finishes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta

import anyio
import pytest

from ...errors import NotFound
from ...model import RunEvent, RunStatus
from ...ports import Stores
from ._support import T0, ContractBase, delta_events, make_run, new_id

__all__ = ["FollowContract"]

WAIT = 30
"""Seconds any of these tests may wait: a safety net for a follower that hangs."""


async def _close(events: AsyncIterator[RunEvent]) -> None:
    """Close an iteration left early, as ``contextlib.aclosing`` would (when it can)."""
    aclose = getattr(events, "aclose", None)
    if aclose is not None:
        await aclose()


class _Follower:
    """Follows a run in a task: keeps what it receives, and signals chosen seqs."""

    def __init__(self, stores: Stores, run_id: str, *, after_seq: int = 0) -> None:
        self.stores, self.run_id, self.after_seq = stores, run_id, after_seq
        self.events: list[RunEvent] = []
        self.error: Exception | None = None
        self.ended = anyio.Event()
        self._reached: dict[int, anyio.Event] = {}

    def reached(self, seq: int) -> anyio.Event:
        """An event set once the follower has received ``seq``."""
        return self._reached.setdefault(seq, anyio.Event())

    async def run(self) -> None:
        events = self.stores.runs.follow(self.run_id, after_seq=self.after_seq)
        try:
            async for event in events:
                self.events.append(event)
                self.reached(event.seq).set()
        except NotFound as exc:
            self.error = exc
        finally:
            await _close(events)
            self.ended.set()

    @property
    def seqs(self) -> list[int]:
        return [event.seq for event in self.events]


class FollowContract(ContractBase):
    """``RunStore.follow``."""

    async def test_following_an_unknown_run_is_not_found(self, stores: Stores) -> None:
        """Following a run the store does not have raises ``NotFound`` (code
        ``not_found``) when iterated."""
        events = stores.runs.follow(new_id("run"))
        with pytest.raises(NotFound) as missing:
            await anext(events)
        assert missing.value.code == "not_found"

    async def test_following_a_finished_run_yields_the_rest_and_ends(self, stores: Stores) -> None:
        """A finished run yields its events after ``after_seq``, in ``seq`` order, and the
        iteration ends after ``run.finished`` (at once when that was already seen, also
        for an ``after_seq`` past 64 bits)."""
        run = make_run(chat_id=new_id("chat"), status=RunStatus.DONE)
        await stores.runs.claim(run)
        events = delta_events(run.run_id, 1, 6, finish=True)
        await stores.runs.append_events(run.run_id, events)
        with anyio.fail_after(WAIT):
            assert [e async for e in stores.runs.follow(run.run_id)] == events
            assert [e async for e in stores.runs.follow(run.run_id, after_seq=4)] == events[4:]
            for after in (6, 100, 2**63, 10**30):  # a client's Last-Event-ID: any number
                assert [e async for e in stores.runs.follow(run.run_id, after_seq=after)] == []
            for before in (-1, -(10**30)):
                assert [e async for e in stores.runs.follow(run.run_id, after_seq=before)] == events

    async def test_a_follower_gets_every_event_once_in_order_as_appended(
        self, stores: Stores
    ) -> None:
        """A follower gets the events stored before it started, then each event appended
        while it follows (in batches of any size, a retried batch among them), each
        once and in ``seq`` order, and stops after ``run.finished``."""
        run = make_run(chat_id=new_id("chat"))
        await stores.runs.claim(run)
        events = delta_events(run.run_id, 1, 12, finish=True)
        await stores.runs.append_events(run.run_id, events[:3])
        follower = _Follower(stores, run.run_id)
        with anyio.fail_after(WAIT):
            async with anyio.create_task_group() as tg:
                tg.start_soon(follower.run)
                await follower.reached(3).wait()
                await stores.runs.append_events(run.run_id, events[3:4])
                await follower.reached(4).wait()
                await stores.runs.append_events(run.run_id, events[4:7])
                await stores.runs.append_events(run.run_id, events[5:9])  # a retry, overlapping
                await anyio.sleep(0.02)
                await stores.runs.append_events(run.run_id, events[9:11])
                await stores.runs.append_events(run.run_id, events[11:])
                await follower.ended.wait()
        assert follower.error is None
        assert follower.events == events
        assert await stores.runs.events(run.run_id) == events

    async def test_followers_resume_and_follow_side_by_side(self, stores: Stores) -> None:
        """Several followers of one run each get every event; one that stopped resumes
        with ``after_seq`` set to the last ``seq`` it received, without gaps or repeats."""
        run = make_run(chat_id=new_id("chat"))
        await stores.runs.claim(run)
        events = delta_events(run.run_id, 1, 8, finish=True)
        await stores.runs.append_events(run.run_id, events[:2])
        first = []
        events_so_far = stores.runs.follow(run.run_id)
        try:
            async for event in events_so_far:
                first.append(event)
                if event.seq == 2:
                    break  # a client that went away
        finally:
            await _close(events_so_far)
        followers = [_Follower(stores, run.run_id) for _ in range(2)]
        resumed = _Follower(stores, run.run_id, after_seq=first[-1].seq)
        with anyio.fail_after(WAIT):
            async with anyio.create_task_group() as tg:
                for follower in (*followers, resumed):
                    tg.start_soon(follower.run)
                for seq in range(3, 9):
                    await stores.runs.append_events(run.run_id, events[seq - 1 : seq])
                    await anyio.sleep(0.005)
        assert [f.events for f in followers] == [events, events]
        assert first + resumed.events == events

    async def test_following_ends_when_the_run_is_taken_over(self, stores: Stores) -> None:
        """A run whose process died never finishes: when a retry takes its turn over (the
        run is stored ``aborted``, ``lease_expired``), its followers stop."""
        key = new_id("key")
        orphan = make_run(chat_id=new_id("chat"), key=key, lease=T0 + timedelta(seconds=30))
        await stores.runs.claim(orphan)
        await stores.runs.append_events(orphan.run_id, delta_events(orphan.run_id, 1, 2))
        follower = _Follower(stores, orphan.run_id)
        with anyio.fail_after(WAIT):
            async with anyio.create_task_group() as tg:
                tg.start_soon(follower.run)
                await follower.reached(2).wait()
                retry = make_run(key=key, started_at=T0 + timedelta(seconds=31))
                assert await stores.runs.claim(retry) == retry
                await follower.ended.wait()
        assert (follower.seqs, follower.error) == ([1, 2], None)

    async def test_a_run_deleted_while_followed_is_not_found(self, stores: Stores) -> None:
        """Deleting a run while it is followed ends the iteration with ``NotFound``."""
        run = make_run(chat_id=new_id("chat"))
        await stores.runs.claim(run)
        await stores.runs.append_events(run.run_id, delta_events(run.run_id, 1, 1))
        follower = _Follower(stores, run.run_id)
        with anyio.fail_after(WAIT):
            async with anyio.create_task_group() as tg:
                tg.start_soon(follower.run)
                await follower.reached(1).wait()
                await stores.runs.delete_run(run.run_id)
                await follower.ended.wait()
        assert follower.seqs == [1]
        assert isinstance(follower.error, NotFound)
