"""The hand-written schema check and the canonical JSON Schemas agree on every plan."""

from __future__ import annotations

import json
from typing import Any, Literal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _support import examples
from opsrun.errors import PlanError
from opsrun.protocol import load_schema, parse_plan, plan_from_json
from opsrun.protocol._fastschema import matches_schema
from opsrun.protocol._schemas import schema_validator

KINDS = [
    "CREATE_FILE",
    "CREATE_DIR",
    "UPDATE_FILE",
    "DELETE_FILE",
    "DELETE_DIR",
    "PATCH_FILE",
    "REPLACE_RANGE",
]
ACTION_FIELDS = ["content", "patch", "base_sha256", "start_line", "end_line"]
REQUEST_FIELDS = ["path", "start_line", "end_line", "query", "glob", "source", "last_n"]
NUMERIC = {"start_line", "end_line", "last_n"}

NON_NULL = {
    "CREATE_FILE": {"content"},
    "UPDATE_FILE": {"content", "base_sha256"},
    "PATCH_FILE": {"patch", "base_sha256"},
    "REPLACE_RANGE": {"content", "base_sha256", "start_line", "end_line"},
}

# Every JSON type, with the edge cases of jsonschema's types: booleans are not
# integers, integral floats are.
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.sampled_from([1.0, 2.5, -0.0, 1e20]),
    st.text(max_size=4),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=6,
)
good_integers = st.integers(-2, 40) | st.just(3.0)


def _good(name: str) -> st.SearchStrategy[Any]:
    return good_integers if name in NUMERIC else st.text(max_size=6)


@st.composite
def actions(draw: st.DrawFn, *, bad: bool = False) -> Any:
    """A valid v2 action (often valid in v1 too) or, if ``bad``, one with one mistake."""
    kind = draw(st.sampled_from(KINDS))
    item: dict[str, Any] = {"kind": kind, "path": draw(st.text(max_size=6))}
    for name in ACTION_FIELDS:
        present = draw(st.sampled_from(["absent", "null", "set"]))
        if present == "null":
            item[name] = None
        elif present == "set" and name in NON_NULL.get(kind, ()):
            item[name] = draw(_good(name))
    if not bad:
        return item
    mistake = draw(st.integers(1, 8))
    if mistake == 1:
        item[draw(st.sampled_from(ACTION_FIELDS))] = draw(json_values)
    elif mistake == 2:
        item.pop(draw(st.sampled_from(["kind", "path"])))
    elif mistake == 3:
        item[draw(st.sampled_from(["kind", "path"]))] = draw(json_values | st.just("MOVE"))
    elif mistake == 4:
        item["kind"] = draw(st.sampled_from(KINDS))  # the fields of another kind
    elif mistake == 5:
        item[draw(st.sampled_from(["extra", "type"]))] = draw(json_values)
    elif mistake == 6:
        return draw(json_values)
    elif mistake == 7:  # a well-typed field this kind must leave null
        name = draw(st.sampled_from([n for n in ACTION_FIELDS if n not in NON_NULL.get(kind, ())]))
        item[name] = draw(_good(name))
    else:  # almost the right type
        name = draw(st.sampled_from(ACTION_FIELDS))
        item[name] = draw(st.sampled_from([True, 2.5, "3", 0] if "_line" in name else [1, True]))
    return item


@st.composite
def requests(draw: st.DrawFn, *, bad: bool = False) -> Any:
    """A valid context request or, if ``bad``, one with one mistake."""
    item: dict[str, Any] = {"type": draw(st.sampled_from(["read_file", "search", "x"]))}
    for name in draw(st.lists(st.sampled_from(REQUEST_FIELDS), unique=True, max_size=4)):
        item[name] = draw(st.none() | _good(name))
    if not bad:
        return item
    mistake = draw(st.integers(1, 5))
    if mistake == 1:
        item[draw(st.sampled_from(["type", *REQUEST_FIELDS]))] = draw(json_values)
    elif mistake == 2:
        item.pop("type")
    elif mistake == 3:
        item["kind"] = draw(json_values)
    elif mistake == 4:
        name = draw(st.sampled_from(REQUEST_FIELDS))
        item[name] = draw(st.sampled_from([True, 2.5] if name in NUMERIC else [1, False]))
    else:
        return draw(json_values)
    return item


def _with_one_bad(
    items: st.SearchStrategy[list[Any]], bad: st.SearchStrategy[Any]
) -> st.SearchStrategy[list[Any]]:
    """Lists of valid items; half of them get one bad item somewhere."""

    @st.composite
    def build(draw: st.DrawFn) -> list[Any]:
        out = draw(items)
        if draw(st.booleans()):
            out.insert(draw(st.integers(0, len(out))), draw(bad))
        return out

    return build()


action_lists = _with_one_bad(st.lists(actions(), max_size=4), actions(bad=True))
request_lists = _with_one_bad(st.lists(requests(), max_size=3), requests(bad=True))


