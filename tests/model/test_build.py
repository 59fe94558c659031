"""Builder: instances built from trusted values equal the validated ones."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import BaseModel, Field, PrivateAttr

from opsrun.model import ChatMessage, MessageVariant, OperationRun, RunPhaseChanged
from opsrun.model._base import Model
from opsrun.model._build import Builder

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def same(fast: BaseModel, slow: BaseModel) -> None:
    assert type(fast) is type(slow)
    assert fast == slow
    assert list(fast.__dict__) == list(slow.__dict__)
    assert fast.model_fields_set == slow.model_fields_set
    assert repr(fast) == repr(slow)
    assert fast.model_dump_json() == slow.model_dump_json()


def test_defaults_factories_and_fields_set_are_those_of_validation() -> None:
    values = {
        "run_id": "r",
        "operation_id": "o",
        "operation_name": "O",
        "hook": "before_main_llm",
        "trigger": "generate",
        "required": False,
        "order": 1.0,
    }
    fast = Builder(OperationRun)(**OperationRun(**values).__dict__)
    same(fast, OperationRun(**OperationRun(**values).__dict__))
    other = Builder(OperationRun)(**OperationRun(**values).__dict__)
    assert fast.inputs_summary is not other.inputs_summary  # each gets its own dict


def test_bound_values_count_as_given() -> None:
    base = {"run_id": "r", "chat_id": "c", "user_message_id": "m", "trigger": "generate"}
    validated = RunPhaseChanged(seq=1, ts=T0, phase="planning", **base)
    fixed = {name: getattr(validated, name) for name in base}
    fast = Builder(RunPhaseChanged).bind(fixed)(seq=1, ts=T0, phase=validated.phase)
    same(fast, validated)
    copied = fast.model_copy(update={"seq": 2})
    assert copied.seq == 2
    assert fast.seq == 1


def test_nested_models_are_kept_as_given() -> None:
    variant = MessageVariant(variant_id="v", content="hi", created_at=T0)
    fields = {
        "message_id": "m",
        "chat_id": "c",
        "branch_id": "main",
        "role": "user",
        "variants": (variant,),
        "selected_variant_id": "v",
    }
    slow = ChatMessage(**fields)
    fast = Builder(ChatMessage)(**{**fields, "role": slow.role})
    same(fast, slow)
    assert fast.variants[0] is variant


class _Private(Model):
    name: str
    _cache: int = PrivateAttr(default=0)


class _Mutable(Model):
    tags: list[str] = Field(default=["a"])  # a mutable default, on purpose


def test_models_that_need_validation_are_refused() -> None:
    with pytest.raises(TypeError):
        Builder(_Private)


def test_a_mutable_default_is_copied_per_instance() -> None:
    build = Builder(_Mutable)
    first, second = build(), build()
    assert first.tags == ["a"]
    assert first.tags is not second.tags
    same(first, _Mutable())


def test_build_over_equals_build_of_the_merged_values() -> None:
    base = {"run_id": "r", "chat_id": "c", "user_message_id": "m", "trigger": "generate"}
    validated = RunPhaseChanged(seq=3, ts=T0, phase="planning", **base)
    trusted = {name: getattr(validated, name) for name in base}
    values = {"seq": 3, "ts": T0, "phase": validated.phase}
    builder = Builder(RunPhaseChanged)
    fast = builder.build_over(trusted, values)
    merged = builder.build({**trusted, **values})
    assert fast == merged == validated
    assert fast.model_fields_set == merged.model_fields_set == validated.model_fields_set
    assert list(fast.__dict__) == list(validated.__dict__)  # field order, as validated
    assert fast.model_dump_json() == validated.model_dump_json()


def test_instances_of_a_frozen_model_share_fields_sets_that_never_leak() -> None:
    """Frozen instances built with the same names share one fields set; copying one with
    an update gives the copy its own set and leaves every sibling as it was."""
    build = Builder(MessageVariant)
    first = build(variant_id="a", content="x", created_at=T0)
    second = build(variant_id="b", content="y", created_at=T0)
    assert first.model_fields_set is second.model_fields_set
    copied = first.model_copy(update={"meta": {"k": 1}})
    assert copied.model_fields_set == {"variant_id", "content", "created_at", "meta"}
    assert first.model_fields_set == second.model_fields_set
    assert "meta" not in second.model_fields_set
    assert second.model_dump(exclude_unset=True, by_alias=False) == {
        "variant_id": "b",
        "content": "y",
        "created_at": T0,
    }


class _Open(BaseModel):
    name: str = ""
    size: int = 0


def test_instances_of_a_mutable_model_get_a_fields_set_each() -> None:
    build = Builder(_Open)
    first, second = build(name="a"), build(name="b")
    first.size = 2  # assignment adds to the instance's own fields set
    assert first.model_fields_set == {"name", "size"}
    assert second.model_fields_set == {"name"}
