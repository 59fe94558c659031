"""Artifacts: versions, history, retention, run-only staging and optimistic concurrency."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import anyio
import pytest

from _support import A, B, generate, make_runner, op, use_profile
from opsrun.model import (
    Artifact,
    ArtifactUsage,
    ArtifactWrite,
    AssistantMeta,
    ContentFormat,
    DurableRetention,
    FailedType,
    OperationDefinition,
    OperationProfileSessionKey,
    OperationResult,
    OperationStatus,
    OverwriteRetention,
    PromptInclusion,
    Retention,
    RunResult,
    RunStatus,
    UserVariant,
    WindowRetention,
)
from opsrun.operations import Operation, OperationCatalog, OperationContext
from opsrun.runner import Runner
from opsrun.runner._artifacts import next_artifact
from opsrun.stores import InMemoryRunStore, InMemoryStores
from opsrun.testing import FakeClock

KEY = OperationProfileSessionKey(
    chat_id="c", branch_id="main", profile_ref="p", operation_profile_session_id="s1"
)

pytestmark = pytest.mark.anyio

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def counter(catalog: OperationCatalog, retention: Retention | None) -> None:
    """``count`` writes art.count = previous + 1, persisted, with ``retention``."""

    @catalog.function("count", name="Count", write_tag="count")
    async def _count(ctx: OperationContext) -> OperationResult:
        previous = ctx.art_value("count", 0)
        assert isinstance(previous, int)
        return OperationResult.done(artifact=ctx.write(previous + 1, retention=retention))


async def stored(stores: InMemoryStores, tag: str) -> Artifact | None:
    return (await stores.sessions.get_artifacts(KEY)).get(tag)


async def test_persisted_versions_and_overwrite(
    runner: Runner, opsrun_catalog: OperationCatalog, opsrun_stores: InMemoryStores
) -> None:
    counter(opsrun_catalog, None)
    await use_profile(opsrun_stores, op("count", A))
    results = [await runner.run(generate(f"t{i}")) for i in range(3)]
    art = await stored(opsrun_stores, "count")
    assert art is not None
    assert (art.value, art.version, art.based_on_version) == (3, 3, 2)
    assert art.history == ()
    assert art.retention == OverwriteRetention()
    assert art.written_by == "count"
    assert art.run_id == results[-1].run.run_id
    applied = results[-1].run.applied_effects
    assert [(e.type, e.tag, e.version, e.based_on_version) for e in applied] == [
        ("artifact.write", "count", 3, 2)
    ]


async def test_window_max_versions(
    runner: Runner, opsrun_catalog: OperationCatalog, opsrun_stores: InMemoryStores
) -> None:
    counter(opsrun_catalog, WindowRetention(max_versions=2))
    await use_profile(opsrun_stores, op("count", B))
    results = [await runner.run(generate(f"t{i}")) for i in range(5)]
    art = await stored(opsrun_stores, "count")
    assert art is not None
    assert art.value == 5
    assert [(h.version, h.value) for h in art.history] == [(4, 4), (3, 3)]
    assert results[-1].operation("count").outputs_summary.get("prunedVersions") == [2]


async def test_window_ttl_uses_the_clock(
    runner: Runner, opsrun_catalog: OperationCatalog, opsrun_stores: InMemoryStores
) -> None:
    clock = runner.clock
    assert isinstance(clock, FakeClock)
    counter(opsrun_catalog, WindowRetention(ttl_ms=10_000))
    await use_profile(opsrun_stores, op("count", B))
    await runner.run(generate("t1"))  # v1 at t=0
    clock.advance(seconds=5)
    await runner.run(generate("t2"))  # v2 at t=5, history [v1 (t=0)]
    art = await stored(opsrun_stores, "count")
    assert art is not None
    assert [h.version for h in art.history] == [1]
    clock.advance(seconds=8)
    await runner.run(generate("t3"))  # t=13: v1 is 13 s old, v2 8 s
    art = await stored(opsrun_stores, "count")
    assert art is not None
    assert art.value == 3
    assert [h.version for h in art.history] == [2]


async def test_durable_keeps_everything_and_retention_sticks(
    runner: Runner, opsrun_catalog: OperationCatalog, opsrun_stores: InMemoryStores
) -> None:
    retention: list[Retention | None] = [DurableRetention()]

    @opsrun_catalog.function("count", name="Count", write_tag="count")
    async def _count(ctx: OperationContext) -> OperationResult:
        previous = ctx.art_value("count", 0)
        assert isinstance(previous, int)
        # only the first write names a retention; later writes keep the artifact's policy
        return OperationResult.done(
            artifact=ctx.write(previous + 1, retention=retention.pop() if retention else None)
        )

    await use_profile(opsrun_stores, op("count", A))
    for i in range(4):
        await runner.run(generate(f"t{i}"))
    art = await stored(opsrun_stores, "count")
    assert art is not None
    assert art.retention == DurableRetention()
    assert [h.value for h in art.history] == [3, 2, 1]


async def test_run_only_artifacts_are_staged_for_dependants_and_not_persisted(
    runner: Runner, opsrun_catalog: OperationCatalog, opsrun_stores: InMemoryStores
) -> None:
    seen: dict[str, Any] = {}

    @opsrun_catalog.function("guard", name="Guard", write_tag="flag")
    async def _guard(ctx: OperationContext) -> OperationResult:
        seen["guard_run"] = ctx.run.run_id
        return OperationResult.done(artifact=ctx.write({"combat": True}, persisted=False))

    @opsrun_catalog.function("direct", name="Direct")
    async def _direct(ctx: OperationContext) -> OperationResult:
        art = ctx.art("flag")
        seen["direct"] = art and (art.value, art.version, art.persisted)
        return OperationResult.done()

    @opsrun_catalog.function("transitive", name="Transitive")
    async def _transitive(ctx: OperationContext) -> OperationResult:
        seen["transitive"] = ctx.art_value("flag")
        return OperationResult.done()

    @opsrun_catalog.function("after", name="After")
    async def _after(ctx: OperationContext) -> OperationResult:
        seen.setdefault("after", []).append(ctx.art_value("flag"))
        return OperationResult.done()

    await use_profile(
        opsrun_stores,
        op("guard", B),
        op("direct", B, depends_on=("guard",)),
        op("transitive", B, depends_on=("direct",)),
        op("after", A),
    )
    await runner.run(generate("one"))
    assert seen["direct"] == ({"combat": True}, 1, False)
    assert seen["transitive"] == {"combat": True}
    assert seen["after"] == [{"combat": True}]
    assert await stored(opsrun_stores, "flag") is None

    # a later run does not see the previous run's run-only artifact before writing it
    seen.clear()
    await use_profile(opsrun_stores, op("guard", B, order=2), op("after", B, order=1))
    await runner.run(generate("two"))
    assert seen["after"] == [None]


async def test_uncommitted_staged_write_is_invisible_to_non_dependants(
    runner: Runner, opsrun_catalog: OperationCatalog, opsrun_stores: InMemoryStores
) -> None:
    written = anyio.Event()
    seen: list[Any] = []

    @opsrun_catalog.function("writer", name="Writer", write_tag="note")
    async def _writer(ctx: OperationContext) -> OperationResult:
        written.set()
        return OperationResult.done(artifact=ctx.write("x", persisted=False))

    @opsrun_catalog.function("gate", name="Gate")
    async def _gate(ctx: OperationContext) -> OperationResult:
        await written.wait()
        return OperationResult.done()

    @opsrun_catalog.function("reader", name="Reader")
    async def _reader(ctx: OperationContext) -> OperationResult:
        seen.append(ctx.art_value("note"))
        return OperationResult.done()

    await use_profile(
        opsrun_stores,
        op("writer", B, order=5),
        op("gate", B, order=1),
        op("reader", B, depends_on=("gate",)),
    )
    await runner.run(generate())
    assert seen == [None]


async def test_persisted_write_in_before_hook_is_visible_after(
    runner: Runner, opsrun_catalog: OperationCatalog, opsrun_stores: InMemoryStores
) -> None:
    seen: list[Any] = []

    @opsrun_catalog.function("w", name="W", write_tag="state")
    async def _w(ctx: OperationContext) -> OperationResult:
        return OperationResult.done(
            artifact=ctx.write({"hp": 3}, usage=ArtifactUsage.PROMPT_AND_UI, semantics="state")
        )

    @opsrun_catalog.function("r", name="R")
    async def _r(ctx: OperationContext) -> OperationResult:
        art = ctx.art("state")
        seen.append(art and (art.value, art.version, art.usage))
        return OperationResult.done()

    await use_profile(opsrun_stores, op("w", B), op("r", A))
    await runner.run(generate())
    assert seen == [({"hp": 3}, 1, ArtifactUsage.PROMPT_AND_UI)]
    art = await stored(opsrun_stores, "state")
    assert art is not None
    assert art.semantics == "state"


async def test_stale_based_on_version_is_artifact_conflict(
    runner: Runner, opsrun_catalog: OperationCatalog, opsrun_stores: InMemoryStores
) -> None:
    @opsrun_catalog.function("stale", name="Stale", write_tag="t")
    async def _stale(ctx: OperationContext) -> OperationResult:
        return OperationResult.done(
            artifact=ArtifactWrite(tag="t", value="new", based_on_version=7),
            turn=[UserVariant(content="should not apply")],
        )

    await use_profile(opsrun_stores, op("stale", B, required=True))
    result = await runner.run(generate("orig"))
    stale = result.operation("stale")
    assert stale.status == OperationStatus.ERROR
    assert stale.error_code == "artifact_conflict"
    assert stale.committed is False
    assert result.status == RunStatus.FAILED
    assert result.failed_type == FailedType.BEFORE_BARRIER
    assert await stored(opsrun_stores, "t") is None
    message = await opsrun_stores.chats.get_message("c", result.run.user_message_id)
    assert message.prompt_text == "orig"


async def test_concurrent_runs_conflict_on_the_same_version(
    runner: Runner, opsrun_catalog: OperationCatalog, opsrun_stores: InMemoryStores
) -> None:
    both_read = anyio.Event()
    readers: list[int | None] = []

    @opsrun_catalog.function("ws", name="World state", write_tag="world")
    async def _ws(ctx: OperationContext) -> OperationResult:
        art = ctx.art("world")
        if art is not None:  # the seeding run does not wait
            readers.append(art.version)
            if len(readers) == 2:
                both_read.set()
            await both_read.wait()
        return OperationResult.done(
            artifact=ctx.write(f"by {ctx.run.run_id}", retention=DurableRetention()),
            turn=[AssistantMeta(meta={"by": ctx.run.run_id})],
        )

    await use_profile(opsrun_stores, op("ws", A))
    first = await runner.run(generate("seed"))
    assert first.status == RunStatus.DONE

    results: list[RunResult] = []
    # One branch has one active run per run store; two processes whose run stores do
    # not share branch holds still meet at the session store's compare-and-set.
    elsewhere = make_runner(
        catalog=opsrun_catalog,
        stores=opsrun_stores,
        runs=InMemoryRunStore(),
        clock=runner.clock,
        ids=runner.ids,
    )

    async def go(text: str, on: Runner) -> None:
        results.append(await on.run(generate(text)))

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(go, "left", runner)
            tg.start_soon(go, "right", elsewhere)
    assert readers == [1, 1]
    outcomes = {r.run.run_id: r.operation("ws") for r in results}
    winners = [rid for rid, o in outcomes.items() if o.status == OperationStatus.DONE]
    losers = [rid for rid, o in outcomes.items() if o.status == OperationStatus.ERROR]
    assert len(winners) == 1
    assert len(losers) == 1
    (winner,) = winners
    (loser,) = losers
    assert outcomes[winner].committed
    assert not outcomes[loser].committed
    assert outcomes[loser].error_code == "artifact_conflict"
    art = await stored(opsrun_stores, "world")
    assert art is not None
    assert art.value == f"by {winner}"
    assert art.version == 2
    assert [h.value for h in art.history] == [f"by {first.run.run_id}"]
    # the loser's other effects did not apply; both replies are kept
    history = await opsrun_stores.chats.history("c", "main")
    metas = {m.selected.run_id: m.selected.meta for m in history if m.role.value == "assistant"}
    assert metas[winner] == {"by": winner}
    assert metas[loser] == {}
    loser_result = next(r for r in results if r.run.run_id == loser)
    assert loser_result.status == RunStatus.DONE  # ws is optional
    assert loser_result.run.applied_effects == ()


async def test_writing_without_a_declared_tag_says_what_to_declare(
    runner: Runner, opsrun_catalog: OperationCatalog, opsrun_stores: InMemoryStores
) -> None:
    @opsrun_catalog.function("undeclared", name="Undeclared")
    async def _undeclared(ctx: OperationContext) -> OperationResult:
        return OperationResult.done(artifact=ctx.write(1))

    counter(opsrun_catalog, None)
    await use_profile(opsrun_stores, op("undeclared", A), op("count", A))
    result = await runner.run(generate())
    failed = result.operation("undeclared")
    assert failed.status is OperationStatus.ERROR
    assert failed.error is not None
    assert failed.error.code == "operation_exception"
    assert "write_tag=" in failed.error.message
    assert "writeArtifact.tag" in failed.error.message
    assert result.operation("count").status is OperationStatus.DONE
    assert await stored(opsrun_stores, "undeclared") is None


async def test_a_write_that_names_only_its_value_keeps_the_artifacts_settings(
    runner: Runner, opsrun_catalog: OperationCatalog, opsrun_stores: InMemoryStores
) -> None:
    """Usage, semantics, format and the inclusion rule stay as the first write set them;
    a later write that names one changes it."""
    inclusion = PromptInclusion(mode="prepend_system")
    writes: list[dict[str, Any]] = [
        {
            "usage": ArtifactUsage.PROMPT_ONLY,
            "semantics": "memory",
            "format": ContentFormat.MARKDOWN,
            "prompt_inclusion": inclusion,
        },
        {},
        {"usage": ArtifactUsage.INTERNAL},
    ]

    @opsrun_catalog.function("notes", name="Notes", write_tag="notes")
    async def _notes(ctx: OperationContext) -> OperationResult:
        return OperationResult.done(artifact=ctx.write("remember the map", **writes.pop(0)))

    await use_profile(opsrun_stores, op("notes", A))
    await runner.run(generate("one"))
    await runner.run(generate("two"))
    kept = await stored(opsrun_stores, "notes")
    assert kept is not None
    assert (kept.version, kept.usage, kept.semantics, kept.format, kept.prompt_inclusion) == (
        2,
        ArtifactUsage.PROMPT_ONLY,
        "memory",
        ContentFormat.MARKDOWN,
        inclusion,
    )
    included = await runner.run(generate("three"))
    assert included.run.main_llm.prompt is not None
    (record,) = included.run.main_llm.prompt.inclusions
    assert record.included
    changed = await stored(opsrun_stores, "notes")
    assert changed is not None
    assert (changed.usage, changed.format) == (ArtifactUsage.INTERNAL, ContentFormat.MARKDOWN)


def test_a_first_write_without_settings_gets_the_defaults() -> None:
    write = ArtifactWrite(tag="t", value=1)
    assert (write.usage, write.semantics, write.format) == (None, None, None)
    (artifact, _) = next_artifact(None, write, now=T0, run_id="r", operation_id="o")
    assert (artifact.usage, artifact.semantics, artifact.format) == (
        ArtifactUsage.INTERNAL,
        "intermediate",
        ContentFormat.TEXT,
    )


class Echo(Operation):
    """A user kind with no params model: its tag comes from the profile's params."""

    def __init__(self, definition: OperationDefinition) -> None:
        self.definition = definition

    async def execute(self, ctx: OperationContext) -> OperationResult:
        return OperationResult.done(artifact=ctx.write("echo"))


async def test_a_kind_without_a_params_model_writes_the_tag_its_raw_params_name() -> None:
    catalog = OperationCatalog(kinds={"echo": Echo})
    catalog.add_definition(OperationDefinition(operation_id="e1", name="E1", kind="echo"))
    stores = InMemoryStores()
    params = {"writeArtifact": {"tag": "shout", "persisted": True}}
    await use_profile(stores, op("e1", A, params=params))
    profile = await stores.profiles.get_profile("p")
    assert catalog.validate(profile) == []
    result = await make_runner(stores=stores, catalog=catalog).run(generate())
    assert result.operation("e1").status == OperationStatus.DONE
    written = await stored(stores, "shout")
    assert written is not None
    assert written.value == "echo"
