"""The contract of runs: turn keys, leases, records and event logs."""

from __future__ import annotations

from datetime import timedelta

import anyio
import anyio.lowlevel
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ...errors import NotFound
from ...model import (
    Run,
    RunStatus,
)
from ...ports import Stores
from ._support import (
    PROPERTY,
    T0,
    ContractBase,
    make_event,
    make_rich_run,
    make_run,
    new_id,
)

__all__ = ["RunContract"]


class RunContract(ContractBase):
    """Turn keys and leases, run records and event logs."""

    # --- runs: turn keys and leases ------------------------------------------------------

    async def test_a_claimed_run_is_stored(self, stores: Stores) -> None:
        """``claim`` stores a new run and returns it; it has no operation runs yet."""
        run = make_run(key=new_id("key"))
        assert await stores.runs.claim(run) == run
        assert await stores.runs.get_run(run.run_id) == (run, [])

    async def test_a_turn_key_is_claimed_once(self, stores: Stores) -> None:
        """A second claim of a held key returns the first run and stores nothing."""
        key = new_id("key")
        first, second = make_run(key=key), make_run(key=key)
        await stores.runs.claim(first)
        assert await stores.runs.claim(second) == first
        with pytest.raises(NotFound):
            await stores.runs.get_run(second.run_id)

    async def test_racing_claims_of_one_key_have_one_winner(self, stores: Stores) -> None:
        """Concurrent claims of one key all return the same run, and only it is stored."""
        key = new_id("key")
        candidates = [make_run(key=key) for _ in range(8)]
        won: list[str] = []

        async def claim(run: Run) -> None:
            won.append((await stores.runs.claim(run)).run_id)

        async with anyio.create_task_group() as tg:
            for run in candidates:
                tg.start_soon(claim, run)
        assert len(won) == 8
        assert len(set(won)) == 1
        for run in candidates:
            if run.run_id != won[0]:
                with pytest.raises(NotFound):
                    await stores.runs.get_run(run.run_id)

    async def test_runs_without_a_key_are_never_deduplicated(self, stores: Stores) -> None:
        """Runs with an empty ``dedupe_key`` are all stored."""
        runs = [make_run() for _ in range(3)]
        for run in runs:
            assert await stores.runs.claim(run) == run
        for run in runs:
            assert (await stores.runs.get_run(run.run_id))[0] == run

    async def test_a_finished_run_keeps_its_key(self, stores: Stores) -> None:
        """A run that ended ``done`` or ``failed`` still holds its turn key."""
        for status in (RunStatus.DONE, RunStatus.FAILED):
            key = new_id("key")
            held = make_run(key=key, status=status)
            await stores.runs.claim(held)
            later = make_run(key=key, started_at=T0 + timedelta(days=1))
            assert await stores.runs.claim(later) == held

    async def test_an_aborted_run_frees_its_key(self, stores: Stores) -> None:
        """A run that ended ``aborted`` no longer holds its key: a new claim wins it."""
        key = new_id("key")
        aborted = make_run(key=key)
        await stores.runs.claim(aborted)
        aborted = aborted.model_copy(
            update={"status": RunStatus.ABORTED, "abort_reason": "cancelled"}
        )
        await stores.runs.save_run(aborted, [])
        retry = make_run(key=key)
        assert await stores.runs.claim(retry) == retry
        assert await stores.runs.claim(make_run(key=key)) == retry
        assert (await stores.runs.get_run(aborted.run_id))[0] == aborted

    async def test_a_run_whose_lease_expired_is_taken_over(self, stores: Stores) -> None:
        """A running run whose lease ended before the claimant started is stored
        ``aborted`` (``lease_expired``) and the claimant takes its key."""
        key = new_id("key")
        orphan = make_run(key=key, lease=T0 + timedelta(seconds=30))
        await stores.runs.claim(orphan)
        retry = make_run(key=key, started_at=T0 + timedelta(seconds=31))
        assert await stores.runs.claim(retry) == retry
        stored, _ = await stores.runs.get_run(orphan.run_id)
        assert (stored.status, stored.abort_reason) == (RunStatus.ABORTED, "lease_expired")
        assert await stores.runs.claim(make_run(key=key, started_at=T0)) == retry
        await stores.runs.renew_lease(orphan.run_id, T0 + timedelta(days=1))
        assert (await stores.runs.get_run(orphan.run_id))[0] == stored

    async def test_a_lease_holds_until_it_expires(self, stores: Stores) -> None:
        """A running run keeps its key while its lease lasts (up to and including its end)
        and forever when it has no lease."""
        for lease in (T0 + timedelta(seconds=30), None):
            key = new_id("key")
            running = make_run(key=key, lease=lease)
            await stores.runs.claim(running)
            claimant = make_run(key=key, started_at=T0 + timedelta(seconds=30))
            assert await stores.runs.claim(claimant) == running
            assert (await stores.runs.get_run(running.run_id))[0] == running

    async def test_a_renewed_lease_keeps_the_turn(self, stores: Stores) -> None:
        """``renew_lease`` extends a running run's lease; it does nothing to a finished run
        or an unknown one."""
        key = new_id("key")
        running = make_run(key=key, lease=T0 + timedelta(seconds=30))
        await stores.runs.claim(running)
        await stores.runs.renew_lease(running.run_id, T0 + timedelta(seconds=60))
        renewed, _ = await stores.runs.get_run(running.run_id)
        assert renewed.lease_expires_at == T0 + timedelta(seconds=60)
        claimant = make_run(key=key, started_at=T0 + timedelta(seconds=45))
        assert (await stores.runs.claim(claimant)).run_id == running.run_id
        done = renewed.model_copy(update={"status": RunStatus.DONE})
        await stores.runs.save_run(done, [])
        await stores.runs.renew_lease(running.run_id, T0 + timedelta(days=1))
        assert (await stores.runs.get_run(running.run_id))[0] == done
        await stores.runs.renew_lease(new_id("run"), T0)

    # --- runs: records and events --------------------------------------------------------

    async def test_save_run_replaces_the_record_and_its_operation_runs(
        self, stores: Stores
    ) -> None:
        """``save_run`` replaces the record and operation runs; both round-trip, in order."""
        run, operation_runs = make_rich_run(new_id("run"))
        await stores.runs.claim(make_run(run.run_id, key=run.dedupe_key))
        await stores.runs.save_run(run, operation_runs)
        assert await stores.runs.get_run(run.run_id) == (run, operation_runs)
        await stores.runs.save_run(run, operation_runs[1:])
        assert await stores.runs.get_run(run.run_id) == (run, operation_runs[1:])

    async def test_a_missing_run_is_not_found(self, stores: Stores) -> None:
        """``get_run`` of an unknown id raises ``NotFound`` (code ``not_found``)."""
        with pytest.raises(NotFound) as missing:
            await stores.runs.get_run(new_id("run"))
        assert missing.value.code == "not_found"

    async def test_a_deleted_run_is_forgotten(self, stores: Stores) -> None:
        """``delete_run`` forgets the run, its operation runs and events and frees its key;
        deleting an unknown run is no error."""
        run, operation_runs = make_rich_run(new_id("run"))
        await stores.runs.claim(run)
        await stores.runs.save_run(run, operation_runs)
        await stores.runs.append_events(run.run_id, [make_event(run.run_id, 1)])
        await stores.runs.delete_run(run.run_id)
        with pytest.raises(NotFound):
            await stores.runs.get_run(run.run_id)
        assert await stores.runs.events(run.run_id) == []
        retry = make_run(key=run.dedupe_key)
        assert await stores.runs.claim(retry) == retry
        await stores.runs.delete_run(run.run_id)
        await stores.runs.delete_run(new_id("run"))

    @PROPERTY
    @given(batches=st.lists(st.integers(min_value=1, max_value=5), min_size=1, max_size=6))
    async def test_events_come_back_in_seq_order_without_gaps(
        self, stores: Stores, batches: list[int]
    ) -> None:
        """Events appended in batches come back as one log: seq 1, 2, … with no gap, each
        event equal to the one appended."""
        run_id = new_id("run")
        events = [make_event(run_id, seq) for seq in range(1, sum(batches) + 1)]
        start = 0
        for size in batches:
            await stores.runs.append_events(run_id, events[start : start + size])
            start += size
        stored = await stores.runs.events(run_id)
        assert [e.seq for e in stored] == list(range(1, len(events) + 1))
        assert stored == events

    async def test_event_logs_of_concurrent_runs_stay_apart(self, stores: Stores) -> None:
        """Runs appending at the same time each keep their whole log; an unknown run has
        none."""
        run_ids = [new_id("run") for _ in range(4)]

        async def emit(run_id: str) -> None:
            for seq in range(1, 13, 3):
                await stores.runs.append_events(
                    run_id, [make_event(run_id, s) for s in range(seq, seq + 3)]
                )
                await anyio.lowlevel.checkpoint()

        async with anyio.create_task_group() as tg:
            for run_id in run_ids:
                tg.start_soon(emit, run_id)
        for run_id in run_ids:
            assert await stores.runs.events(run_id) == [make_event(run_id, s) for s in range(1, 13)]
        assert await stores.runs.events(new_id("run")) == []

    async def test_an_event_stored_twice_is_kept_once(self, stores: Stores) -> None:
        """A batch appended again, or one that overlaps the stored log (a retry after an
        error), adds only the events whose ``seq`` is new."""
        run_id = new_id("run")
        events = [make_event(run_id, seq) for seq in range(1, 8)]
        await stores.runs.append_events(run_id, events[:3])
        await stores.runs.append_events(run_id, events[:3])
        await stores.runs.append_events(run_id, events[1:5])
        await stores.runs.append_events(run_id, events[4:])
        assert await stores.runs.events(run_id) == events
