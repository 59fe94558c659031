"""A store that fails once, at any one of a turn's store calls.

Whichever call fails, the run ends recorded (never left ``running``), its record lists
exactly the artifact writes the store took, and the turn can still be answered: by
retrying the same request when the turn had not begun (its user message was not stored),
else by regenerating it. The chat ends with one user message and one answer.
"""

from __future__ import annotations

import inspect
from typing import Any

import anyio
import pytest

from _support import generate, make_runner, op, use_profile
from opsrun.errors import OpsrunError, StoreError
from opsrun.model import (
    ChatRole,
    OperationProfileSessionKey,
    OperationResult,
    RunRequest,
    RunStatus,
    Trigger,
    UserVariant,
)
from opsrun.operations import OperationCatalog, OperationContext
from opsrun.runner import Runner
from opsrun.stores import InMemoryStores

pytestmark = pytest.mark.anyio

KEY = OperationProfileSessionKey(
    chat_id="c", branch_id="main", profile_ref="p", operation_profile_session_id="s1"
)
OPS = 2


class FailOnce:
    """The stores of ``inner``, whose ``at``-th store call raises ``store_busy``."""

    def __init__(self, inner: InMemoryStores, at: int) -> None:
        self.calls: list[str] = []
        self.at = at
        self.chats, self.sessions, self.runs, self.archive = (
            self._wrap(inner.chats, "chats"),
            self._wrap(inner.sessions, "sessions"),
            self._wrap(inner.runs, "runs"),
            self._wrap(inner.archive, "archive"),
        )

    def _wrap(self, store: Any, name: str) -> Any:
        outer = self

        class Failing:
            def __getattr__(self, attr: str) -> Any:
                method = getattr(store, attr)
                if not inspect.iscoroutinefunction(method):
                    return method

                async def call(*args: Any, **kwargs: Any) -> Any:
                    outer.calls.append(f"{name}.{attr}")
                    if len(outer.calls) == outer.at:
                        raise StoreError("database is locked", code="store_busy")
                    return await method(*args, **kwargs)

                return call

        return Failing()


def writers() -> OperationCatalog:
    """``w0`` and ``w1``: each writes ``art.t<i>`` and a user variant ``v<i>``."""
    catalog = OperationCatalog()
    for i in range(OPS):

        @catalog.function(f"w{i}", name=f"W{i}", write_tag=f"t{i}")
        async def _write(ctx: OperationContext, i: int = i) -> OperationResult:
            await anyio.lowlevel.checkpoint()
            return OperationResult.done(artifact=ctx.write(i), turn=[UserVariant(content=f"v{i}")])

    return catalog


async def turn(at: int) -> tuple[InMemoryStores, FailOnce, Runner, str | None]:
    """One turn whose ``at``-th store call fails; the code the caller got, if any."""
    stores = InMemoryStores()
    await use_profile(stores, *(op(f"w{i}", order=i) for i in range(OPS)))
    faulty = FailOnce(stores, at)
    runner = make_runner(
        stores=stores,
        catalog=writers(),
        chats=faulty.chats,
        sessions=faulty.sessions,
        runs=faulty.runs,
        archive=faulty.archive,
    )
    try:
        await runner.run(generate(user_message_id="m1"))
    except OpsrunError as exc:
        return stores, faulty, runner, exc.code
    return stores, faulty, runner, None


