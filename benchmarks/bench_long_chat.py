"""A long chat: does a run cost more as the chat grows?

    python benchmarks/bench_long_chat.py [--quick]

One chat of 2,000 turns (1,000 with ``--quick``) through a runner with a history window
of 50 messages and a two-operation profile. Printed: the median CPU time per run
(``time.process_time``) of the last 200 turns against the first 200 (target ≤ 1.5×),
and the bytes a run stores (its record, operation records and events, as JSON) at the
start and at the end (target: independent of the chat's length).
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


async def main() -> None:
    runner, stores = build()
    cpu: list[float] = []
    size: list[int] = []
    for turn in range(TURNS):
        request = RunRequest(
            trigger="generate", chat_id="c", profile_id="p", user_message=f"turn {turn}"
        )
        t0 = time.process_time()
        result = await runner.run(request)
        cpu.append(time.process_time() - t0)
        if turn < SAMPLE or turn >= TURNS - SAMPLE:
            size.append(await stored_bytes(stores, result.run.run_id))
        await stores.runs.delete_run(result.run.run_id)
    first = statistics.median(cpu[:SAMPLE]) * 1e6
    last = statistics.median(cpu[-SAMPLE:]) * 1e6
    bytes_first = statistics.median(size[:SAMPLE])
    bytes_last = statistics.median(size[-SAMPLE:])
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
