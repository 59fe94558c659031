"""A long chat: does a run cost more as the chat grows?

    python benchmarks/bench_long_chat.py [--quick]

A chat of 2,000 turns (1,000 with ``--quick``) through a runner with a history window
of 50 messages and a two-operation profile. Printed: the median CPU time per run
(``time.process_time``) of its last 200 turns against the first 200 turns of a new
chat (target ≤ 1.5×), and the bytes a run stores (its record, operation records and
events, as JSON) in each (target: independent of the chat's length). The old chat's
first 1,800 turns run untimed; then the two chats take turns, so that other load on
the machine weighs on both sides alike.
"""

from __future__ import annotations

import statistics
import sys
import time

import anyio
from _quiet import QuietMainLlm  # the sibling module (script dir is on path)

from opsrun import (
    AppendAfterLastUser,
    Hook,
    InMemoryStores,
    OperationCatalog,
    OperationConfig,
    OperationContext,
    OperationProfile,
    OperationResult,
    ProfileOperation,
    Runner,
    RunRequest,
    RunResult,
)
from opsrun.prompt import HistoryWindow

QUICK = "--quick" in sys.argv
TURNS = 1_000 if QUICK else 2_000
SAMPLE = 200


def build() -> tuple[Runner, InMemoryStores]:
    catalog = OperationCatalog()

    @catalog.function("mood", name="Mood", write_tag="mood")
    async def mood(ctx: OperationContext) -> OperationResult:
        return OperationResult.done(
            artifact=ctx.write(len(ctx.history), persisted=False),
            prompt=[AppendAfterLastUser(content="Be brief.")],
        )

    @catalog.function("count", name="Count")
    async def count(ctx: OperationContext) -> OperationResult:
        return OperationResult.done()

    def entry(op_id: str, hook: Hook, order: int) -> ProfileOperation:
        return ProfileOperation(
            operation_id=op_id, config=OperationConfig(hooks=(hook,), order=order)
        )

    profile = OperationProfile(
        profile_id="p",
        name="P",
        operation_profile_session_id="s",
        operations=(
            entry("mood", Hook.BEFORE_MAIN_LLM, 1),
            entry("count", Hook.AFTER_MAIN_LLM, 2),
        ),
    )
    stores = InMemoryStores([profile])
    runner = Runner(
        catalog=catalog,
        stores=stores,
        main_llm=QuietMainLlm("a reply of a few words"),
        window=HistoryWindow(max_messages=50),
    )
    return runner, stores


async def stored_bytes(stores: InMemoryStores, run_id: str) -> int:
    run, operation_runs = await stores.runs.get_run(run_id)
    events = await stores.runs.events(run_id)
    parts = [run, *operation_runs, *events]
    return sum(len(part.model_dump_json(by_alias=True)) for part in parts)


async def turn(runner: Runner, chat_id: str, index: int) -> RunResult:
    """Run turn ``index`` of chat ``chat_id``."""
    request = RunRequest(
        trigger="generate", chat_id=chat_id, profile_id="p", user_message=f"turn {index}"
    )
    return await runner.run(request)


async def timed_turn(
    runner: Runner, stores: InMemoryStores, chat_id: str, index: int
) -> tuple[float, int]:
    """CPU seconds of one turn, and the bytes its run stored (then deleted)."""
    t0 = time.process_time()
    result = await turn(runner, chat_id, index)
    cpu = time.process_time() - t0
    size = await stored_bytes(stores, result.run.run_id)
    await stores.runs.delete_run(result.run.run_id)
    return cpu, size


async def main() -> None:
    """A young chat and an old one, their turns timed taking turns (a busy machine
    slows both alike)."""
    runner, stores = build()
    for index in range(TURNS - SAMPLE):  # the old chat's first turns, untimed
        result = await turn(runner, "old", index)
        await stores.runs.delete_run(result.run.run_id)
    young: list[tuple[float, int]] = []
    old: list[tuple[float, int]] = []
    for index in range(SAMPLE):
        young.append(await timed_turn(runner, stores, "young", index))
        old.append(await timed_turn(runner, stores, "old", TURNS - SAMPLE + index))
    first = statistics.median(cpu for cpu, _ in young) * 1e6
    last = statistics.median(cpu for cpu, _ in old) * 1e6
    bytes_first = statistics.median(size for _, size in young)
    bytes_last = statistics.median(size for _, size in old)
    print(
        f"run at turns {TURNS - SAMPLE + 1}-{TURNS} vs 1-{SAMPLE} (CPU time, window 50): "
        f"{last:7.0f} µs vs {first:7.0f} µs = {last / first:4.2f}x [target <= 1.5x]"
    )
    print(
        f"stored per run (run, operation records, events as JSON): {bytes_last:,.0f} B at "
        f"the end vs {bytes_first:,.0f} B at the start = {bytes_last / bytes_first:4.2f}x "
        "[target: independent of the chat's length]"
    )


if __name__ == "__main__":
    anyio.run(main)
