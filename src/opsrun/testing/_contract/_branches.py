"""The contract of chat branch holds: one run per branch at a time."""

from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest

from ...errors import StoreError
from ...ports import Stores
from ._support import (
    ContractBase,
    new_id,
)

__all__ = ["BranchContract"]

WAIT = 30
"""Seconds a test waits for a branch hold before it fails (a store that never answers)."""


class BranchContract(ContractBase):
    """One holder per chat branch, waiting and refusing."""

    # --- one run per chat branch ---------------------------------------------------------

    async def test_a_branch_has_one_holder_at_a_time(self, stores: Stores) -> None:
        """Holders of one branch enter one after another; every waiter gets its turn."""
        chat_id = new_id("chat")
        inside, most, entered = 0, 0, []

        async def hold(n: int) -> None:
            nonlocal inside, most
            async with stores.runs.hold_branch(chat_id, "main"):
                inside += 1
                most = max(most, inside)
                for _ in range(3):
                    await anyio.sleep(0)
                inside -= 1
                entered.append(n)

        with anyio.fail_after(WAIT):
            async with anyio.create_task_group() as tg:
                for n in range(5):
                    tg.start_soon(hold, n)
        assert most == 1
        assert sorted(entered) == list(range(5))

    async def test_a_held_branch_refuses_a_holder_that_does_not_wait(self, stores: Stores) -> None:
        """``wait=False`` on a held branch raises ``StoreError`` (code ``branch_busy``);
        once released, the branch is free again."""
        chat_id = new_id("chat")
        with anyio.move_on_after(WAIT) as waited:
            async with stores.runs.hold_branch(chat_id, "main"):
                with pytest.raises(StoreError) as busy:
                    async with stores.runs.hold_branch(chat_id, "main", wait=False):
                        raise AssertionError("entered a held branch")
                assert busy.value.code == "branch_busy"
            async with stores.runs.hold_branch(chat_id, "main", wait=False):
                pass
        assert not waited.cancelled_caught, "hold_branch(wait=False) waited for a held branch"

    async def test_other_branches_and_chats_are_not_held(self, stores: Stores) -> None:
        """Holding a branch leaves the chat's other branches and other chats free."""
        chat_id = new_id("chat")
        with anyio.fail_after(WAIT):
            async with (
                stores.runs.hold_branch(chat_id, "main"),
                stores.runs.hold_branch(chat_id, "alt", wait=False),
                stores.runs.hold_branch(new_id("chat"), "main", wait=False),
            ):
                pass

    async def test_an_error_in_the_block_propagates_and_releases_the_branch(
        self, stores: Stores
    ) -> None:
        """An exception raised while holding reaches the caller unchanged (not wrapped in
        a group) and the branch is released."""

        class Boom(Exception):
            pass

        chat_id = new_id("chat")
        with pytest.raises(Boom):
            async with stores.runs.hold_branch(chat_id, "main"):
                raise Boom
        with anyio.fail_after(WAIT):
            async with stores.runs.hold_branch(chat_id, "main", wait=False):
                pass

    async def test_a_waiter_that_gives_up_leaves_the_branch_free(self, stores: Stores) -> None:
        """A waiter cancelled while it waits neither holds the branch nor keeps a place."""
        chat_id = new_id("chat")
        gave_up = anyio.Event()
        waiting = anyio.CancelScope()

        async def wait_in_vain() -> None:
            with waiting:
                async with stores.runs.hold_branch(chat_id, "main"):
                    raise AssertionError("entered a held branch")
            gave_up.set()

        with anyio.fail_after(WAIT):
            async with (
                anyio.create_task_group() as tg,
                stores.runs.hold_branch(chat_id, "main"),
            ):
                tg.start_soon(wait_in_vain)
                await anyio.sleep(0.05)  # time to queue up; the test holds either way
                waiting.cancel()
                await gave_up.wait()
            async with stores.runs.hold_branch(chat_id, "main", wait=False):
                pass
