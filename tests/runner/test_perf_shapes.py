"""What the run's quicker paths build is what the slower ones built: shapes, copies,
default models, events, the reused prompt and dependencies waited for on demand."""

from __future__ import annotations

from datetime import UTC, datetime

import anyio
import pytest
from pydantic import BaseModel, Field, model_validator

from _support import B, generate, make_runner, op, use_profile
from opsrun.model import (
    AppendAfterLastUser,
    MainLlmCall,
    MessageVariant,
    OperationResult,
    Run,
    RunEvent,
    RunPhaseChanged,
    Trigger,
)
from opsrun.model._base import Model
from opsrun.model._build import Builder, replaced
from opsrun.operations import OperationCatalog, OperationContext
from opsrun.stores import InMemoryStores
from opsrun.testing import ScriptedMainLlm

T0 = datetime(2026, 1, 1, tzinfo=UTC)
BASE = {"run_id": "r", "chat_id": "c", "user_message_id": "m", "trigger": Trigger.GENERATE}


def assert_same(fast: BaseModel, slow: BaseModel) -> None:
    assert type(fast) is type(slow)
    assert fast == slow
    assert list(fast.__dict__) == list(slow.__dict__)  # field order
    assert fast.model_fields_set == slow.model_fields_set
    assert fast.model_dump_json() == slow.model_dump_json()
    assert repr(fast) == repr(slow)


def test_a_shape_builds_what_validation_builds_from_its_names() -> None:
    slow = RunPhaseChanged(seq=1, ts=T0, phase="planning", **BASE)
    shape = Builder(RunPhaseChanged).shape((*BASE, "seq", "ts", "phase"))
    values = {"seq": 1, "ts": T0, "phase": slow.phase}
    assert_same(shape.build({**BASE, **values}), slow)
    assert_same(shape.build_over(BASE, values), slow)
    every = {name: getattr(slow, name) for name in RunPhaseChanged.model_fields}
    everything = Builder(RunPhaseChanged).shape(RunPhaseChanged.model_fields)
    assert_same(everything.build_all(every), RunPhaseChanged(**every))
    first, second = shape.build_over(BASE, values), shape.build_over(BASE, values)
    assert first.model_fields_set is second.model_fields_set  # frozen: one set for all


def test_a_shape_refuses_a_name_that_is_not_a_field() -> None:
    with pytest.raises(ValueError, match="no field 'colour'"):
        Builder(MessageVariant).shape(("variant_id", "colour"))


class _Open(BaseModel):
    name: str = ""
    size: int = 0
    tags: list[str] = Field(default_factory=list)


def test_instances_of_a_mutable_model_get_their_own_fields_set_and_containers() -> None:
    shape = Builder(_Open).shape(("name",))
    first, second = shape.build({"name": "a"}), shape.build({"name": "b"})
    assert_same(first, _Open(name="a"))
    assert first.model_fields_set is not second.model_fields_set
    assert first.tags is not second.tags
    first.size = 2  # assignment adds to that instance's own set only
    assert second.model_fields_set == {"name"}


def test_replaced_is_model_copy() -> None:
    call = Builder(MainLlmCall)(started=True, started_at=T0)
    update = {"text": "OK", "attempts": 1}
    assert_same(replaced(call, update), call.model_copy(update=update))
    assert call.text is None
    assert call.model_fields_set == {"started", "started_at"}
    # No new name: the copy shares the frozen set, which nothing changes in place.
    again = replaced(call, {"started": False})
    assert_same(again, call.model_copy(update={"started": False}))
    assert again.model_fields_set is call.model_fields_set


def test_replaced_copies_a_mutable_model_as_model_copy_does() -> None:
    original = _Open(name="a")
    copied = replaced(original, {"size": 3})
    assert_same(copied, original.model_copy(update={"size": 3}))
    assert copied.model_fields_set is not original.model_fields_set
    assert original.model_fields_set == {"name"}


