"""Builders shared by the tests: the one way to build a Runner, profile entries, requests.

Every test module can import it (``from _support import ...``): pytest puts ``tests/`` on
``sys.path`` for ``tests/conftest.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from hypothesis import settings

from opsrun.model import (
    Artifact,
    Hook,
    OperationConfig,
    OperationProfile,
    OperationProfileSessionKey,
    ProfileOperation,
    Run,
    RunRequest,
    Trigger,
)
from opsrun.operations import OperationCatalog
from opsrun.ports import (
    ArtifactArchive,
    ChatStore,
    Clock,
    EventSink,
    IdFactory,
    MainLlm,
    ProfileStore,
    RunStore,
    SessionStore,
    Stores,
)
from opsrun.prompt import HistoryWindow, SnapshotPolicy
from opsrun.redaction import Redactor
from opsrun.runner import Executor, Runner
from opsrun.stores import InMemoryStores
from opsrun.testing import FakeClock, ScriptedMainLlm, SequentialIds

B, A = Hook.BEFORE_MAIN_LLM, Hook.AFTER_MAIN_LLM


def make_runner(
    *,
    stores: Stores | None = None,
    catalog: OperationCatalog | None = None,
    main_llm: MainLlm | None = None,
    profiles: ProfileStore | None = None,
    sessions: SessionStore | None = None,
    chats: ChatStore | None = None,
    runs: RunStore | None = None,
    archive: ArtifactArchive | None = None,
    executor: Executor | None = None,
    events: EventSink | None = None,
    clock: Clock | None = None,
    ids: IdFactory | None = None,
    summarize: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    redactor: Redactor | None = None,
    window: HistoryWindow | None = None,
    snapshot: SnapshotPolicy | None = None,
    concurrent_turns: Literal["wait", "refuse"] = "wait",
    lease_seconds: float = 30.0,
    event_batch_seconds: float = 0.02,
) -> Runner:
    """The Runner every test builds: each argument overrides one default.

    Defaults: fresh in-memory stores (archive included), an empty catalog, a scripted main
    LLM answering ``"OK"``, a fake clock and sequential ids; the other arguments are
    ``Runner``'s own defaults.
    """
    return Runner(
        catalog=catalog if catalog is not None else OperationCatalog(),
        stores=stores if stores is not None else InMemoryStores(),
        main_llm=main_llm if main_llm is not None else ScriptedMainLlm(),
        profiles=profiles,
        sessions=sessions,
        chats=chats,
        runs=runs,
        archive=archive,
        executor=executor,
        events=events,
        clock=clock if clock is not None else FakeClock(),
        ids=ids if ids is not None else SequentialIds(),
        summarize=summarize,
        redactor=redactor,
        window=window,
        snapshot=snapshot,
        concurrent_turns=concurrent_turns,
        lease_seconds=lease_seconds,
        event_batch_seconds=event_batch_seconds,
    )


def op(op_id: str, *hooks: Hook, order: float = 1, **config: Any) -> ProfileOperation:
    """A profile entry in ``hooks`` (before_main_llm when none are given)."""
    return ProfileOperation(
        operation_id=op_id, config=OperationConfig(hooks=hooks or (B,), order=order, **config)
    )


async def use_profile(stores: Stores, *ops: ProfileOperation, **kw: Any) -> None:
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


def examples(fraction: float) -> int:
    """``max_examples`` for a property whose examples are slow: ``fraction`` of the active
    Hypothesis profile's (tests/conftest.py: ci 200, dev 50), never below 20.

    Call it in the ``@settings`` of a test (when its module is imported, after the
    conftest loaded the profile), so ci still tries more examples than dev.
    """
    return max(20, round(settings().max_examples * fraction))


async def session_artifacts(stores: Stores, run: Run) -> dict[str, Artifact]:
    """The artifacts of the profile session ``run`` worked in."""
    assert run.profile_ref is not None
    assert run.operation_profile_session_id is not None
    key = OperationProfileSessionKey(
        chat_id=run.chat_id,
        branch_id=run.branch_id,
        profile_ref=run.profile_ref,
        operation_profile_session_id=run.operation_profile_session_id,
    )
    return await stores.sessions.get_artifacts(key)
