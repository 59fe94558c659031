"""Raw control characters inside JSON strings: reported where they are, repaired in best-effort."""

from __future__ import annotations

import json

import pytest

from opsrun.errors import PlanError
from opsrun.protocol import parse_plan

# What a model writes when it forgets to escape the newlines of a file's content.
RAW = (
    '{"actions": [\n'
    '  {"kind": "CREATE_FILE", "path": "app.py", "content": "import os\n'
    "print(os.getcwd())\n"
    '"},\n'
    '  {"kind": "CREATE_DIR", "path": "docs"}\n'
    '], "summary": "Add the app."}'
)
ESCAPED = {
    "actions": [
        {"kind": "CREATE_FILE", "path": "app.py", "content": "import os\nprint(os.getcwd())\n"},
        {"kind": "CREATE_DIR", "path": "docs"},
    ],
    "summary": "Add the app.",
}


def test_strict_mode_reports_the_control_character_with_line_and_column() -> None:
    with pytest.raises(PlanError) as caught:
        parse_plan(RAW, version=2, strict=True)
    error = caught.value
    assert error.code == "ERR_INVALID_JSON"
    assert error.details["line"] == 2
    assert error.details["column"] == len(RAW.splitlines()[1]) + 1 == 66
    assert error.details["control_character"] == "U+000A"
    assert "newline" in error.message
    assert "line 2, column 66" in error.message


@pytest.mark.parametrize(
    "text",
    [
        RAW,
        f"Here is the plan:\n```json\n{RAW}\n```\n",
        f"Here is the plan: {RAW} -- done.",
    ],
)
def test_best_effort_repairs_raw_newlines_and_says_so(text: str) -> None:
    plan = parse_plan(text, version=2)
    assert plan.model_dump(exclude={"repairs"}) == parse_plan(
        json.dumps(ESCAPED), version=2
    ).model_dump(exclude={"repairs"})
    assert len(plan.repairs) == 1
    assert "U+000A" in plan.repairs[0]
    assert "escaped raw control characters" in plan.repairs[0]
    # The repair names the place in the whole answer, not inside the fenced block.
    line = text[: text.index("import os")].count("\n") + 1
    assert f"line {line}," in plan.repairs[0]


def test_well_formed_json_is_not_marked_repaired() -> None:
    assert parse_plan(json.dumps(ESCAPED), version=2).repairs == ()


def test_tabs_and_other_control_characters_are_escaped_too() -> None:
    text = '{"actions": [], "summary": "NO_CHANGES:\tfine\x01"}'
    plan = parse_plan(text, version=2)
    assert plan.summary == "NO_CHANGES:\tfine\x01"
    assert "U+0009" in plan.repairs[0]


def test_the_real_cause_is_reported_not_a_fragment_schema_error() -> None:
    # The repaired value is not a plan (no actions), so nothing is accepted; the
    # error names the control character, not "'actions' is a required property"
    # of the second object found after the broken first one.
    text = '{"todo": [{"note": "a\nb"}, {"kind": "CREATE_DIR", "path": "x"}]}'
    with pytest.raises(PlanError) as caught:
        parse_plan(text, version=2)
    error = caught.value
    assert error.code == "ERR_INVALID_JSON"
    assert error.details["control_character"] == "U+000A"
    assert (error.details["line"], error.details["column"]) == (1, 22)
    assert "required property" in error.details["after_repair"]


def test_unrepairable_control_characters_are_reported_as_invalid_json() -> None:
    # An unescaped quote as well: escaping the newline is not enough.
    text = '{"actions": [{"kind": "CREATE_FILE", "path": "a", "content": "say "hi"\n"}]}'
    for strict in (True, False):
        with pytest.raises(PlanError) as caught:
            parse_plan(text, version=2, strict=strict)
        assert caught.value.code == "ERR_INVALID_JSON"
    # Before the fix this answer was reported as a schema error of a fragment.
    fragment = '{"actions": [{"kind": "CREATE_FILE", "path": "a", "content": "x\n"}, {"a": 1}]}'
    broken = fragment.replace('"x\n"', '"x\n" oops')
    with pytest.raises(PlanError) as caught:
        parse_plan(broken, version=2)
    assert caught.value.code == "ERR_INVALID_JSON"
    assert caught.value.details["control_character"] == "U+000A"


def test_repair_keeps_every_hostile_input_guard() -> None:
    text = '{"actions": [], "summary": "NO_CHANGES: a\nb", "summary": "again"}'
    with pytest.raises(PlanError) as caught:
        parse_plan(text, version=2)
    assert caught.value.code == "ERR_INVALID_JSON"
    assert "duplicate" in caught.value.message
    deep = '{"actions": [], "summary": "a\nb", "memory_patch": ' + "[" * 100 + "]" * 100 + "}"
    with pytest.raises(PlanError) as caught:
        parse_plan(deep, version=2)
    assert "deeper than" in caught.value.message


def test_a_schema_error_before_the_broken_candidate_still_wins() -> None:
    # The whole text is valid JSON that is not a plan: that is the answer's problem.
    text = json.dumps({"plan": "see below\n", "n": 1})
    with pytest.raises(PlanError) as caught:
        parse_plan(text, version=2)
    assert caught.value.code == "ERR_SCHEMA"
