"""Values a run cannot store as given: too deeply nested JSON, text without a UTF-8 form.

A reply or an operation's artifact nested deeper than ``MAX_JSON_DEPTH`` fails that
operation with a stable code (the run goes on); text holding lone UTF-16 surrogates is
mended. Either way the run ends, every record is stored, and a SQLite store reads it all
back: a deep value used to crash the run with ``RecursionError``, and a lone surrogate
failed the store's write.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from _support import generate, make_runner, op, session_artifacts, use_profile
from opsrun.kinds import builtin_kinds
from opsrun.model import (
    MAX_JSON_DEPTH,
    ChatMessage,
    ChatRole,
    MessageVariant,
    OperationDefinition,
    OperationResult,
    OperationStatus,
    RunResult,
    RunStatus,
)
from opsrun.operations import OperationCatalog, OperationContext
from opsrun.ports import Stores
from opsrun.providers import ProviderRegistry
from opsrun.stores import InMemoryStores
from opsrun.stores.sqlite import SqliteStores
from opsrun.testing import ScriptedMainLlm, ScriptedProvider

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["memory", "sqlite"])
async def stores(request: pytest.FixtureRequest) -> AsyncIterator[Stores]:
    if request.param == "memory":
        yield InMemoryStores()
        return
    with SqliteStores(":memory:") as sqlite:
        yield sqlite


def llm_catalog(reply: str) -> OperationCatalog:
    """The built-in kinds, and ``aux``: an llm operation whose model answers ``reply``."""
    registry = ProviderRegistry({"test": ScriptedProvider([reply])})
    catalog = OperationCatalog(kinds=builtin_kinds(providers=registry))
    catalog.add_definition(OperationDefinition(operation_id="aux", name="Aux", kind="llm"))
    return catalog


AUX_PARAMS: dict[str, Any] = {
    "providerRef": "test",
    "model": "m",
    "prompt": "Reply in JSON",
    "output": {"mode": "json"},
    "writeArtifact": {"tag": "notes", "persisted": True},
}


async def run_aux(stores: Stores, reply: str) -> RunResult:
    runner = make_runner(stores=stores, catalog=llm_catalog(reply))
    await use_profile(stores, op("aux", params=AUX_PARAMS))
    return await runner.run(generate())


async def notes(stores: Stores, result: RunResult) -> Any:
    return (await session_artifacts(stores, result.run))["notes"].value


def nested(depth: int) -> str:
    return "[" * depth + "1" + "]" * depth


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 900, 5_000])
async def test_a_reply_nested_too_deeply_fails_its_operation_not_the_run(
    stores: Stores, depth: int
) -> None:
    result = await run_aux(stores, nested(depth))
    assert result.status == RunStatus.DONE
    aux = result.operation("aux")
    assert aux.status == OperationStatus.ERROR
    assert aux.error is not None
    assert aux.error.code == "output_parse_error"
    assert f"nested deeper than {MAX_JSON_DEPTH} levels" in aux.error.message
    stored, _ = await stores.runs.get_run(result.run.run_id)
    assert stored.status == RunStatus.DONE


async def test_a_reply_as_deep_as_the_limit_is_stored_and_read_back(stores: Stores) -> None:
    result = await run_aux(stores, nested(MAX_JSON_DEPTH))
    assert result.operation("aux").status == OperationStatus.DONE
    assert await notes(stores, result) == json.loads(nested(MAX_JSON_DEPTH))


async def test_a_reply_with_half_a_surrogate_pair_is_stored_mended(stores: Stores) -> None:
    reply = json.dumps({"mood": "\ud83d", "face": "\ud83d\ude00"})  # escapes, as JSON sends
    result = await run_aux(stores, reply)
    assert result.operation("aux").status == OperationStatus.DONE
    assert await notes(stores, result) == {"mood": "\ufffd", "face": "\U0001f600"}


@pytest.mark.parametrize("reply", ['{"score": 1e999}', "[1, -1e400]"])
async def test_a_reply_with_a_number_too_large_for_a_float_fails_its_operation(
    stores: Stores, reply: str
) -> None:
    """Such a number reads as infinite, which JSON (and the SQL stores) cannot keep."""
    result = await run_aux(stores, reply)
    assert result.status == RunStatus.DONE
    aux = result.operation("aux")
    assert aux.status == OperationStatus.ERROR
    assert aux.error is not None
    assert aux.error.code == "output_parse_error"
    assert "NaN and infinities are not JSON numbers" in aux.error.message


async def test_an_operation_writing_nan_fails_alone_and_stores_nothing(stores: Stores) -> None:
    catalog = OperationCatalog()

    @catalog.function("stats", name="Stats", write_tag="stats")
    async def _stats(ctx: OperationContext) -> OperationResult:
        return OperationResult.done(artifact=ctx.write({"avg": float("nan")}))

    runner = make_runner(stores=stores, catalog=catalog)
    await use_profile(stores, op("stats"))
    result = await runner.run(generate())
    assert result.status == RunStatus.DONE
    stats = result.operation("stats")
    assert stats.status == OperationStatus.ERROR
    assert stats.error is not None
    assert stats.error.code == "operation_exception"
    assert "json_not_finite" in stats.error.message
    assert "stats" not in await session_artifacts(stores, result.run)


async def test_an_operation_writing_a_too_deep_artifact_fails_alone(stores: Stores) -> None:
    catalog = OperationCatalog()

    @catalog.function("deep", name="Deep", write_tag="deep")
    async def _deep(ctx: OperationContext) -> OperationResult:
        value: Any = 1
        for _ in range(MAX_JSON_DEPTH * 10):
            value = [value]
        return OperationResult.done(artifact=ctx.write(value))

    @catalog.function("flat", name="Flat", write_tag="flat")
    async def _flat(ctx: OperationContext) -> OperationResult:
        return OperationResult.done(artifact=ctx.write({"ok": True}))

    runner = make_runner(stores=stores, catalog=catalog)
    await use_profile(stores, op("deep"), op("flat"))
    result = await runner.run(generate())
    assert result.status == RunStatus.DONE
    deep = result.operation("deep")
    assert deep.status == OperationStatus.ERROR
    assert deep.error is not None
    assert deep.error.code == "operation_exception"
    assert "json_too_deep" in deep.error.message
    assert result.operation("flat").status == OperationStatus.DONE


async def test_a_main_llm_reply_split_inside_a_surrogate_pair_is_joined(stores: Stores) -> None:
    """Each delta carries half of the pair (a JSON escape per chunk decodes so)."""
    main_llm = ScriptedMainLlm(["smile \ud83d\ude00 and half \ud83d"], chunk_size=7)
    runner = make_runner(stores=stores, main_llm=main_llm)
    await use_profile(stores)
    result = await runner.run(generate())
    assert result.status == RunStatus.DONE
    expected = "smile \U0001f600 and half \ufffd"
    assert result.run.main_llm.text == expected
    history = await stores.chats.history("c", "main")
    assert [m.prompt_text for m in history] == ["hi", expected]
    stored, _ = await stores.runs.get_run(result.run.run_id)
    assert stored.main_llm.text == expected
    events = await stores.runs.events(result.run.run_id)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert events[-1].type == "run.finished"


async def test_host_messages_with_lone_surrogates_are_stored(stores: Stores) -> None:
    """A chat app saving a JavaScript client's text (half an emoji) as it came, then
    running a turn on that history."""
    variant = MessageVariant(variant_id="v1", content="half \ud83d", meta={"k": "\udc00"})
    message = ChatMessage(
        message_id="m1",
        chat_id="c",
        branch_id="main",
        role=ChatRole.USER,
        variants=(variant,),
        selected_variant_id="v1",
    )
    await stores.chats.save_message(message)
    assert (await stores.chats.get_message("c", "m1")).selected.content == "half \ufffd"
    # Built without validation, the text reaches the store as it is: still stored.
    raw = message.model_copy(
        update={"message_id": "m2", "variants": (variant.model_copy(update={"content": "\ud83d"}),)}
    )
    await stores.chats.save_message(raw)
    assert (await stores.chats.get_message("c", "m2")).prompt_text in ("\ud83d", "\ufffd")
    await use_profile(stores)
    result = await make_runner(stores=stores).run(generate())
    assert result.status == RunStatus.DONE
    assert len(await stores.chats.history("c", "main")) == 4
