"""Property tests: random operation DAGs with random outcomes against a reference model."""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass

import anyio
import anyio.lowlevel
import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from _support import make_runner
from opsrun.model import (
    AppendAfterLastUser,
    AssistantMeta,
    FailedType,
    Hook,
    OperationConfig,
    OperationFinished,
    OperationProfile,
    OperationResult,
    OperationStarted,
    ProfileOperation,
    RunEvent,
    RunRequest,
    RunResult,
    RunStatus,
    Trigger,
)
from opsrun.operations import OperationCatalog, OperationContext
from opsrun.stores import InMemoryStores
from opsrun.testing import ScriptedMainLlm

B, A = Hook.BEFORE_MAIN_LLM, Hook.AFTER_MAIN_LLM
OUTCOMES = ("done", "skipped", "error", "raise", "timeout", "abort")


@dataclass(frozen=True)
class Spec:
    op_id: str
    hook: Hook
    depends_on: tuple[str, ...]
    required: bool
    order: int
    outcome: str


@st.composite
def profiles(draw: st.DrawFn) -> list[Spec]:
    n = draw(st.integers(3, 10))
    hooks = draw(st.sampled_from([(B,), (A,), (B, A)]))
    # "done" is drawn more often so that runs also get past the barrier and finish done
    outcome = st.sampled_from(("done", "done", "done", "done", *OUTCOMES[1:-1]))
    with_abort = draw(st.integers(0, 5)) == 0  # about one profile in six aborts somewhere
    specs: list[Spec] = []
    for i in range(n):
        hook = draw(st.sampled_from(hooks))
        earlier = [s.op_id for s in specs if s.hook == hook]
        deps = tuple(d for d in earlier if draw(st.integers(0, 2)) == 0)
        specs.append(
            Spec(
                op_id=f"op{i}",
                hook=hook,
                depends_on=deps,
                required=draw(st.integers(0, 3)) == 0,
                order=draw(st.integers(0, 3)),
                outcome=draw(outcome),
            )
        )
    if with_abort:
        k = draw(st.integers(0, n - 1))
        specs[k] = Spec(**{**specs[k].__dict__, "outcome": "abort"})
    return specs


# -- the reference model ---------------------------------------------------------------------

Status = tuple[str, str | None, str | None]  # (status, skipped reason, error code)

OUTCOME_STATUS: dict[str, Status] = {
    "done": ("done", None, None),
    "skipped": ("skipped", "condition_false", None),
    "error": ("error", None, "boom"),
    "raise": ("error", None, "operation_exception"),
    "timeout": ("error", None, "timeout"),
    "abort": ("aborted", None, None),
}


def expected_hook(specs: list[Spec]) -> dict[str, Status]:
    """Statuses of one hook's operations when nothing aborts (index order is topological)."""
    out: dict[str, Status] = {}
    for s in specs:
        if any(out[d][0] != "done" for d in s.depends_on):
            out[s.op_id] = (
                ("error", None, "dependency_failed")
                if s.required
                else ("skipped", "dependency_failed", None)
            )
        else:
            out[s.op_id] = OUTCOME_STATUS[s.outcome]
    return out


def commit_sequence(specs: list[Spec], statuses: dict[str, Status]) -> list[str]:
    done = {s.op_id: s for s in specs if statuses[s.op_id][0] == "done"}
    emitted: list[str] = []
    ready = [(s.order, s.op_id) for s in done.values() if not s.depends_on]
    heapq.heapify(ready)
    while ready:
        _, op_id = heapq.heappop(ready)
        emitted.append(op_id)
        for s in done.values():
            if op_id in s.depends_on and all(d in emitted for d in s.depends_on):
                heapq.heappush(ready, (s.order, s.op_id))
    assert len(emitted) == len(done)
    return emitted


def blocked(specs: list[Spec], statuses: dict[str, Status]) -> bool:
    return any(s.required and statuses[s.op_id][0] != "done" for s in specs)


def downstream(specs: list[Spec], roots: set[str]) -> set[str]:
    found = set(roots)
    for s in specs:  # index order is topological
        if any(d in found for d in s.depends_on):
            found.add(s.op_id)
    return found


# -- the system under test ---------------------------------------------------------------------


class Probe:
    """Records start/finish sequence numbers and how many executions are active."""

    def __init__(self) -> None:
        self.clock = itertools.count(1)
        self.started: dict[tuple[str, Hook], int] = {}
        self.finished: dict[tuple[str, Hook], int] = {}
        self.active = 0


def build(specs: list[Spec], probe: Probe) -> OperationCatalog:
    catalog = OperationCatalog()
    for spec in specs:

        async def fn(ctx: OperationContext, spec: Spec = spec) -> OperationResult:
            key = (ctx.operation_id, ctx.hook)
            probe.started[key] = next(probe.clock)
            probe.active += 1
            try:
                await anyio.lowlevel.checkpoint()
                if spec.outcome == "skipped":
                    return OperationResult.skipped()
                if spec.outcome == "error":
                    return OperationResult.failed("boom", "failed on purpose")
                if spec.outcome == "raise":
                    raise ValueError("raised on purpose")
                if spec.outcome == "timeout":
                    await anyio.sleep_forever()
                if spec.outcome == "abort":
                    ctx.abort.abort()
                    await anyio.sleep_forever()
                if ctx.hook == B:
                    return OperationResult.done(prompt=[AppendAfterLastUser(content=spec.op_id)])
                return OperationResult.done(turn=[AssistantMeta(meta={spec.op_id: True})])
            finally:
                probe.active -= 1
                probe.finished[key] = next(probe.clock)

        catalog.function(spec.op_id, name=f"Operation {spec.op_id}")(fn)
    return catalog


