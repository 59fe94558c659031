"""parse_plan: strict and best-effort extraction, normalisation, hostile input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from opsrun.errors import PlanError
from opsrun.protocol import (
    ActionKind,
    PlanLimits,
    normalize_eol,
    parse_plan,
    validate_plan,
)

EXAMPLES: dict[str, dict[str, Any]] = json.loads(
    (Path(__file__).parent / "fixtures" / "plan_examples.json").read_text(encoding="utf-8")
)
EXAMPLE_PARAMS = [
    pytest.param(name, version, id=f"{name}-v{version}")
    for name, example in EXAMPLES.items()
    for version in example["versions"]
]


@pytest.mark.parametrize(("name", "version"), EXAMPLE_PARAMS)
def test_protocol_examples_parse_and_validate_clean(name: str, version: int) -> None:
    example = EXAMPLES[name]
    plan = parse_plan(json.dumps(example["answer"]), version=version, strict=True)
    assert plan.version == version
    assert validate_plan(plan, mode=example["mode"]) == []


def test_v1_forms_normalise_to_the_same_plan() -> None:
    actions = [{"kind": "CREATE_DIR", "path": "src"}]
    from_array = parse_plan(json.dumps(actions), version=1)
    from_object = parse_plan(json.dumps({"actions": actions}), version=1)
    from_nested = parse_plan(json.dumps({"proposed_changes": {"actions": actions}}), version=1)
    assert from_array == from_object == from_nested
    assert from_array.actions[0].kind is ActionKind.CREATE_DIR


def test_v1_refuses_both_action_lists_and_v2_refuses_v1_forms() -> None:
    both = {"actions": [], "proposed_changes": {"actions": []}}
    with pytest.raises(PlanError) as caught:
        parse_plan(json.dumps(both), version=1)
    assert caught.value.code == "ERR_SCHEMA"
    answers: list[object] = [[], {"proposed_changes": {"actions": []}}, {"summary": "no key"}]
    for answer in answers:
        with pytest.raises(PlanError) as caught:
            parse_plan(json.dumps(answer), version=2)
        assert caught.value.code == "ERR_SCHEMA"


def test_provider_style_nulls_are_accepted() -> None:
    answer = {
        "actions": [
            {
                "kind": "CREATE_FILE",
                "path": "a.py",
                "content": "x\n",
                "patch": None,
                "base_sha256": None,
                "start_line": None,
                "end_line": None,
            }
        ],
        "summary": None,
        "context_requests": None,
        "memory_patch": None,
    }
    plan = parse_plan(json.dumps(answer), version=2, strict=True)
    assert plan.actions[0].patch is None
    assert plan.context_requests == ()


@pytest.mark.parametrize(
    ("answer", "pointer"),
    [
        ({"actions": [{"kind": "MOVE_FILE", "path": "a"}]}, "/actions/0/kind"),
        ({"actions": [{"kind": "PATCH_FILE", "path": "a", "content": "x"}]}, "/actions/0/content"),
        ({"actions": [{"kind": "CREATE_DIR"}]}, "/actions/0"),
        ({"actions": [], "extra": 1}, ""),
        (
            {"actions": [], "context_requests": [{"type": "env", "path": 3}]},
            "/context_requests/0/path",
        ),
    ],
)
def test_schema_errors_carry_the_json_pointer(answer: dict[str, Any], pointer: str) -> None:
    with pytest.raises(PlanError) as caught:
        parse_plan(json.dumps(answer), version=2, strict=True)
    assert caught.value.code == "ERR_SCHEMA"
    assert caught.value.details["pointer"] == pointer
    assert (pointer or "/") in caught.value.message


PLAN = '{"actions": [], "summary": "NO_CHANGES: ok"}'


@pytest.mark.parametrize(
    "text",
    [
        PLAN,
        f"  \n{PLAN}\n  ",
        f"\ufeff{PLAN}",
        f"Here you go:\n```json\n{PLAN}\n```\nDone.",
        f"```JSON\n{PLAN}\n```",
        f"````json\n{PLAN}\n````",
        f"```\n{PLAN}\n```",
        f"notes:\n```python\nprint('x')\n```\n```json\n{PLAN}\n```",
        f"The plan is {PLAN} as requested.",
        f"first [bracket] then {PLAN}",
    ],
)
def test_best_effort_finds_the_plan(text: str) -> None:
    plan = parse_plan(text, version=2)
    assert plan.summary == "NO_CHANGES: ok"


def test_json_tagged_fence_wins_and_backticks_inside_strings_survive() -> None:
    inner = {"actions": [], "summary": "NO_CHANGES: use ```json fences``` like this\n```\nok"}
    text = (
        '```text\n{"actions": [], "summary": "NO_CHANGES: wrong block"}\n```\n'
        f"```json\n{json.dumps(inner, indent=2)}\n```\n"
    )
    assert parse_plan(text, version=2).summary == inner["summary"]


def test_strict_mode_refuses_surrounding_prose() -> None:
    with pytest.raises(PlanError) as caught:
        parse_plan(f"```json\n{PLAN}\n```", version=2, strict=True)
    assert caught.value.code == "ERR_INVALID_JSON"
    assert parse_plan(PLAN, version=2, strict=True).summary == "NO_CHANGES: ok"


@pytest.mark.parametrize("text", ["", "hello", "{", "[1, 2", "```json\n{oops}\n```", "\x00"])
def test_not_json_is_invalid_json(text: str) -> None:
    for strict in (True, False):
        with pytest.raises(PlanError) as caught:
            parse_plan(text, version=2, strict=strict)
        assert caught.value.code == "ERR_INVALID_JSON"


HOSTILE = {
    "deep_arrays": "[" * 100_000 + "]" * 100_000,
    "deep_objects": '{"a":' * 100_000 + "1" + "}" * 100_000,
    "deep_unclosed": "[" * 100_000,
    "deep_in_fence": "```json\n" + "[" * 100_000 + "\n```",
    "huge_int": '{"actions": [], "summary": "x", "n": ' + "9" * 1_000_000 + "}",
    "huge_int_in_action": '{"actions": [{"kind": "REPLACE_RANGE", "path": "a", "start_line": '
    + "1" * 1_000_000
    + "}]}",
    "huge_float": "[" + "1" * 500_000 + ".5]",
    "float_overflow": '{"actions": [], "x": 1e999}',
    "nan": '{"actions": [], "summary": NaN}',
    "infinity": '{"actions": [], "summary": -Infinity}',
    "duplicate_key": '{"actions": [], "actions": [{"kind": "DELETE_DIR", "path": "/"}]}',
    "duplicate_nested": '{"actions": [{"kind": "CREATE_DIR", "path": "a", "path": "../b"}]}',
    "escaped_lone_surrogate": '{"actions": [], "summary": "NO_CHANGES: \\ud800"}',
    "escaped_low_surrogate_key": '{"\\udc00": 1, "actions": []}',
    "many_escaped_quotes": '"' + '\\"' * 200_000,
    "unclosed_string": '{"actions": "' + "a" * 1_000_000,
    "many_fences": "```json\n{\n" * 5_000,
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_json_is_refused_as_invalid_json(name: str) -> None:
    text = HOSTILE[name]
    for strict in (True, False):
        with pytest.raises(PlanError) as caught:
            parse_plan(text, version=2, strict=strict)
        assert caught.value.code == "ERR_INVALID_JSON", caught.value


def test_raw_lone_surrogate_and_bad_utf8_bytes() -> None:
    with pytest.raises(PlanError) as caught:
        parse_plan('{"actions": [], "summary": "\ud800"}', version=2)
    assert caught.value.code == "ERR_INVALID_JSON"
    with pytest.raises(PlanError) as caught:
        parse_plan(b'{"actions": [], "summary": "\xff"}', version=2)
    assert caught.value.code == "ERR_INVALID_JSON"
    assert parse_plan(PLAN.encode(), version=2).summary == "NO_CHANGES: ok"


def test_valid_surrogate_pairs_are_fine() -> None:
    plan = parse_plan('{"actions": [], "summary": "NO_CHANGES: \\ud83d\\ude00"}', version=2)
    assert plan.summary == "NO_CHANGES: \U0001f600"


def test_input_too_large() -> None:
    small = PlanLimits(max_input_bytes=100)
    text = json.dumps({"actions": [], "summary": "x" * 200})
    with pytest.raises(PlanError) as caught:
        parse_plan(text, version=2, limits=small)
    assert caught.value.code == "ERR_INPUT_TOO_LARGE"
    # Multi-byte characters count in UTF-8 bytes, not characters.
    wide = json.dumps({"actions": [], "summary": "é" * 40}, ensure_ascii=False)
    assert len(wide) < 100 < len(wide.encode())
    with pytest.raises(PlanError) as caught:
        parse_plan(wide, version=2, limits=small)
    assert caught.value.code == "ERR_INPUT_TOO_LARGE"
    with pytest.raises(PlanError) as caught:
        parse_plan(b"x" * 101, version=2, limits=small)
    assert caught.value.code == "ERR_INPUT_TOO_LARGE"


def test_depth_limit_is_configurable_and_plans_fit_the_default() -> None:
    nested = {
        "actions": [],
        "summary": "NO_CHANGES: x",
        "memory_patch": {"project.src_roots": ["a"]},
    }
    assert parse_plan(json.dumps(nested), version=2).memory_patch == {"project.src_roots": ["a"]}
    with pytest.raises(PlanError) as caught:
        parse_plan(json.dumps(nested), version=2, limits=PlanLimits(max_json_depth=2))
    assert caught.value.code == "ERR_INVALID_JSON"


def test_unknown_version() -> None:
    with pytest.raises(PlanError) as caught:
        parse_plan(PLAN, version=3)
    assert caught.value.code == "ERR_UNKNOWN_VERSION"


def test_normalize_eol() -> None:
    assert normalize_eol("a\r\nb\rc") == "a\nb\nc\n"
    assert normalize_eol("a\n") == "a\n"
    assert normalize_eol("") == ""
    text = json.dumps({"actions": [{"kind": "CREATE_FILE", "path": "a.py", "content": "x\r\ny"}]})
    assert parse_plan(text, version=2, eol=True).actions[0].content == "x\ny\n"
    assert parse_plan(text, version=2).actions[0].content == "x\r\ny"


def test_prose_with_an_odd_quote_still_finds_the_plan() -> None:
    text = f'He said "hi and then: {PLAN}'
    assert parse_plan(text, version=2).summary == "NO_CHANGES: ok"


def test_fragments_of_a_broken_plan_are_not_taken_for_a_plan() -> None:
    broken = '{"actions": [{"kind": "DELETE_DIR", "path": "src"},], "summary": "x"}'
    for version in (1, 2):
        with pytest.raises(PlanError) as caught:
            parse_plan(broken, version=version)
        assert caught.value.code == "ERR_INVALID_JSON"
    hostile = '{"actions": [], "summary": NaN} {"actions": [], "summary": "NO_CHANGES: x"}'
    with pytest.raises(PlanError) as caught:
        parse_plan(hostile, version=2)
    assert caught.value.code == "ERR_INVALID_JSON"
