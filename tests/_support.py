"""Builders shared by the runner tests: operations, the test profile and requests."""

from __future__ import annotations

from typing import Any

from opsrun.model import (
    Hook,
    OperationConfig,
    OperationProfile,
    ProfileOperation,
    RunRequest,
    Trigger,
)
from opsrun.ports import MainLlm
from opsrun.runner import OperationCatalog, Runner
from opsrun.stores import InMemoryStores
from opsrun.testing import FakeClock, SequentialIds

B, A = Hook.BEFORE_MAIN_LLM, Hook.AFTER_MAIN_LLM


def op(op_id: str, *hooks: Hook, order: float = 1, **config: Any) -> ProfileOperation:
    """A profile entry in ``hooks`` (before_main_llm when none are given)."""
    return ProfileOperation(
        operation_id=op_id, config=OperationConfig(hooks=hooks or (B,), order=order, **config)
    )


async def use_profile(stores: InMemoryStores, *ops: ProfileOperation, **kw: Any) -> None:
    """Store profile ``p`` (session ``s1``) made of ``ops``."""
    await stores.profiles.save_profile(
        OperationProfile(
            profile_id="p", name="P", operation_profile_session_id="s1", operations=ops, **kw
        )
    )


def generate(text: str = "hi", **kw: Any) -> RunRequest:
    """A generate request for chat ``c`` with profile ``p``."""
    return RunRequest(
        trigger=Trigger.GENERATE, chat_id="c", profile_id="p", user_message=text, **kw
    )


def make_runner(
    stores: InMemoryStores, catalog: OperationCatalog, main_llm: MainLlm, **kw: Any
) -> Runner:
    """A Runner over ``stores`` with a fake clock and sequential ids; ``kw`` go to Runner."""
    kw.setdefault("clock", FakeClock())
    kw.setdefault("ids", SequentialIds())
    return Runner(
        catalog=catalog,
        profiles=stores.profiles,
        sessions=stores.sessions,
        chats=stores.chats,
        runs=stores.runs,
        main_llm=main_llm,
        **kw,
    )