async def test_a_store_failing_at_any_call_leaves_a_true_record_and_an_answerable_turn() -> None:
    _, clean, _, _ = await turn(0)
    assert len(clean.calls) > 10  # the turn made this many store calls
    for at in range(1, len(clean.calls) + 1):
        stores, faulty, runner, raised = await turn(at)
        failed_call = faulty.calls[at - 1]
        runs = [await stores.runs.get_run(run_id) for run_id in stores.runs.run_ids()]
        for run, _ in runs:
            assert run.status != RunStatus.RUNNING, failed_call
        if raised is not None:
            assert raised == "store_busy", failed_call

        # The record lists exactly the artifact writes the store took.
        artifacts = await stores.sessions.get_artifacts(KEY)
        recorded = {effect.tag for run, _ in runs for effect in run.applied_effects if effect.tag}
        assert recorded == set(artifacts), failed_call

        # The turn can be answered.
        history = await stores.chats.history("c", "main")
        if not runs or runs[0][0].status == RunStatus.ABORTED:
            assert not history, failed_call  # not begun: the same request again
            assert runs == [] or runs[0][0].abort_reason == "turn_not_started"
            result = await runner.run(generate(user_message_id="m1"))
        elif runs[0][0].status == RunStatus.FAILED:
            again = await runner.run(generate(user_message_id="m1"))
            assert again.deduplicated, failed_call
            result = await runner.run(
                RunRequest(
                    trigger=Trigger.REGENERATE, chat_id="c", profile_id="p", user_message_id="m1"
                )
            )
        else:
            result = await runner.run(generate(user_message_id="m1"))
            assert result.deduplicated, failed_call
        assert result.status == RunStatus.DONE, failed_call
        roles = [m.role for m in await stores.chats.history("c", "main")]
        assert roles == [ChatRole.USER, ChatRole.ASSISTANT], failed_call


class FailAt(FailOnce):
    """The stores of ``inner``, whose store calls numbered in ``failing`` raise
    ``store_busy``."""

    def __init__(self, inner: InMemoryStores, failing: set[int]) -> None:
        self.failing = failing
        super().__init__(inner, 0)

    def _wrap(self, store: Any, name: str) -> Any:
        outer = self

        class Failing:
            def __getattr__(self, attr: str) -> Any:
                method = getattr(store, attr)
                if not inspect.iscoroutinefunction(method):
                    return method

                async def call(*args: Any, **kwargs: Any) -> Any:
                    outer.calls.append(f"{name}.{attr}")
                    if len(outer.calls) in outer.failing:
                        raise StoreError("database is locked", code="store_busy")
                    return await method(*args, **kwargs)

                return call

        return Failing()


async def final_save_failing(times: int) -> tuple[InMemoryStores, FailAt, Runner]:
    """A turn whose final ``save_run`` fails ``times`` times in a row."""
    _, clean, _, _ = await turn(0)
    last = max(i for i, call in enumerate(clean.calls, 1) if call == "runs.save_run")
    stores = InMemoryStores()
    await use_profile(stores, *(op(f"w{i}", order=i) for i in range(OPS)))
    faulty = FailAt(stores, set(range(last, last + times)))
    runner = make_runner(
        stores=stores,
        catalog=writers(),
        chats=faulty.chats,
        sessions=faulty.sessions,
        runs=faulty.runs,
        archive=faulty.archive,
    )
    return stores, faulty, runner


async def test_a_failed_final_save_is_tried_again_and_keeps_the_run_done() -> None:
    stores, faulty, runner = await final_save_failing(1)
    result = await runner.run(generate(user_message_id="m1"))
    assert result.status == RunStatus.DONE
    assert faulty.calls[-2:] == ["runs.save_run", "runs.save_run"]
    (run_id,) = stores.runs.run_ids()
    run, _ = await stores.runs.get_run(run_id)
    assert run.status == RunStatus.DONE
    events = await stores.runs.events(run_id)
    assert [e.type for e in events].count("run.finished") == 1


async def test_a_run_whose_final_record_cannot_be_stored_is_not_recorded_failed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stores, faulty, runner = await final_save_failing(2)
    with pytest.raises(StoreError) as raised:
        await runner.run(generate(user_message_id="m1"))
    assert raised.value.code == "store_busy"
    assert faulty.calls.count("runs.save_run") == 2  # tried twice, never recorded failed
    # The answer is in the chat; the stored record is the last one that was taken (the
    # run still holds its turn through its lease), never a failed run that was answered.
    (run_id,) = stores.runs.run_ids()
    run, _ = await stores.runs.get_run(run_id)
    assert run.status == RunStatus.RUNNING
    roles = [m.role for m in await stores.chats.history("c", "main")]
    assert roles == [ChatRole.USER, ChatRole.ASSISTANT]
    assert "could not be stored; left to its lease" in caplog.text
