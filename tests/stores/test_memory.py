"""What the in-memory stores promise beyond the store contract: read-only records, and
pruning by ``keep_last`` alone (the contract prunes only old runs)."""

from __future__ import annotations

import copy
import json
import pickle
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from opsrun.model import (
    Artifact,
    ArtifactUsage,
    ChatMessage,
    ChatRole,
    MessageVariant,
    OperationProfileSessionKey,
    Run,
    RunStatus,
    Trigger,
)
from opsrun.stores import InMemoryStores
from opsrun.stores.sqlite import SqliteStores

pytestmark = pytest.mark.anyio

KEY = OperationProfileSessionKey(
    chat_id="c", branch_id="main", profile_ref="p@1", operation_profile_session_id="s1"
)
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _message(meta: dict[str, Any]) -> ChatMessage:
    variant = MessageVariant(variant_id="v1", content="hi", meta=meta, blocks=({"n": [1]},))
    return ChatMessage(
        message_id="m1",
        chat_id="c",
        branch_id="main",
        role=ChatRole.USER,
        variants=(variant,),
        selected_variant_id="v1",
    )


async def test_records_handed_out_refuse_changes_in_place() -> None:
    stores = InMemoryStores()
    value = {"hp": 10, "items": ["sword", {"gem": [1]}]}
    artifact = Artifact(tag="notes", usage=ArtifactUsage.PROMPT_AND_UI, persisted=True, value=value)
    await stores.sessions.put_artifact(KEY, artifact, expected_version=None)
    stored = (await stores.sessions.get_artifacts(KEY))["notes"]
    changes: list[Callable[[], object]] = [
        lambda: stored.value.update(hp=0),
        lambda: stored.value.__setitem__("hp", 0),
        lambda: stored.value.pop("hp"),
        lambda: stored.value["items"].append("stolen"),
        lambda: stored.value["items"][1]["gem"].extend([2]),
        lambda: stored.value["items"].sort(),
    ]
    for change in changes:
        with pytest.raises(TypeError, match="read-only"):
            change()
    assert stored.value == value
    assert stored == artifact


async def test_read_only_records_copy_serialise_and_pickle_as_plain_ones() -> None:
    stores = InMemoryStores()
    await stores.chats.save_message(_message({"tags": ["a"], "n": {"x": 1}}))
    stored = await stores.chats.get_message("c", "m1")
    meta = stored.selected.meta
    plain = copy.deepcopy(meta)
    plain["tags"].append("b")  # a deep copy is plain: change it, save it
    assert type(plain) is dict
    assert type(plain["tags"]) is list
    shallow = copy.copy(meta)
    shallow["new"] = True
    assert json.loads(stored.model_dump_json())["variants"][0]["meta"] == {
        "tags": ["a"],
        "n": {"x": 1},
    }
    assert type(stored.model_dump()["variants"][0]["meta"]) is dict
    assert pickle.loads(pickle.dumps(stored)) == stored
    edited = stored.selected.model_copy(update={"meta": plain})
    await stores.chats.save_message(stored.model_copy(update={"variants": (edited,)}))
    assert (await stores.chats.get_message("c", "m1")).selected.meta["tags"] == ["a", "b"]


async def test_a_record_without_containers_is_stored_as_it_is() -> None:
    stores = InMemoryStores()
    artifact = Artifact(tag="notes", usage=ArtifactUsage.PROMPT_AND_UI, persisted=True, value="v")
    await stores.sessions.put_artifact(KEY, artifact, expected_version=None)
    assert (await stores.sessions.get_artifacts(KEY))["notes"] is artifact


@pytest.fixture(params=["memory", "sqlite"])
def any_stores(request: pytest.FixtureRequest) -> Iterator[InMemoryStores | SqliteStores]:
    if request.param == "memory":
        yield InMemoryStores()
    else:
        with SqliteStores(":memory:") as stores:
            yield stores


async def test_keep_last_alone_prunes_every_chat(
    any_stores: InMemoryStores | SqliteStores,
) -> None:
    """``prune_runs(keep_last=n)`` keeps the newest n runs of every chat, running ones
    counted and never deleted."""
    runs = [
        Run(
            run_id=f"{chat}-{n}",
            trigger=Trigger.GENERATE,
            chat_id=chat,
            branch_id="main",
            user_message_id="u",
            status=RunStatus.RUNNING if n == 0 else RunStatus.DONE,
            started_at=T0 + timedelta(minutes=n),
        )
        for chat in ("a", "b")
        for n in range(4)
    ]
    for run in runs:
        await any_stores.runs.claim(run)
    assert await any_stores.runs.prune_runs(keep_last=1) == 4
    for chat in ("a", "b"):
        left = [run.run_id for run in (await any_stores.runs.list_runs(chat)).items]
        assert left == [f"{chat}-3", f"{chat}-0"]
    assert await any_stores.runs.prune_runs(keep_last=0) == 2
