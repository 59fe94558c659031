"""Idempotency: a second run() with the same turn key returns the existing run."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from opsrun.model import (
    Hook,
    OperationConfig,
    OperationProfile,
    OperationResult,
    ProfileOperation,
    Run,
    RunRequest,
    RunResult,
    RunStatus,
    Trigger,
)
from opsrun.operations import OperationCatalog, OperationContext
from opsrun.runner import Runner
from opsrun.stores import InMemoryStores
from opsrun.testing import ScriptedMainLlm

pytestmark = pytest.mark.anyio


async def use_profile(stores: InMemoryStores, *op_ids: str) -> None:
    await stores.profiles.save_profile(
        OperationProfile(
            profile_id="p",
            name="P",
            operation_profile_session_id="s1",
            operations=tuple(
                ProfileOperation(
                    operation_id=i, config=OperationConfig(hooks=(Hook.BEFORE_MAIN_LLM,), order=1)
                )
                for i in op_ids
            ),
        )
    )


def request(**kw: Any) -> RunRequest:
    base: dict[str, Any] = {"trigger": Trigger.GENERATE, "chat_id": "c", "profile_id": "p"}
    if kw.get("trigger", Trigger.GENERATE) == Trigger.GENERATE:
        base["user_message"] = "hi"
    return RunRequest(**{**base, **kw})


@pytest.mark.parametrize(
    "key", [{"user_message_id": "u1"}, {"client_request_id": "req-1"}], ids=["msg", "req"]
)
async def test_second_generate_is_deduplicated(
    runner: Runner,
    opsrun_stores: InMemoryStores,
    opsrun_main_llm: ScriptedMainLlm,
    key: dict[str, str],
) -> None:
    await use_profile(opsrun_stores)
    first = await runner.run(request(**key))
    second = await runner.run(request(**key))
    assert first.deduplicated is False
    assert second.deduplicated is True
    assert second.run == first.run
    assert second.status == RunStatus.DONE
    assert len(opsrun_main_llm.requests) == 1
    assert len(opsrun_stores.runs.run_ids()) == 1
    assert len(await opsrun_stores.chats.history("c", "main")) == 2
    # another chat with the same key is another turn
    other = await runner.run(request(**key, chat_id="c2"))
    assert other.deduplicated is False
    assert len(opsrun_main_llm.requests) == 2


async def test_regenerate_with_same_variant_id_is_deduplicated(
    runner: Runner, opsrun_stores: InMemoryStores, opsrun_main_llm: ScriptedMainLlm
) -> None:
    await use_profile(opsrun_stores)
    turn = (await runner.run(request())).run.user_message_id
    regen = request(trigger=Trigger.REGENERATE, user_message_id=turn, assistant_variant_id="v9")
    first = await runner.run(regen)
    second = await runner.run(regen)
    assert first.run.main_llm.assistant_variant_id == "v9"
    assert second.deduplicated is True
    assert second.run.run_id == first.run.run_id
    assert len(opsrun_main_llm.requests) == 2
    history = await opsrun_stores.chats.history("c", "main")
    assert len(history[-1].variants) == 2


async def test_without_a_key_every_call_is_a_new_run(
    runner: Runner, opsrun_stores: InMemoryStores, opsrun_main_llm: ScriptedMainLlm
) -> None:
    await use_profile(opsrun_stores)
    await runner.run(request())
    await runner.run(request())
    assert len(opsrun_main_llm.requests) == 2


async def test_concurrent_duplicates_start_one_run(
    runner: Runner,
    opsrun_catalog: OperationCatalog,
    opsrun_stores: InMemoryStores,
    opsrun_main_llm: ScriptedMainLlm,
) -> None:
    release = anyio.Event()
    started = anyio.Event()
    claims: list[str] = []
    both_claimed = anyio.Event()
    claim = opsrun_stores.runs.claim

    async def counting_claim(run: Run) -> Run:
        stored = await claim(run)
        claims.append(stored.run_id)
        if len(claims) == 2:
            both_claimed.set()
        return stored

    opsrun_stores.runs.claim = counting_claim  # type: ignore[method-assign]  # a spy

    @opsrun_catalog.function("slow", name="Slow")
    async def _slow(ctx: OperationContext) -> OperationResult:
        started.set()
        await release.wait()
        return OperationResult.done()

    await use_profile(opsrun_stores, "slow")
    results: list[RunResult] = []

    async def go() -> None:
        results.append(await runner.run(request(user_message_id="u1")))

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(go)
            await started.wait()
            tg.start_soon(go)  # waits for the branch, then finds the turn's run finished
            await anyio.wait_all_tasks_blocked()
            release.set()
            await both_claimed.wait()
    assert claims[0] == claims[1]
    assert len(results) == 2
    assert sorted(r.deduplicated for r in results) == [False, True]
    assert len(opsrun_main_llm.requests) == 1
    # the duplicate call also returns the finished run, not a snapshot of a running one
    assert results[0].run == results[1].run
    assert {r.status for r in results} == {RunStatus.DONE}
    assert len(opsrun_stores.runs.run_ids()) == 1


async def test_concurrent_duplicates_started_together(
    runner: Runner, opsrun_stores: InMemoryStores, opsrun_main_llm: ScriptedMainLlm
) -> None:
    opsrun_main_llm.delay = 0.001
    await use_profile(opsrun_stores)
    results: list[RunResult] = []

    async def go() -> None:
        results.append(await runner.run(request(client_request_id="r")))

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            for _ in range(3):
                tg.start_soon(go)
    assert sorted(r.deduplicated for r in results) == [False, True, True]
    assert len(opsrun_main_llm.requests) == 1
    assert {r.status for r in results} == {RunStatus.DONE}
