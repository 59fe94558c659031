"""Runner.follow: a run's events from its run store, while another task executes it."""

from __future__ import annotations

from contextlib import aclosing

import anyio
import pytest

from _support import make_runner
from opsrun.errors import NotFound
from opsrun.model import MainLlmDelta, RunEvent, RunRequest, RunStatus
from opsrun.runner import Runner
from opsrun.stores import InMemoryStores
from opsrun.testing import ScriptedMainLlm

pytestmark = pytest.mark.anyio

REQUEST = RunRequest(trigger="generate", chat_id="c", user_message="hi")


async def _started_run(stores: InMemoryStores) -> str:
    """The id of the chat's run, once its runner claimed it."""
    while not (page := await stores.runs.list_runs("c")).items:
        await anyio.sleep(0.001)
    return page.items[0].run_id


async def _follow_while_running(
    runner: Runner, stores: InMemoryStores, *, after_seq: int = 0
) -> tuple[list[RunEvent], str]:
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(runner.run, REQUEST)
            run_id = await _started_run(stores)
            async with aclosing(runner.follow(run_id, after_seq=after_seq)) as events:
                followed = [event async for event in events]
    return followed, run_id


async def test_a_follower_gets_the_events_of_a_run_another_task_executes() -> None:
    stores = InMemoryStores()
    main_llm = ScriptedMainLlm(["one two three four"], chunk_size=4, delay=0.002)
    runner = make_runner(stores=stores, main_llm=main_llm)
    followed, run_id = await _follow_while_running(runner, stores)
    assert followed == await stores.runs.events(run_id)
    assert [e.seq for e in followed] == list(range(1, len(followed) + 1))
    assert followed[-1].type == "run.finished"
    deltas = [e.text for e in followed if isinstance(e, MainLlmDelta)]
    assert "".join(deltas) == "one two three four"
    assert (await runner.result(run_id)).status == RunStatus.DONE


async def test_a_follower_resumes_after_the_last_seq_it_saw() -> None:
    stores = InMemoryStores()
    runner = make_runner(stores=stores, main_llm=ScriptedMainLlm(delay=0.002))
    followed, run_id = await _follow_while_running(runner, stores, after_seq=2)
    assert followed == (await stores.runs.events(run_id))[2:]


async def test_a_follower_that_leaves_early_does_not_stop_the_run() -> None:
    stores = InMemoryStores()
    runner = make_runner(stores=stores, main_llm=ScriptedMainLlm(delay=0.005))
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(runner.run, REQUEST)
            run_id = await _started_run(stores)
            async with aclosing(runner.follow(run_id)) as events:
                async for event in events:
                    assert event.type == "run.started"
                    break
    assert (await runner.result(run_id)).status == RunStatus.DONE


async def test_following_an_unknown_run_is_not_found() -> None:
    runner = make_runner()
    async with aclosing(runner.follow("run_unknown")) as events:
        with pytest.raises(NotFound):
            await anext(events)
