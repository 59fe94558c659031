"""JSON values and text that records keep: nesting is bounded, text always has a UTF-8 form.

A value nested deeper than ``MAX_JSON_DEPTH`` is refused where it enters (validation
error type ``json_too_deep``), never with a ``RecursionError``; a lone UTF-16 surrogate
in free text becomes U+FFFD and a split pair is joined, so every store can keep it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from opsrun.model import (
    MAX_JSON_DEPTH,
    AppendAfterLastUser,
    Artifact,
    ArtifactUsage,
    ArtifactVersion,
    ArtifactWrite,
    AssistantBlocks,
    AssistantMeta,
    AssistantVariant,
    ChatMessage,
    ChatRole,
    Hook,
    InsertAtDepth,
    MessageVariant,
    OperationConfig,
    RunRequest,
    SystemUpdate,
    Trigger,
    UserVariant,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def nested(depth: int, leaf: Any = 1) -> Any:
    """``leaf`` inside ``depth`` lists (0: the leaf itself)."""
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


def depth_of(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((depth_of(v) for v in value.values()), default=0)
    if isinstance(value, list | tuple):
        return 1 + max((depth_of(v) for v in value), default=0)
    return 0


BUILDERS: dict[str, Any] = {
    "artifact write value": lambda v: ArtifactWrite(tag="t", value=v),
    "stored artifact value": lambda v: Artifact(
        tag="t", usage=ArtifactUsage.INTERNAL, persisted=True, value=v
    ),
    "archived version value": lambda v: ArtifactVersion(version=1, value=v, created_at=T0),
    "operation params": lambda v: OperationConfig(
        hooks=(Hook.BEFORE_MAIN_LLM,), order=1, params={"x": v}
    ),
    "run request host": lambda v: RunRequest(
        trigger=Trigger.GENERATE, chat_id="c", user_message="hi", host={"card": v}
    ),
    "run request main_llm_params": lambda v: RunRequest(
        trigger=Trigger.GENERATE, chat_id="c", user_message="hi", main_llm_params={"x": v}
    ),
    "variant meta": lambda v: MessageVariant(variant_id="v", content="", meta={"x": v}),
    "variant blocks": lambda v: MessageVariant(variant_id="v", content="", blocks=({"x": v},)),
    "assistant meta effect": lambda v: AssistantMeta(meta={"x": v}),
    "assistant blocks effect": lambda v: AssistantBlocks(blocks=({"x": v},)),
}
"""Where a JSON value enters a record, each wrapping it in one level (a dict) or none."""

WRAPPING = {
    "artifact write value": 0,
    "stored artifact value": 0,
    "archived version value": 0,
    "variant blocks": 2,
    "assistant blocks effect": 2,
}


@pytest.mark.parametrize("where", BUILDERS)
def test_a_value_as_deep_as_the_limit_is_kept(where: str) -> None:
    depth = MAX_JSON_DEPTH - WRAPPING.get(where, 1)
    value = nested(depth)
    model = BUILDERS[where](value)
    assert depth_of(model.model_dump()) >= MAX_JSON_DEPTH
    assert type(model).model_validate_json(model.model_dump_json()) == model


@pytest.mark.parametrize("where", BUILDERS)
@pytest.mark.parametrize("extra", [1, 100_000])
def test_a_value_deeper_than_the_limit_is_refused_with_a_stable_type(
    where: str, extra: int
) -> None:
    value = nested(MAX_JSON_DEPTH - WRAPPING.get(where, 1) + extra)
    with pytest.raises(ValidationError) as refused:
        BUILDERS[where](value)
    assert [e["type"] for e in refused.value.errors()] == ["json_too_deep"]
    assert str(MAX_JSON_DEPTH) in str(refused.value)


@pytest.mark.parametrize("where", BUILDERS)
@pytest.mark.parametrize("number", [float("nan"), float("inf"), float("-inf")], ids=repr)
def test_nan_and_infinities_are_refused_with_a_stable_type(where: str, number: float) -> None:
    """JSON has no such numbers: the SQL stores would keep them as null."""
    with pytest.raises(ValidationError) as refused:
        BUILDERS[where]([1.5, {"n": number}])
    assert [e["type"] for e in refused.value.errors()] == ["json_not_finite"]
    assert BUILDERS[where]([1.5, {"n": -0.0}]) == BUILDERS[where]([1.5, {"n": -0.0}])


def test_deep_dicts_count_like_deep_lists() -> None:
    value: Any = "leaf"
    for _ in range(MAX_JSON_DEPTH):
        value = {"k": value}
    assert ArtifactWrite(tag="t", value=value).value is value  # kept as given, not copied
    with pytest.raises(ValidationError):
        ArtifactWrite(tag="t", value={"k": value})


SPLIT = "half \ud83d, whole \ud83d\ude00, low \udc00"
MENDED = "half \ufffd, whole \U0001f600, low \ufffd"


def test_free_text_of_messages_and_effects_is_mended() -> None:
    variant = MessageVariant(
        variant_id="v", content=SPLIT, meta={SPLIT: [SPLIT]}, blocks=({"t": SPLIT},)
    )
    assert variant.content == MENDED
    assert variant.meta == {MENDED: [MENDED]}
    assert variant.blocks == ({"t": MENDED},)
    for effect in (
        AppendAfterLastUser(content=SPLIT),
        SystemUpdate(mode="append", content=SPLIT),
        InsertAtDepth(depth_from_end=0, content=SPLIT),
        UserVariant(content=SPLIT),
        AssistantVariant(content=SPLIT),
    ):
        assert effect.content == MENDED
    assert AssistantMeta(meta={"k": SPLIT}).meta == {"k": MENDED}
    assert AssistantBlocks(blocks=({"k": SPLIT},)).blocks == ({"k": MENDED},)
    assert ArtifactWrite(tag="t", value={"k": (SPLIT,)}).value == {"k": (MENDED,)}
    variant.model_dump_json().encode()  # has a UTF-8 form


@pytest.mark.parametrize(
    "field", ["message_id", "chat_id", "branch_id", "selected_variant_id", "turn_id"]
)
@pytest.mark.parametrize(
    ("bad", "kind"), [("\x00", "nul_character"), ("\ud800", "surrogate_character")]
)
def test_chat_message_ids_refuse_what_no_store_can_key(field: str, bad: str, kind: str) -> None:
    values: dict[str, Any] = {
        "message_id": "m",
        "chat_id": "c",
        "branch_id": "main",
        "role": ChatRole.USER,
        "variants": (MessageVariant(variant_id="v", content="x"),),
        "selected_variant_id": "v",
        "turn_id": "t",
    }
    values[field] = "v" + bad if field == "selected_variant_id" else bad
    with pytest.raises(ValidationError) as refused:
        ChatMessage(**values)
    assert kind in [e["type"] for e in refused.value.errors()]


def test_a_variant_id_refuses_what_no_store_can_key() -> None:
    with pytest.raises(ValidationError) as refused:
        MessageVariant(variant_id="v\x00", content="x")
    assert [e["type"] for e in refused.value.errors()] == ["nul_character"]


TEXT = st.text(st.sampled_from(["a", "é", "🌍", "\ud83d", "\ude00", "\udc00"]) | st.characters())
"""Text with lone surrogates, pairs split in two and whole ones."""
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=20,
)


@given(value=JSON)
def test_every_accepted_value_has_a_utf8_form_and_clean_values_are_unchanged(value: Any) -> None:
    write = ArtifactWrite(tag="t", value=value)
    text = write.model_dump_json()
    text.encode("utf-8")
    if not _has_surrogate(value):
        assert write.value == value
    assert ArtifactWrite.model_validate_json(text).value == write.value


def _has_surrogate(value: Any) -> bool:
    if isinstance(value, str):
        return any(0xD800 <= ord(c) <= 0xDFFF for c in value)
    if isinstance(value, dict):
        return any(_has_surrogate(k) or _has_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_surrogate(v) for v in value)
    return False
