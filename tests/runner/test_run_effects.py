"""Prompt-time and turn effects: what reaches the main LLM and the chat store, in commit order."""

from __future__ import annotations

from typing import Any

import pytest

from _support import A, B, generate, op, use_profile
from opsrun.model import (
    AppendAfterLastUser,
    AssistantBlocks,
    AssistantMeta,
    AssistantVariant,
    ChatMessage,
    ChatRole,
    DomainRole,
    InsertAtDepth,
    MessageVariant,
    OperationEffects,
    OperationError,
    OperationResult,
    OperationStatus,
    PromptEffect,
    RunStatus,
    SystemUpdate,
    UserVariant,
)
from opsrun.operations import OperationCatalog, OperationContext
from opsrun.ports import ProviderCapabilities, ProviderMessage
from opsrun.prompt._effective import build_prompt
from opsrun.runner import Runner
from opsrun.stores import InMemoryStores
from opsrun.testing import ScriptedMainLlm

pytestmark = pytest.mark.anyio


def returning(catalog: OperationCatalog, op_id: str, result: OperationResult) -> None:
    @catalog.function(op_id, name=op_id.upper())
    async def _fn(ctx: OperationContext) -> OperationResult:
        return result


def msgs(*pairs: tuple[str, str]) -> list[ProviderMessage]:
    return [ProviderMessage(role=r, content=c) for r, c in pairs]


# -- prompt-time effects -------------------------------------------------------------------


async def test_prompt_effects_reach_the_main_llm_in_order(
    runner: Runner,
    opsrun_catalog: OperationCatalog,
    opsrun_stores: InMemoryStores,
    opsrun_main_llm: ScriptedMainLlm,
) -> None:
    opsrun_main_llm.replies.extend(["a1", "a2"])
    await use_profile(opsrun_stores)
    await runner.run(generate("u1", system_prompt="sys"))

    returning(
        opsrun_catalog,
        "one",
        OperationResult.done(
            prompt=[
                SystemUpdate(mode="prepend", content="P:"),
                AppendAfterLastUser(content="after1"),
            ]
        ),
    )
    returning(
        opsrun_catalog,
        "two",
        OperationResult.done(
            prompt=[
                SystemUpdate(mode="append", content=":A"),
                InsertAtDepth(depth_from_end=-1, content="d1"),
                InsertAtDepth(depth_from_end=0, content="tail"),
            ]
        ),
    )
    returning(
        opsrun_catalog,
        "three",
        OperationResult.done(
            prompt=[
                InsertAtDepth(depth_from_end=0, content="tail2", role=DomainRole.USER),
                InsertAtDepth(depth_from_end=-1, content="d1b"),
                InsertAtDepth(depth_from_end=-3, content="d3"),
                InsertAtDepth(depth_from_end=-10, content="deep"),
                InsertAtDepth(depth_from_end=-2, content="d2", role=DomainRole.ASSISTANT),
                AppendAfterLastUser(content="after2", role=DomainRole.USER),
            ]
        ),
    )
    # commit order: one (order 1), two (order 2), three (order 3) -- set by order, not id
    await use_profile(
        opsrun_stores, op("three", B, order=3), op("two", B, order=2), op("one", B, order=1)
    )
    result = await runner.run(generate("u2", system_prompt="sys"))
    assert result.status == RunStatus.DONE
    assert list(opsrun_main_llm.requests[1].messages) == msgs(
        ("system", "P:sys:A"),
        ("system", "d3"),
        ("system", "deep"),
        ("user", "u1"),
        ("assistant", "d2"),
        ("assistant", "a1"),
        ("system", "d1"),
        ("system", "d1b"),
        ("user", "u2"),
        ("system", "after1"),
        ("user", "after2"),
        ("system", "tail"),
        ("user", "tail2"),
    )
    assert result.run.main_llm.prompt_hash is not None
    assert len(result.run.main_llm.prompt_hash) == 64


@pytest.mark.parametrize(
    ("updates", "expected"),
    [
        ((("prepend", "P1"), ("append", "A2"), ("replace", "R3")), "R3"),
        ((("replace", "R1"), ("prepend", "P2"), ("append", "A3")), "P2R1A3"),
        ((("append", "x1"), ("append", "x2"), ("prepend", "P3")), "P3basex1x2"),
    ],
)
async def test_system_update_applies_in_commit_order(
    runner: Runner,
    opsrun_catalog: OperationCatalog,
    opsrun_stores: InMemoryStores,
    opsrun_main_llm: ScriptedMainLlm,
    updates: tuple[tuple[Any, str], ...],
    expected: str,
) -> None:
    for i, (mode, content) in enumerate(updates, start=1):
        returning(
            opsrun_catalog,
            f"op{i}",
            OperationResult.done(prompt=[SystemUpdate(mode=mode, content=content)]),
        )
    # dependencies pin the commit order op1, op2, op3 against their order values
    await use_profile(
        opsrun_stores,
        op("op3", B, order=0, depends_on=("op2",)),
        op("op2", B, order=0, depends_on=("op1",)),
        op("op1", B, order=9),
    )
    await runner.run(generate(system_prompt="base"))
    assert opsrun_main_llm.requests[0].messages[0] == ProviderMessage(
        role="system", content=expected
    )


