"""Cancelling a turn while it applies, the check's process group, and the thread events
are delivered on."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

import opsrun.protocol._driver as driver_module
from opsrun.errors import ApplyError
from opsrun.protocol import (
    DriverConfig,
    FilePlanState,
    InMemoryMemory,
    PlanDriver,
    PlanEvent,
    apply_plan,
    load_traces,
    parse_plan,
    recover,
)
from opsrun.testing import ScriptedProvider

pytestmark = pytest.mark.anyio
posix_only = pytest.mark.skipif(os.name != "posix", reason="process groups are POSIX")

PLAN = json.dumps({"actions": [], "summary": "Diagnosis: add R.md"})
CREATE = json.dumps(
    {"actions": [{"kind": "CREATE_FILE", "path": "R.md", "content": "x\n"}], "summary": "add R"}
)


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its parent to reap it counts as dead)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True


async def wait_for(path: Path) -> None:
    with anyio.fail_after(60):  # a bound for a hung test, not a timing assertion
        while not path.exists() or not path.read_text().strip():
            await anyio.sleep(0.01)


async def wait_dead(pid: int) -> None:
    with anyio.fail_after(20):  # the grandchild sleeps 60 s unless killed
        while alive(pid):
            await anyio.sleep(0.02)


def make(root: Path, provider: Any, events: list[PlanEvent], **config: Any) -> PlanDriver:
    return PlanDriver(
        provider=provider,
        model="m",
        root=root,
        config=DriverConfig(write_traces=True, **config),
        events=events.append,
        state=FilePlanState(root / ".opsrun" / "driver" / "plan.json"),
        memory=InMemoryMemory(),
    )


def slow_check(tmp_path: Path) -> list[str]:
    """A check that starts a grandchild, writes both pids to ``pids`` and waits."""
    pids = tmp_path.parent / f"{tmp_path.name}-pids"
    script = f"sleep 60 & echo $$ $! > '{pids}'; wait"
    return ["sh", "-c", script]


@posix_only
async def test_cancel_while_the_check_runs_rolls_back(tmp_path: Path) -> None:
    events: list[PlanEvent] = []
    driver = make(tmp_path, ScriptedProvider([PLAN, CREATE]), events, check=slow_check(tmp_path))
    assert (await driver.turn("plan: add R.md")).status == "planned"
    pids = tmp_path.parent / f"{tmp_path.name}-pids"
    scope = anyio.CancelScope()

    async def ok() -> None:
        with scope:
            await driver.turn("ok")
            pytest.fail("the turn was not cancelled")

    async with anyio.create_task_group() as group:
        group.start_soon(ok)
        await wait_for(pids)
        scope.cancel()

    assert scope.cancelled_caught
    assert not (tmp_path / "R.md").exists()
    assert await driver.state.load() is not None  # nothing applied: the plan waits
    assert recover(tmp_path).outcome == "nothing"  # the journal says rolled back
    for pid in map(int, pids.read_text().split()):
        await wait_dead(pid)
    traces, _ = load_traces(tmp_path)
    apply_trace = [t for t in traces if t["mode"] == "apply"]
    assert [(t["status"], t["error_code"]) for t in apply_trace] == [
        ("failed", "ERR_APPLY_CANCELLED")
    ]
    assert [e.name for e in events][-1] == "APPLY_ROLLBACK"


async def test_cancel_after_the_commit_finishes_the_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    committed = threading.Event()

    def late_apply(*args: Any, **kwargs: Any) -> Any:
        stop = kwargs.pop("stop", None)
        result = apply_plan(*args, **kwargs)  # commits whatever stop says
        committed.set()
        if stop is not None:
            stop.wait(30)  # the cancellation comes after the commit
        else:  # a driver that cannot stop the apply: the cancellation waits for it
            time.sleep(1)
        return result

    monkeypatch.setattr(driver_module, "apply_plan", late_apply)
    events: list[PlanEvent] = []
    driver = make(tmp_path, ScriptedProvider([PLAN, CREATE]), events)
    assert (await driver.turn("plan: add R.md")).status == "planned"
    scope = anyio.CancelScope()

    async def ok() -> None:
        with scope:
            await driver.turn("ok")
            pytest.fail("the turn was not cancelled")

    async with anyio.create_task_group() as group:
        group.start_soon(ok)
        while not committed.is_set():
            await anyio.sleep(0.01)
        scope.cancel()

    assert scope.cancelled_caught
    assert (tmp_path / "R.md").read_text() == "x\n"
    assert await driver.state.load() is None  # applied: the plan is done
    traces, _ = load_traces(tmp_path)
    assert [t["status"] for t in traces if t["mode"] == "apply"] == ["applied"]
    assert "APPLY_SUCCESS" in [e.name for e in events]


async def test_events_are_delivered_on_the_event_loop_thread(tmp_path: Path) -> None:
    loop_thread = threading.get_ident()
    seen: list[tuple[str, int]] = []
    send, receive = anyio.create_memory_object_stream[str](100)

    def sink(event: PlanEvent) -> None:
        seen.append((event.name, threading.get_ident()))
        send.send_nowait(event.name)  # wakes a task: only safe on the loop's thread

    driver = PlanDriver(
        provider=ScriptedProvider([CREATE]),
        model="m",
        root=tmp_path,
        config=DriverConfig(check=[sys.executable, "-c", "pass"]),
        events=sink,
        memory=InMemoryMemory(),
    )
    received: list[str] = []

    async def consume() -> None:
        async with receive:
            received.extend([name async for name in receive])

    async with anyio.create_task_group() as group:
        group.start_soon(consume)
        with anyio.fail_after(60):  # a bound for a hung test, not a timing assertion
            result = await driver.turn("apply: add R.md")
        send.close()

    assert result.status == "applied"
    names = [name for name, _ in seen]
    assert {"PREVIEW_READY", "APPLY_SUCCESS"} <= set(names)
    assert {thread for _, thread in seen} == {loop_thread}
    assert received == names


@posix_only
def test_a_timed_out_check_is_killed_with_its_process_group(tmp_path: Path) -> None:
    plan = parse_plan(CREATE, version=2)
    pids = tmp_path.parent / f"{tmp_path.name}-pids"
    with pytest.raises(ApplyError) as caught:
        apply_plan(plan, tmp_path, check=slow_check(tmp_path), check_timeout=3)
    assert caught.value.code == "ERR_CHECK_FAILED"
    assert caught.value.details["timed_out"] is True
    assert not (tmp_path / "R.md").exists()
    for pid in map(int, pids.read_text().split()):
        anyio.run(wait_dead, pid)


@posix_only
def test_stop_cancels_a_running_check(tmp_path: Path) -> None:
    plan = parse_plan(CREATE, version=2)
    pids = tmp_path.parent / f"{tmp_path.name}-pids"
    stop = threading.Event()
    errors: list[ApplyError] = []

    def run() -> None:
        try:
            apply_plan(plan, tmp_path, check=slow_check(tmp_path), stop=stop)
        except ApplyError as exc:
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    anyio.run(wait_for, pids)
    stop.set()
    thread.join()
    assert [e.code for e in errors] == ["ERR_APPLY_CANCELLED"]
    assert not (tmp_path / "R.md").exists()
    for pid in map(int, pids.read_text().split()):
        anyio.run(wait_dead, pid)


@posix_only
def test_an_asyncio_task_cancelled_while_the_check_runs_rolls_back(tmp_path: Path) -> None:
    import asyncio

    events: list[PlanEvent] = []
    driver = make(tmp_path, ScriptedProvider([PLAN, CREATE]), events, check=slow_check(tmp_path))
    pids = tmp_path.parent / f"{tmp_path.name}-pids"

    async def main() -> None:
        assert (await driver.turn("plan: add R.md")).status == "planned"
        task = asyncio.create_task(driver.turn("ok"))
        while not pids.exists() or not pids.read_text().strip():
            await asyncio.sleep(0.01)
        task.cancel()  # asyncio's own cancellation, as asyncio.timeout() uses
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await driver.state.load() is not None

    asyncio.run(main())
    assert not (tmp_path / "R.md").exists()
    assert recover(tmp_path).outcome == "nothing"
    for pid in map(int, pids.read_text().split()):
        anyio.run(wait_dead, pid)