def test_a_model_made_by_a_default_factory_is_built_as_validation_makes_it() -> None:
    values = {
        "run_id": "r",
        "trigger": Trigger.GENERATE,
        "chat_id": "c",
        "branch_id": "main",
        "user_message_id": "m",
        "started_at": T0,
    }
    fast, other = Builder(Run).build(values), Builder(Run).build(values)
    slow = Run(**values)
    assert_same(fast, slow)
    assert_same(fast.main_llm, slow.main_llm)
    assert fast.main_llm is not other.main_llm
    assert fast.main_llm.params is not other.main_llm.params  # each its own dict


class _Checked(Model):
    seen: int = 0

    @model_validator(mode="after")
    def _count(self) -> _Checked:
        _CHECKS.append(self.seen)
        return self


_CHECKS: list[int] = []


class _Holder(Model):
    checked: _Checked = Field(default_factory=_Checked)


def test_a_default_factory_whose_model_validates_itself_still_runs_its_validator() -> None:
    before = len(_CHECKS)
    built = Builder(_Holder)()
    assert built.checked == _Checked()
    assert len(_CHECKS) == before + 2  # the factory's instance and the one compared


@pytest.mark.anyio
async def test_every_event_is_given_every_field_but_its_type() -> None:
    stores = InMemoryStores()
    catalog = OperationCatalog()

    @catalog.function("ok", name="OK")
    async def ok(ctx: OperationContext) -> OperationResult:
        return OperationResult.done()

    await use_profile(stores, op("ok"))
    result = await make_runner(stores=stores, catalog=catalog).run(generate())
    events: list[RunEvent] = await stores.runs.events(result.run.run_id)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    for event in events:
        fields = type(event).model_fields
        assert event.model_fields_set == set(fields) - {"type"}
        assert list(event.__dict__) == list(fields)
        given = {name: getattr(event, name) for name in fields if name != "type"}
        assert_same(event, type(event)(**given))


@pytest.mark.anyio
async def test_the_prompt_is_rebuilt_after_a_commit_only_when_it_changed() -> None:
    stores = InMemoryStores()
    catalog = OperationCatalog()
    drafts: list[int] = []

    @catalog.function("quiet", name="Quiet")
    async def quiet(ctx: OperationContext) -> OperationResult:
        assert ctx.prompt is not None
        drafts.append(len(ctx.prompt))
        return OperationResult.done(outputs_summary={"seen": len(ctx.prompt)})

    @catalog.function("note", name="Note")
    async def note(ctx: OperationContext) -> OperationResult:
        return OperationResult.done(prompt=[AppendAfterLastUser(content="Be brief.")])

    llm = ScriptedMainLlm()
    await use_profile(stores, op("quiet"))
    runner = make_runner(stores=stores, catalog=catalog, main_llm=llm)
    await runner.run(generate())
    assert [m.content for m in llm.requests[-1].messages] == ["hi"]
    await use_profile(stores, op("quiet"), op("note", B, order=2))
    await runner.run(generate("again"))
    sent = [m.content for m in llm.requests[-1].messages]
    assert sent == ["hi", "OK", "again", "Be brief."]
    assert drafts == [1, 3]


@pytest.mark.anyio
async def test_an_operation_waits_for_a_dependency_that_suspends() -> None:
    stores = InMemoryStores()
    catalog = OperationCatalog()
    order: list[str] = []

    @catalog.function("slow", name="Slow")
    async def slow(ctx: OperationContext) -> OperationResult:
        await anyio.sleep(0.01)
        order.append("slow")
        return OperationResult.done()

    @catalog.function("after", name="After")
    async def after(ctx: OperationContext) -> OperationResult:
        order.append("after")
        return OperationResult.done()

    catalog.function("also", name="Also")(after)
    await use_profile(
        stores,
        op("slow"),
        op("after", order=2, depends_on=("slow",)),
        op("also", order=3, depends_on=("slow",)),
    )
    result = await make_runner(stores=stores, catalog=catalog).run(generate())
    assert order == ["slow", "after", "after"]
    assert [r.status for r in result.operation_runs] == ["done"] * 3
