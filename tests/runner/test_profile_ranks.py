"""A run keeps its profile's operation ranks however long it waits for its chat branch.

Artifacts enter the prompt in the order of the operations that wrote them. A run that
waited for its branch while many other runs loaded profiles (a store that returns a new
profile object per read, as the SQL stores do) used to lose its ranks and order the
artifacts by tag instead.
"""

from __future__ import annotations

import anyio
import pytest

from _support import make_runner
from opsrun.model import (
    Hook,
    OperationConfig,
    OperationProfile,
    OperationResult,
    ProfileOperation,
    RunRequest,
    Trigger,
)
from opsrun.operations import OperationCatalog, OperationContext
from opsrun.ports import MainLlmRequest
from opsrun.stores import InMemoryStores
from opsrun.testing import FunctionMainLlm

pytestmark = pytest.mark.anyio

PROFILE = OperationProfile(
    profile_id="p",
    name="P",
    operation_profile_session_id="s",
    operations=tuple(
        ProfileOperation(
            operation_id=f"w_{tag}",
            config=OperationConfig(hooks=(Hook.BEFORE_MAIN_LLM,), order=order),
        )
        for order, tag in enumerate(["zeta", "alpha"])
    ),
)


class FreshProfiles:
    """A profile store that returns a new object on every read."""

    async def get_profile(self, profile_id: str) -> OperationProfile:
        assert profile_id == "p"
        return OperationProfile.model_validate_json(PROFILE.model_dump_json())

    async def save_profile(self, profile: OperationProfile) -> None:
        raise AssertionError("the test saves no profile")


def writers() -> OperationCatalog:
    catalog = OperationCatalog()
    for tag in ("zeta", "alpha"):

        @catalog.function(f"w_{tag}", name=tag, write_tag=tag)
        async def _write(ctx: OperationContext, tag: str = tag) -> OperationResult:
            return OperationResult.done(
                artifact=ctx.write(
                    tag.upper(),
                    persisted=False,
                    usage="prompt_only",
                    prompt_inclusion={"mode": "as_message"},
                )
            )

    return catalog


async def test_a_run_waiting_for_its_branch_keeps_its_profiles_ranks() -> None:
    release = anyio.Event()

    async def reply(request: MainLlmRequest) -> str:
        if request.chat_id == "c1" and not release.is_set():
            await release.wait()  # the first turn on c1 holds the branch
        return "ok"

    main_llm = FunctionMainLlm(reply)
    runner = make_runner(
        stores=InMemoryStores(), catalog=writers(), profiles=FreshProfiles(), main_llm=main_llm
    )

    def request(chat_id: str, text: str) -> RunRequest:
        return RunRequest(
            trigger=Trigger.GENERATE, chat_id=chat_id, profile_id="p", user_message=text
        )

    orders: list[list[tuple[str | None, int | None]]] = []

    async def turn(text: str) -> None:
        result = await runner.run(request("c1", text))
        prompt = result.run.main_llm.prompt
        assert prompt is not None
        orders.append([(r.tag, r.profile_index) for r in prompt.inclusions])

    async with anyio.create_task_group() as tg:
        tg.start_soon(turn, "first")
        await anyio.wait_all_tasks_blocked()
        tg.start_soon(turn, "second")  # waits for the branch
        await anyio.wait_all_tasks_blocked()
        for i in range(100):  # meanwhile, other chats load the profile again and again
            await runner.run(request(f"other{i}", "hi"))
        release.set()
    assert orders == [[("zeta", 0), ("alpha", 1)]] * 2