async def execute(specs: list[Spec]) -> tuple[RunResult, Probe, ScriptedMainLlm, list[RunEvent]]:
    probe = Probe()
    stores = InMemoryStores()
    await stores.profiles.save_profile(
        OperationProfile(
            profile_id="p",
            name="P",
            operation_profile_session_id="s",
            operations=tuple(
                ProfileOperation(
                    operation_id=s.op_id,
                    config=OperationConfig(
                        hooks=(s.hook,),
                        order=s.order,
                        depends_on=s.depends_on,
                        required=s.required,
                        timeout_ms=5 if s.outcome == "timeout" else None,
                    ),
                )
                for s in specs
            ),
        )
    )
    llm = ScriptedMainLlm(default="reply")
    runner = make_runner(stores=stores, catalog=build(specs, probe), main_llm=llm)
    with anyio.fail_after(10):
        result = await runner.run(
            RunRequest(trigger=Trigger.GENERATE, chat_id="c", profile_id="p", user_message="u")
        )
    events = await stores.runs.events(result.run.run_id)
    return result, probe, llm, events


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@given(specs=profiles())
def test_random_profiles_follow_the_reference_model(backend: str, specs: list[Spec]) -> None:
    result, probe, llm, events = anyio.run(execute, specs, backend=backend)

    before = [s for s in specs if s.hook == B]
    after = [s for s in specs if s.hook == A]
    got = {
        r.operation_id: (r.status.value, r.skipped_reason and r.skipped_reason.value, r.error_code)
        for r in result.operation_runs
    }
    assert len(result.operation_runs) == len(specs)

    # the reference outcome, hook by hook
    exp_before = expected_hook(before)
    abort_before = {s.op_id for s in before if exp_before[s.op_id] == OUTCOME_STATUS["abort"]}
    if abort_before:
        aborted_in: Hook | None = B
        main_calls = 0
        exp_after: dict[str, Status] = {}
    elif blocked(before, exp_before):
        aborted_in = None
        main_calls = 0
        exp_after = {s.op_id: ("skipped", "main_llm_not_run", None) for s in after}
    else:
        main_calls = 1
        exp_after = expected_hook(after)
        abort_after = {s.op_id for s in after if exp_after[s.op_id] == OUTCOME_STATUS["abort"]}
        aborted_in = A if abort_after else None

    event(f"run {result.status.value}, aborted in {aborted_in}")
    assert len(llm.requests) == main_calls
    assert result.run.main_llm.started is (main_calls == 1)

    if aborted_in is None:
        assert {**exp_before, **exp_after} == got
        if main_calls == 0:
            assert result.status == RunStatus.FAILED
            assert result.failed_type == FailedType.BEFORE_BARRIER
        elif blocked(after, exp_after):
            assert result.status == RunStatus.FAILED
            assert result.failed_type == FailedType.AFTER_MAIN_LLM
        else:
            assert result.status == RunStatus.DONE
        commits = commit_sequence(before, exp_before) + (
            commit_sequence(after, exp_after) if main_calls else []
        )
    else:
        assert result.status == RunStatus.ABORTED
        assert result.run.abort_reason == "user_abort"
        hit = before if aborted_in == B else after
        exp_hit = exp_before if aborted_in == B else exp_after
        roots = {s.op_id for s in hit if exp_hit[s.op_id] == OUTCOME_STATUS["abort"]}
        for s in hit:
            if s.op_id in downstream(hit, roots):
                # Aborted, unless a dependency had already failed on its own: then the
                # operation may have ended on that failure before the abort reached it.
                allowed: list[Status] = [("aborted", None, None)]
                if any(got[d][0] not in ("done", "aborted") for d in s.depends_on):
                    allowed.append(exp_hit[s.op_id])
                assert got[s.op_id] in allowed, s
            else:  # raced with the abort: its own outcome or aborted
                assert got[s.op_id] in (exp_hit[s.op_id], ("aborted", None, None)), s
        if aborted_in == B:
            for s in after:
                assert got[s.op_id] == ("aborted", None, None)
            commits = []
        else:
            for s in before:
                assert got[s.op_id] == exp_before[s.op_id]
            commits = commit_sequence(before, exp_before)

    # commit order: dependencies first, then order, then id
    committed = sorted(
        (r for r in result.operation_runs if r.committed), key=lambda r: r.commit_index or 0
    )
    assert [r.operation_id for r in committed] == commits
    assert [r.commit_index for r in committed] == list(range(len(commits)))
    assert [e.operation_id for e in result.run.applied_effects] == commits
    if main_calls:
        sent = [m.content for m in llm.requests[0].messages]
        assert sent == ["u", *commit_sequence(before, exp_before)]

    # dependencies finish before dependants start; nothing is left running
    for s in specs:
        key = (s.op_id, s.hook)
        if key in probe.started:
            for dep in s.depends_on:
                assert probe.finished[(dep, s.hook)] < probe.started[key]
    assert probe.active == 0
    assert probe.started.keys() == probe.finished.keys()

    # events: seq 1..n, names from the definitions, one run.finished at the end
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert events[-1].type == "run.finished"
    assert events[-1].status == result.status
    for e in events:
        if isinstance(e, OperationStarted | OperationFinished):
            assert e.operation_name == f"Operation {e.operation_id}"
    assert {e.type for e in events if e.type.startswith("operation.")} <= {
        "operation.started",
        "operation.finished",
    }
    started_ops = [e.operation_id for e in events if e.type == "operation.started"]
    assert sorted(started_ops) == sorted(k[0] for k in probe.started)
    assert sum(e.type == "main_llm.started" for e in events) == main_calls