def test_build_prompt_depth_rules() -> None:
    def message(i: int, role: ChatRole) -> ChatMessage:
        v = MessageVariant(variant_id=f"v{i}", content=f"m{i}")
        return ChatMessage(
            message_id=f"m{i}",
            chat_id="c",
            branch_id="main",
            role=role,
            variants=(v,),
            selected_variant_id=v.variant_id,
        )

    history = [message(i, ChatRole.USER if i % 2 == 0 else ChatRole.ASSISTANT) for i in range(4)]
    effects: list[tuple[str, PromptEffect]] = [
        ("a", InsertAtDepth(depth_from_end=-4, content="at4")),
        ("a", InsertAtDepth(depth_from_end=-5, content="beyond")),
        ("b", InsertAtDepth(depth_from_end=-2, content="at2")),
        ("c", InsertAtDepth(depth_from_end=-2, content="at2b")),
        ("c", InsertAtDepth(depth_from_end=0, content="end")),
    ]
    out = build_prompt("", history, effects)
    assert [m.content for m in out] == [
        "at4",
        "beyond",
        "m0",
        "m1",
        "at2",
        "at2b",
        "m2",
        "m3",
        "end",
    ]
    assert out[0].source is not None
    assert out[0].source.operation_id == "a"
    # an empty system prompt is left out; without history a depth lands at the top
    assert [m.content for m in build_prompt("s", [], effects)] == [
        "s",
        "at4",
        "beyond",
        "at2",
        "at2b",
        "end",
    ]


async def test_developer_role_kept_when_supported(
    runner: Runner, opsrun_catalog: OperationCatalog, opsrun_stores: InMemoryStores
) -> None:
    llm = ScriptedMainLlm(capabilities=ProviderCapabilities(developer_role=True))
    runner.main_llm = llm
    returning(opsrun_catalog, "n", OperationResult.done(prompt=[AppendAfterLastUser(content="n")]))
    await use_profile(opsrun_stores, op("n", B))
    await runner.run(generate())
    assert llm.requests[0].messages[-1] == ProviderMessage(role="developer", content="n")


async def test_effects_of_non_done_operations_never_apply(
    runner: Runner,
    opsrun_catalog: OperationCatalog,
    opsrun_stores: InMemoryStores,
    opsrun_main_llm: ScriptedMainLlm,
) -> None:
    effects = OperationEffects(
        prompt=(AppendAfterLastUser(content="leak"),), turn=(UserVariant(content="leak"),)
    )
    returning(
        opsrun_catalog,
        "skips",
        OperationResult(status=OperationStatus.SKIPPED, effects=effects),
    )
    returning(
        opsrun_catalog,
        "errs",
        OperationResult(
            status=OperationStatus.ERROR,
            effects=effects,
            error=OperationError(code="e", message="m"),
        ),
    )
    returning(
        opsrun_catalog,
        "aborts",
        OperationResult(status=OperationStatus.ABORTED, effects=effects),
    )
    await use_profile(opsrun_stores, op("skips", B), op("errs", B), op("aborts", B))
    result = await runner.run(generate("hello"))
    assert result.status == RunStatus.DONE
    assert list(opsrun_main_llm.requests[0].messages) == msgs(("user", "hello"))
    assert result.run.applied_effects == ()
    assert not any(r.committed for r in result.operation_runs)
    message = await opsrun_stores.chats.get_message("c", result.run.user_message_id)
    assert len(message.variants) == 1


async def test_commit_order_and_applied_effect_indices(
    runner: Runner,
    opsrun_catalog: OperationCatalog,
    opsrun_stores: InMemoryStores,
    opsrun_main_llm: ScriptedMainLlm,
) -> None:
    for name in ("z", "b", "a", "c"):
        returning(
            opsrun_catalog,
            name,
            OperationResult.done(prompt=[AppendAfterLastUser(content=name)]),
        )
    returning(opsrun_catalog, "post", OperationResult.done(turn=[AssistantMeta(meta={"k": 1})]))
    await use_profile(
        opsrun_stores,
        op("z", B, order=0, depends_on=("b",)),
        op("b", B, order=5),
        op("a", B, order=5),
        op("c", B, order=1),
        op("post", A, order=0),
    )
    result = await runner.run(generate("u"))
    expected = ["c", "a", "b", "z"]
    assert [m.content for m in opsrun_main_llm.requests[0].messages[1:]] == expected
    applied = result.run.applied_effects
    assert [(e.index, e.operation_id, e.type) for e in applied] == [
        *[(i, name, "prompt.append_after_last_user") for i, name in enumerate(expected)],
        (4, "post", "turn.assistant_meta"),
    ]
    index = {r.operation_id: r.commit_index for r in result.operation_runs}
    assert index == {"c": 0, "a": 1, "b": 2, "z": 3, "post": 4}
    assert all(r.committed for r in result.operation_runs)


