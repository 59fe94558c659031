"""Plan model values and the canonical apply order."""

from __future__ import annotations

import itertools

import pydantic
import pytest
from hypothesis import given
from hypothesis import strategies as st

from opsrun.protocol import Action, ActionKind, Plan, canonical_order

GROUP = {
    ActionKind.CREATE_DIR: 0,
    ActionKind.CREATE_FILE: 1,
    ActionKind.UPDATE_FILE: 1,
    ActionKind.PATCH_FILE: 1,
    ActionKind.REPLACE_RANGE: 1,
    ActionKind.DELETE_FILE: 2,
    ActionKind.DELETE_DIR: 3,
}


def test_kind_values_equal_names() -> None:
    assert [k.value for k in ActionKind] == [k.name for k in ActionKind]
    assert len(ActionKind) == 7


def test_models_are_frozen() -> None:
    action = Action(kind=ActionKind.CREATE_DIR, path="a")
    with pytest.raises(pydantic.ValidationError):
        action.path = "b"  # type: ignore[misc]
    plan = Plan(version=2, actions=(action,))
    with pytest.raises(pydantic.ValidationError):
        plan.summary = "x"  # type: ignore[misc]
    assert hash(action) == hash(Action(kind=ActionKind.CREATE_DIR, path="a"))


def test_canonical_order_example() -> None:
    plan = Plan(
        version=2,
        actions=(
            Action(kind=ActionKind.DELETE_DIR, path="old"),
            Action(kind=ActionKind.DELETE_FILE, path="x.py"),
            Action(kind=ActionKind.DELETE_DIR, path="old/deeper/deepest"),
            Action(kind=ActionKind.CREATE_FILE, path="src/a/b.py", content=""),
            Action(kind=ActionKind.CREATE_DIR, path="src/a"),
            Action(kind=ActionKind.PATCH_FILE, path="c.py", patch=""),
            Action(kind=ActionKind.CREATE_DIR, path="src"),
            Action(kind=ActionKind.DELETE_DIR, path="old/deeper"),
        ),
    )
    assert [i for i, _ in canonical_order(plan)] == [6, 4, 3, 5, 1, 2, 7, 0]
    assert canonical_order(plan) == canonical_order(list(plan.actions))


segments = st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=4)
actions = st.builds(
    lambda kind, segs: Action(kind=kind, path="/".join(segs)),
    st.sampled_from(list(ActionKind)),
    segments,
)


@given(st.lists(actions, max_size=30))
def test_canonical_order_is_a_stable_grouped_permutation(items: list[Action]) -> None:
    ordered = canonical_order(items)
    assert sorted(i for i, _ in ordered) == list(range(len(items)))
    assert all(items[i] is a for i, a in ordered)
    groups = [GROUP[a.kind] for _, a in ordered]
    assert groups == sorted(groups)
    for (i, a), (j, b) in itertools.pairwise(ordered):
        if GROUP[a.kind] != GROUP[b.kind]:
            continue
        da, db = a.path.count("/"), b.path.count("/")
        if a.kind is ActionKind.DELETE_DIR and b.kind is ActionKind.DELETE_DIR:
            assert da > db or (da == db and i < j)
        elif a.kind is ActionKind.CREATE_DIR and b.kind is ActionKind.CREATE_DIR:
            assert da < db or (da == db and i < j)
        elif a.kind not in (ActionKind.CREATE_DIR, ActionKind.DELETE_DIR):
            assert i < j