def _mostly(good: st.SearchStrategy[Any], bad: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.integers(0, 7).flatmap(lambda n: bad if n == 0 else good)


@st.composite
def answers(draw: st.DrawFn) -> Any:
    """An answer object or array close to a valid one, in either version's form."""
    shape = draw(st.integers(0, 12))
    if shape == 0:
        return draw(json_values)
    if shape == 1:
        return draw(action_lists)
    root: dict[str, Any] = {}
    lists = _mostly(action_lists, json_values)
    fields: dict[str, st.SearchStrategy[Any]] = {
        "actions": lists,
        "summary": _mostly(st.none() | st.text(max_size=6), json_values),
        "context_requests": _mostly(st.none() | request_lists, json_values),
        "memory_patch": _mostly(
            st.none() | st.dictionaries(st.text(max_size=4), json_values), scalars
        ),
        "proposed_changes": _mostly(
            st.none() | st.fixed_dictionaries({}, optional={"actions": lists, "x": scalars}),
            scalars,
        ),
        "extra": json_values,
    }
    weights = {"actions": 14, "summary": 6, "context_requests": 5, "memory_patch": 5}
    for name, values in fields.items():
        if draw(st.integers(0, 15)) < weights.get(name, 1):
            root[name] = draw(values)
    return root


@pytest.mark.parametrize("version", [1, 2])
@settings(max_examples=examples(1.0), suppress_health_check=[HealthCheck.too_slow])
@given(value=answers())
def test_fast_check_agrees_with_the_schema(version: Literal[1, 2], value: Any) -> None:
    assert matches_schema(version, value) is schema_validator(version).is_valid(value)


@pytest.mark.parametrize("version", [1, 2])
@settings(max_examples=examples(0.75), suppress_health_check=[HealthCheck.too_slow])
@given(value=answers())
def test_plan_from_json_accepts_what_the_schema_accepts(version: Literal[1, 2], value: Any) -> None:
    valid = schema_validator(version).is_valid(value)
    error: PlanError | None = None
    try:
        plan_from_json(value, version=version)
    except PlanError as exc:
        error = exc
    if error is None:
        assert valid
    elif error.details.get("pointer") != "/proposed_changes/actions" and "fit the plan" not in (
        error.message
    ):  # those two are rules beyond the schema: both action lists, the model's own types
        assert (error.code, valid) == ("ERR_SCHEMA", False)


# One field at a time, every JSON type, every kind: each rule of the schema on its own.
SAMPLES: list[Any] = [None, "s", "", 0, 7, -1, 1.0, 2.5, True, False, [], {}, ["s"]]


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("kind", [*KINDS, "MOVE", 1, None])
def test_every_action_field_and_type_agrees(version: Literal[1, 2], kind: Any) -> None:
    validator = schema_validator(version)
    for name in [*ACTION_FIELDS, "path", "extra"]:
        for sample in SAMPLES:
            action = {"kind": kind, "path": "a", name: sample}
            for value in (
                {"actions": [action]},
                [action],
                {"proposed_changes": {"actions": [action]}},
            ):
                assert matches_schema(version, value) is validator.is_valid(value), value


@pytest.mark.parametrize("version", [1, 2])
def test_every_request_and_root_field_and_type_agrees(version: Literal[1, 2]) -> None:
    validator = schema_validator(version)
    values: list[Any] = [*SAMPLES]
    for sample in SAMPLES:
        for name in [*REQUEST_FIELDS, "type", "extra"]:
            request = {"type": "search", name: sample}
            values.append({"actions": [], "context_requests": [request]})
        for name in ["actions", "summary", "context_requests", "memory_patch", "proposed_changes"]:
            values.extend([{name: sample}, {"actions": [], name: sample}])
            values.append({"actions": [], "proposed_changes": {name: sample}})
    for value in values:
        assert matches_schema(version, value) is validator.is_valid(value), value


@pytest.mark.parametrize("version", [1, 2])
def test_schema_files_use_only_keywords_the_fast_check_mirrors(version: Literal[1, 2]) -> None:
    # A new keyword in a schema file must be mirrored in _fastschema: these are the
    # keywords the hand-written check knows.
    known = {
        "$schema",
        "$id",
        "$defs",
        "$ref",
        "title",
        "description",
        "x_schema_version",
        "type",
        "required",
        "additionalProperties",
        "properties",
        "items",
        "enum",
        "const",
        "oneOf",
        "anyOf",
        "allOf",
        "if",
        "then",
    }
    stack: list[Any] = [load_schema(version)]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            assert set(node) <= known, set(node) - known
            for key, sub in node.items():
                if key in ("properties", "$defs"):
                    stack.extend(sub.values())
                elif key not in ("enum", "required"):
                    stack.append(sub)
        elif isinstance(node, list):
            stack.extend(node)


def test_errors_still_come_from_the_schema() -> None:
    answer = {"actions": [{"kind": "CREATE_DIR", "path": "a", "start_line": 2.0}]}
    with pytest.raises(PlanError) as caught:
        parse_plan(json.dumps(answer), version=2, strict=True)
    assert caught.value.details["pointer"] == "/actions/0/start_line"
    assert caught.value.details["validator"] == "type"
    assert "None is not of type" not in caught.value.message
    assert "2.0 is not of type 'null'" in caught.value.message


def test_integral_floats_are_integers_and_booleans_are_not() -> None:
    base = {"kind": "REPLACE_RANGE", "path": "a", "content": "x", "base_sha256": "0" * 64}
    plan = plan_from_json({"actions": [{**base, "start_line": 1.0, "end_line": 2}]}, version=2)
    assert plan.actions[0].start_line == 1
    with pytest.raises(PlanError) as caught:
        plan_from_json({"actions": [{**base, "start_line": True}]}, version=2)
    assert caught.value.details["pointer"] == "/actions/0/start_line"


def test_what_the_models_refuse_beyond_the_schema_is_still_reported() -> None:
    # 1e300 is an integer to JSON Schema, but too large for the model's int.
    action = {"kind": "REPLACE_RANGE", "path": "a", "content": "x", "base_sha256": "0" * 64}
    value = {"actions": [{**action, "start_line": 1e300, "end_line": 3}]}
    assert matches_schema(2, value)
    with pytest.raises(PlanError) as caught:
        plan_from_json(value, version=2)
    assert caught.value.code == "ERR_SCHEMA"
    assert caught.value.details["pointer"] == "/start_line"
    assert "plan model" in caught.value.message