# -- turn effects ------------------------------------------------------------------------------


async def test_user_variant_reaches_prompt_and_later_history(
    runner: Runner,
    opsrun_catalog: OperationCatalog,
    opsrun_stores: InMemoryStores,
    opsrun_main_llm: ScriptedMainLlm,
) -> None:
    seen: list[str] = []

    @opsrun_catalog.function("fix", name="Fix")
    async def _fix(ctx: OperationContext) -> OperationResult:
        if ctx.history[-1].prompt_text != "hallo":
            return OperationResult.skipped()
        return OperationResult.done(turn=[UserVariant(content="hello")])

    @opsrun_catalog.function("look", name="Look")
    async def _look(ctx: OperationContext) -> OperationResult:
        seen.extend(m.prompt_text for m in ctx.history)
        return OperationResult.done()

    await use_profile(opsrun_stores, op("fix", B), op("look", A))
    first = await runner.run(generate("hallo"))
    assert first.status == RunStatus.DONE
    assert opsrun_main_llm.requests[0].messages[-1] == ProviderMessage(role="user", content="hello")
    message = await opsrun_stores.chats.get_message("c", first.run.user_message_id)
    assert [v.content for v in message.variants] == ["hallo", "hello"]
    assert message.prompt_text == "hello"
    assert message.selected.source == "operation:fix"
    assert seen == ["hello", "OK"]

    await runner.run(generate("next"))
    assert [m.content for m in opsrun_main_llm.requests[1].messages] == ["hello", "OK", "next"]


async def test_user_variant_not_selected(
    runner: Runner,
    opsrun_catalog: OperationCatalog,
    opsrun_stores: InMemoryStores,
    opsrun_main_llm: ScriptedMainLlm,
) -> None:
    returning(
        opsrun_catalog,
        "alt",
        OperationResult.done(turn=[UserVariant(content="alt", select=False)]),
    )
    await use_profile(opsrun_stores, op("alt", B))
    result = await runner.run(generate("orig"))
    message = await opsrun_stores.chats.get_message("c", result.run.user_message_id)
    assert [v.content for v in message.variants] == ["orig", "alt"]
    assert message.prompt_text == "orig"
    assert opsrun_main_llm.requests[0].messages[-1].content == "orig"


async def test_assistant_effects_after_hook(
    runner: Runner,
    opsrun_catalog: OperationCatalog,
    opsrun_stores: InMemoryStores,
    opsrun_main_llm: ScriptedMainLlm,
) -> None:
    opsrun_main_llm.replies.append("raw reply")
    seen: list[Any] = []

    @opsrun_catalog.function("canon", name="Canon")
    async def _canon(ctx: OperationContext) -> OperationResult:
        assert ctx.main_llm is not None
        text = ctx.main_llm.text
        assert text is not None
        seen.append(text)
        seen.append(ctx.history[-1].prompt_text)
        return OperationResult.done(turn=[AssistantVariant(content=text.upper())])

    returning(
        opsrun_catalog, "blocks", OperationResult.done(turn=[AssistantBlocks(blocks=({"t": "b"},))])
    )
    returning(
        opsrun_catalog, "meta", OperationResult.done(turn=[AssistantMeta(meta={"mood": "ok"})])
    )
    await use_profile(
        opsrun_stores, op("canon", A, order=1), op("blocks", A, order=2), op("meta", A, order=3)
    )
    result = await runner.run(generate("q"))
    assert result.status == RunStatus.DONE
    assert seen == ["raw reply", "raw reply"]
    history = await opsrun_stores.chats.history("c", "main")
    assistant = history[-1]
    assert assistant.role == ChatRole.ASSISTANT
    assert [v.content for v in assistant.variants] == ["raw reply", "RAW REPLY"]
    assert assistant.prompt_text == "RAW REPLY"
    assert assistant.selected.blocks == ({"t": "b"},)
    assert assistant.selected.meta == {"mood": "ok"}
    assert assistant.variants[0].blocks == ()
    assert assistant.turn_id == result.run.user_message_id
    # the main LLM's own variant stays recorded on the run
    assert result.run.main_llm.assistant_variant_id == assistant.variants[0].variant_id

    await runner.run(generate("again"))
    assert [m.content for m in opsrun_main_llm.requests[1].messages] == ["q", "RAW REPLY", "again"]


async def test_before_hook_sees_draft_prompt(
    runner: Runner, opsrun_catalog: OperationCatalog, opsrun_stores: InMemoryStores
) -> None:
    seen: list[Any] = []

    @opsrun_catalog.function("peek", name="Peek")
    async def _peek(ctx: OperationContext) -> OperationResult:
        seen.append(ctx.prompt and [(m.role.value, m.content) for m in ctx.prompt])
        seen.append(ctx.main_llm)
        return OperationResult.done()

    await use_profile(opsrun_stores, op("peek", B))
    await runner.run(generate("q", system_prompt="s"))
    assert seen == [[("system", "s"), ("user", "q")], None]
