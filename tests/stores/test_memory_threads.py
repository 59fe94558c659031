"""The in-memory stores serve several threads, each running its own event loop.

A threaded web server that runs ``asyncio.run`` per request shares one
``InMemoryStores`` among event loops: a turn waiting for a chat branch held in another
loop used to wait forever, and so did a follower of a run executing in another loop.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any

import anyio
import trio

from opsrun import Runner, RunRequest
from opsrun.model import ChatRole, RunEvent, RunStatus
from opsrun.operations import OperationCatalog
from opsrun.stores import InMemoryStores
from opsrun.testing import ScriptedMainLlm

HANG = 60.0
"""Seconds after which a thread still running counts as hung."""


def in_threads(*jobs: Callable[[], Coroutine[Any, Any, Any]]) -> list[Any]:
    """Run each job in a thread of its own, alternately on asyncio and trio; their
    results (or the exceptions they raised) in job order."""
    results: list[Any] = [None] * len(jobs)

    def work(index: int) -> None:
        try:
            if index % 2:
                results[index] = trio.run(jobs[index])
            else:
                results[index] = asyncio.run(jobs[index]())
        except BaseException as exc:
            results[index] = exc

    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(len(jobs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(HANG)
    assert not any(thread.is_alive() for thread in threads), "a thread hung"
    return results


def runner_on(stores: InMemoryStores) -> Runner:
    # The reply streams slowly, so the turns overlap and wait for the branch.
    main_llm = ScriptedMainLlm(default="answer", chunk_size=2, delay=0.01)
    return Runner(catalog=OperationCatalog(), stores=stores, main_llm=main_llm)


def test_turns_on_one_branch_from_several_event_loops_take_turns() -> None:
    stores = InMemoryStores()
    runner = runner_on(stores)

    def turn(i: int) -> Callable[[], Coroutine[Any, Any, RunStatus]]:
        async def go() -> RunStatus:
            request = RunRequest(trigger="generate", chat_id="c", user_message=f"m{i}")
            return (await runner.run(request)).status

        return go

    assert in_threads(*(turn(i) for i in range(4))) == [RunStatus.DONE] * 4
    history = asyncio.run(stores.chats.history("c", "main"))
    assert [m.role for m in history] == [ChatRole.USER, ChatRole.ASSISTANT] * 4


def test_a_follower_in_another_event_loop_sees_the_whole_run() -> None:
    stores = InMemoryStores()
    runner = runner_on(stores)
    request = RunRequest(trigger="generate", chat_id="c", user_message="hi", client_request_id="r")
    claimed = threading.Event()

    async def run() -> str:
        async with runner.stream(request) as events:
            async for _ in events:
                claimed.set()
        assert events.result is not None
        return "ran"

    async def follow() -> list[RunEvent]:
        await anyio.to_thread.run_sync(claimed.wait, HANG)
        run_id = (await stores.runs.list_runs("c")).items[0].run_id
        return [event async for event in stores.runs.follow(run_id)]

    ran, followed = in_threads(run, follow)
    assert ran == "ran"
    assert isinstance(followed, list)
    assert [e.seq for e in followed] == list(range(1, len(followed) + 1))
    assert followed[-1].type == "run.finished"


def test_a_branch_held_in_one_event_loop_is_handed_to_a_waiter_in_another() -> None:
    stores = InMemoryStores()
    held = threading.Event()
    order: list[str] = []

    async def first() -> None:
        async with stores.runs.hold_branch("c", "main"):
            held.set()
            await anyio.sleep(0.05)
            order.append("first")

    async def second() -> None:
        await anyio.to_thread.run_sync(held.wait, HANG)
        async with stores.runs.hold_branch("c", "main"):
            order.append("second")

    assert in_threads(first, second) == [None, None]
    assert order == ["first", "second"]
