"""Save-time profile validation: one test per issue code, all problems at once, the raising form."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from itertools import pairwise
from pathlib import Path
from typing import Any

import pydantic
import pytest
from pydantic import BaseModel

from opsrun import (
    Hook,
    OperationCatalog,
    OperationConfig,
    OperationContext,
    OperationDefinition,
    OperationProfile,
    OperationResult,
    ProfileInvalid,
)
from opsrun.errors import OpsrunError
from opsrun.kinds import builtin_kinds
from opsrun.model import ProfileIssue, ProfileIssueCode, ProfileOperation
from opsrun.operations import Operation
from opsrun.operations._validate import find_cycles

Code = ProfileIssueCode
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
BEFORE = "before_main_llm"
AFTER = "after_main_llm"


# --- builders --------------------------------------------------------------------------------


def definition(
    operation_id: str,
    kind: str = "compute",
    *,
    write_tag: str | None = None,
    writes: bool | None = None,
    prompt_effects: bool = False,
) -> OperationDefinition:
    return OperationDefinition.model_validate(
        {
            "operationId": operation_id,
            "name": operation_id.split(":")[-1].replace("_", " ").title(),
            "kind": kind,
            "capabilities": {
                "writesArtifact": write_tag is not None if writes is None else writes,
                "writeTag": write_tag,
                "promptEffects": prompt_effects,
            },
        }
    )


def op(
    operation_id: str,
    *,
    hooks: Iterable[str] = (BEFORE,),
    order: float = 10,
    depends_on: Iterable[str] = (),
    params: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "operationId": operation_id,
        "config": {
            "hooks": list(hooks),
            "order": order,
            "dependsOn": list(depends_on),
            "params": dict(params or {}),
        },
    }


def profile(*operations: dict[str, Any], **fields: Any) -> OperationProfile:
    return OperationProfile.model_validate(
        {
            "profileId": "rp-test",
            "name": "RP test",
            "operationProfileSessionId": "sess-1",
            "operations": list(operations),
            **fields,
        }
    )


async def _noop(ctx: OperationContext) -> OperationResult:
    return OperationResult.done()


def catalog(*definitions: OperationDefinition) -> OperationCatalog:
    """A catalog of ``definitions``: the built-in kinds implement ``llm`` and ``template``
    (with their params models), every other kind is a function operation without one."""
    cat = OperationCatalog(kinds=builtin_kinds())
    for d in definitions:
        if d.kind in ("llm", "template"):
            cat.add_definition(d)
        else:
            cat.add_function(d, _noop)
    return cat


def compute_catalog(*ids: str) -> OperationCatalog:
    """Definitions of kind ``compute`` that write nothing: only the dependency rules apply."""
    return catalog(*(definition(i) for i in ids))


def llm_params(tag: str, **extra: Any) -> dict[str, Any]:
    return {
        "providerRef": "offline",
        "model": "offline-notes",
        "prompt": "Summarise: {{ chatHistory | last: 5 }}",
        "writeArtifact": {"tag": tag, "persisted": True, "usage": "prompt+ui"},
        **extra,
    }


def codes(issues: list[ProfileIssue]) -> list[ProfileIssueCode]:
    return [issue.code for issue in issues]


def only(issues: list[ProfileIssue], code: ProfileIssueCode) -> ProfileIssue:
    """Assert ``issues`` is exactly one issue with ``code`` and return it."""
    assert codes(issues) == [code], issues
    return issues[0]


def load_example() -> tuple[OperationProfile, OperationCatalog]:
    prof = OperationProfile.model_validate_json(
        (EXAMPLES / "rp_basic.profile.json").read_text(encoding="utf-8")
    )
    raw = json.loads((EXAMPLES / "rp_basic.catalog.json").read_text(encoding="utf-8"))
    return prof, catalog(*(OperationDefinition.model_validate(item) for item in raw))


# --- valid profiles ----------------------------------------------------------------------------


def test_example_profile_is_valid() -> None:
    prof, cat = load_example()
    assert cat.validate(prof) == []
    cat.ensure_valid(prof)


def test_realistic_profile_with_builtin_kinds_is_valid() -> None:
    prof = profile(
        op("guard", order=10, params={"writeArtifact": {"tag": "is_combat"}}),
        op(
            "notes",
            order=20,
            depends_on=["guard"],
            params=llm_params(
                "notes",
                promptEffect={"type": "prompt.append_after_last_user", "role": "developer"},
            ),
        ),
        op(
            "banner",
            order=30,
            params={
                "template": "Turn of {{ chatHistory | size }} messages",
                "promptEffect": {"type": "prompt.system_update", "mode": "append"},
            },
        ),
        op("world", hooks=[AFTER], order=10, params=llm_params("world_state")),
        op("audit", hooks=[BEFORE, AFTER], order=40),
        op("after_audit", hooks=[AFTER], order=50, depends_on=["audit", "world"]),
    )
    cat = catalog(
        definition("guard", write_tag="is_combat"),
        definition("notes", "llm", writes=True, prompt_effects=True),
        definition("banner", "template", prompt_effects=True),
        definition("world", "llm", write_tag="world_state"),
        definition("audit"),
        definition("after_audit"),
    )
    assert cat.validate(prof) == []


def test_empty_profile_is_valid() -> None:
    assert OperationCatalog().validate(profile()) == []


# --- one test per rule -------------------------------------------------------------------------


@pytest.mark.parametrize("profile_id", ["", "   "])
def test_empty_profile_id(profile_id: str) -> None:
    issue = only(OperationCatalog().validate(profile(profileId=profile_id)), Code.EMPTY_PROFILE_ID)
    assert issue.operation_id is None
    assert "profileId" in issue.message


def test_empty_session_id() -> None:
    prof = profile(operationProfileSessionId=" ")
    issue = only(OperationCatalog().validate(prof), Code.EMPTY_SESSION_ID)
    assert issue.operation_id is None
    assert "operationProfileSessionId" in issue.message


@pytest.mark.parametrize("operation_id", ["", "  "])
def test_empty_operation_id(operation_id: str) -> None:
    prof = profile(op("a"), op(operation_id))
    issue = only(compute_catalog("a").validate(prof), Code.EMPTY_OPERATION_ID)
    assert issue.operation_id is None


def test_duplicate_operation_id() -> None:
    prof = profile(op("a"), op("b"), op("a", order=20), op("a", order=30))
    issues = compute_catalog("a", "b").validate(prof)
    assert codes(issues) == [Code.DUPLICATE_OPERATION_ID] * 2
    assert {i.operation_id for i in issues} == {"a"}
    assert "'a' is listed twice" in issues[0].message


def test_unknown_operation() -> None:
    prof = profile(op("a"), op("builtin:lore_lookup"))
    issue = only(compute_catalog("a").validate(prof), Code.UNKNOWN_OPERATION)
    assert issue.operation_id == "builtin:lore_lookup"
    assert "builtin:lore_lookup" in issue.message


def test_unknown_dependency() -> None:
    prof = profile(op("a"), op("b", depends_on=["a", "ghost"]))
    issue = only(compute_catalog("a", "b").validate(prof), Code.UNKNOWN_DEPENDENCY)
    assert issue.operation_id == "b"
    assert "'ghost'" in issue.message


def test_dependency_on_an_operation_missing_from_the_catalog_is_not_unknown() -> None:
    """The dependency exists in the profile; only the definition is missing."""
    prof = profile(op("a"), op("b", depends_on=["a"]))
    issue = only(compute_catalog("b").validate(prof), Code.UNKNOWN_OPERATION)
    assert issue.operation_id == "a"


def test_self_dependency_is_not_also_a_cycle() -> None:
    prof = profile(op("a", depends_on=["a"]))
    issue = only(compute_catalog("a").validate(prof), Code.SELF_DEPENDENCY)
    assert issue.operation_id == "a"
    assert "'a' depends on itself" in issue.message


def test_cross_hook_dependency() -> None:
    prof = profile(
        op("notes", hooks=[BEFORE]),
        op("world", hooks=[AFTER], depends_on=["notes"]),
    )
    issue = only(compute_catalog("notes", "world").validate(prof), Code.CROSS_HOOK_DEPENDENCY)
    assert issue.operation_id == "world"
    assert "after_main_llm" in issue.message
    assert "'notes'" in issue.message


def test_cross_hook_dependency_of_an_operation_in_both_hooks() -> None:
    """An operation in both hooks needs each dependency in both hooks too."""
    prof = profile(
        op("before_only", hooks=[BEFORE]),
        op("both", hooks=[BEFORE, AFTER], depends_on=["before_only"]),
        op("also_both", hooks=[AFTER, BEFORE]),
        op("after_only", hooks=[AFTER], depends_on=["also_both"]),
    )
    cat = compute_catalog("before_only", "both", "also_both", "after_only")
    issue = only(cat.validate(prof), Code.CROSS_HOOK_DEPENDENCY)
    assert issue.operation_id == "both"
    assert "runs in after_main_llm" in issue.message


def _with(entry: dict[str, Any], **config: Any) -> dict[str, Any]:
    return {**entry, "config": {**entry["config"], **config}}


def test_a_required_operation_on_a_disabled_dependency_is_unreachable() -> None:
    prof = profile(
        _with(op("lookup"), enabled=False), _with(op("guard", depends_on=["lookup"]), required=True)
    )
    issue = only(compute_catalog("lookup", "guard").validate(prof), Code.UNREACHABLE_DEPENDENCY)
    assert issue.operation_id == "guard"
    assert "'lookup', which is disabled" in issue.message


def test_a_required_operation_on_a_dependency_of_other_triggers_is_unreachable() -> None:
    prof = profile(
        _with(op("regen_only"), triggers=["regenerate"]),
        _with(op("checker", depends_on=["regen_only"]), required=True),
        _with(
            op("regen_checker", depends_on=["regen_only"]), required=True, triggers=["regenerate"]
        ),
    )
    cat = compute_catalog("regen_only", "checker", "regen_checker")
    issue = only(cat.validate(prof), Code.UNREACHABLE_DEPENDENCY)
    assert issue.operation_id == "checker"
    assert "runs on generate but its dependency 'regen_only' does not" in issue.message


def test_a_required_operation_whose_chain_reaches_one_that_cannot_run_is_unreachable() -> None:
    """``guard`` needs ``middle``, which runs, but ``middle`` needs ``lookup``, which does
    not: every run skips ``middle`` and fails ``guard``."""
    for lookup, why, on in (
        (_with(op("lookup"), enabled=False), "disabled", "generate, regenerate"),
        (_with(op("lookup"), triggers=["generate"]), "not run on regenerate", "regenerate"),
    ):
        prof = profile(
            lookup,
            op("middle", depends_on=["lookup"]),
            op("top", depends_on=["middle"]),
            _with(op("guard", depends_on=["top"]), required=True),
        )
        cat = compute_catalog("lookup", "middle", "top", "guard")
        issue = only(cat.validate(prof), Code.UNREACHABLE_DEPENDENCY)
        assert issue.operation_id == "guard"
        assert f"depends on 'top', which depends on 'lookup' ({why})" in issue.message
        assert f"every run on {on} would fail" in issue.message


def test_a_long_chain_of_operations_that_can_run_is_valid() -> None:
    ids = [f"op{i}" for i in range(3_000)]
    entries = [op(ids[0])] + [op(i, depends_on=[prev]) for prev, i in pairwise(ids)]
    entries[-1] = _with(entries[-1], required=True)
    assert compute_catalog(*ids).validate(profile(*entries)) == []


def test_optional_or_disabled_dependants_of_operations_that_cannot_run_are_valid() -> None:
    """Only a required operation makes every run fail; an optional one is just skipped."""
    prof = profile(
        _with(op("lookup"), enabled=False),
        op("optional", depends_on=["lookup"]),
        _with(op("off", depends_on=["lookup"]), required=True, enabled=False),
    )
    assert compute_catalog("lookup", "optional", "off").validate(prof) == []


def test_every_issue_code_is_documented() -> None:
    text = (EXAMPLES.parent / "docs" / "error-codes.md").read_text(encoding="utf-8")
    section = text[text.index("## Profile issues") :]
    assert [c for c in ProfileIssueCode if f"| `{c.value}` |" not in section] == []


def test_dependency_cycle_names_the_cycle() -> None:
    prof = profile(
        op("a", depends_on=["b"]),
        op("b", depends_on=["c"]),
        op("c", depends_on=["a"]),
        op("d", depends_on=["a"]),
    )
    issue = only(compute_catalog("a", "b", "c", "d").validate(prof), Code.DEPENDENCY_CYCLE)
    assert issue.operation_id == "a"
    assert issue.message == "dependency cycle: a → b → c → a"


def test_each_independent_cycle_is_reported() -> None:
    prof = profile(
        op("a", depends_on=["b"]),
        op("b", depends_on=["a"]),
        op("x", depends_on=["y"]),
        op("y", depends_on=["x"]),
    )
    issues = compute_catalog("a", "b", "x", "y").validate(prof)
    assert [(i.code, i.message) for i in issues] == [
        (Code.DEPENDENCY_CYCLE, "dependency cycle: a → b → a"),
        (Code.DEPENDENCY_CYCLE, "dependency cycle: x → y → x"),
    ]


def test_duplicate_write_tag_between_llm_operations() -> None:
    prof = profile(
        op("world_a", hooks=[AFTER], params=llm_params("world_state")),
        op("world_b", hooks=[AFTER], order=20, params=llm_params("world_state")),
    )
    cat = catalog(definition("world_a", "llm", writes=True), definition("world_b", "llm"))
    issue = only(cat.validate(prof), Code.DUPLICATE_WRITE_TAG)
    assert issue.operation_id == "world_b"
    assert "art.world_state" in issue.message
    assert "'world_a'" in issue.message
    assert "'world_b'" in issue.message


def test_duplicate_write_tag_between_definition_and_params() -> None:
    prof = profile(
        op("guard"),
        op("notes", params=llm_params("is_combat")),
        op("echo", params={"template": "x", "writeArtifact": {"tag": "is_combat"}}),
    )
    cat = catalog(
        definition("guard", write_tag="is_combat"),
        definition("notes", "llm"),
        definition("echo", "template"),
    )
    issues = cat.validate(prof)
    assert codes(issues) == [Code.DUPLICATE_WRITE_TAG] * 2
    assert [i.operation_id for i in issues] == ["notes", "echo"]


def test_write_tag_unknown_when_nothing_declares_it() -> None:
    prof = profile(op("guard"))
    cat = catalog(definition("guard", writes=True))
    issue = only(cat.validate(prof), Code.WRITE_TAG_UNKNOWN)
    assert issue.operation_id == "guard"
    assert "writeTag" in issue.message


def test_write_tag_taken_from_params_of_a_custom_kind() -> None:
    prof = profile(op("guard", params={"writeArtifact": {"tag": "is_combat"}}))
    assert catalog(definition("guard", writes=True)).validate(prof) == []


def test_write_tag_unknown_when_definition_and_params_disagree() -> None:
    prof = profile(op("world", hooks=[AFTER], params=llm_params("world")))
    cat = catalog(definition("world", "llm", write_tag="world_state"))
    issue = only(cat.validate(prof), Code.WRITE_TAG_UNKNOWN)
    assert issue.operation_id == "world"
    assert "art.world_state" in issue.message
    assert "art.world" in issue.message


@pytest.mark.parametrize(
    ("declared", "params"),
    [
        ("world-state", {}),
        (None, {"writeArtifact": {"tag": "art.world_state"}}),
        ("9lives", {}),
    ],
    ids=["dash-in-definition", "dot-in-params", "leading-digit"],
)
def test_write_tag_unknown_for_invalid_tag_syntax(
    declared: str | None, params: dict[str, Any]
) -> None:
    prof = profile(op("world", params=params))
    cat = catalog(definition("world", write_tag=declared, writes=True))
    issue = only(cat.validate(prof), Code.WRITE_TAG_UNKNOWN)
    assert issue.operation_id == "world"
    assert "artifact tag" in issue.message


def test_invalid_llm_params_name_the_field() -> None:
    params = llm_params("notes")
    del params["prompt"]
    prof = profile(op("notes", params=params))
    issue = only(catalog(definition("notes", "llm")).validate(prof), Code.INVALID_PARAMS)
    assert issue.operation_id == "notes"
    assert "prompt" in issue.message
    assert "Field required" in issue.message


def test_invalid_llm_params_still_feed_the_tag_check() -> None:
    """A broken params object still declares its tag, so collisions are not hidden."""
    broken = llm_params("world_state", temperature=0.1)  # not a field: samplers.temperature is
    prof = profile(
        op("world_a", params=llm_params("world_state")),
        op("world_b", params=broken),
    )
    cat = catalog(definition("world_a", "llm"), definition("world_b", "llm"))
    issues = cat.validate(prof)
    assert codes(issues) == [Code.INVALID_PARAMS, Code.DUPLICATE_WRITE_TAG]
    assert "temperature" in issues[0].message


def test_invalid_template_params() -> None:
    prof = profile(op("banner", params={"templat": "typo"}))
    issue = only(catalog(definition("banner", "template")).validate(prof), Code.INVALID_PARAMS)
    assert "template" in issue.message
    assert "templat" in issue.message


class StatsParams(BaseModel):
    threshold: int


class StatsOperation(Operation[StatsParams]):
    definition = OperationDefinition(operation_id="stats", name="Stats", kind="stats_kind")
    params_model = StatsParams

    async def execute(self, ctx: OperationContext[StatsParams]) -> OperationResult:
        return OperationResult.done()


def stats_catalog(how: str) -> OperationCatalog:
    """A catalog whose ``stats`` operation validates its params with StatsParams."""
    cat = OperationCatalog()
    if how == "add_function":
        cat.add_function(definition("stats", "stats_kind"), _noop, params_model=StatsParams)
    elif how == "decorator":
        cat.function("stats", name="Stats", kind="stats_kind", params_model=StatsParams)(_noop)
    else:
        cat.add(StatsOperation())
    return cat


@pytest.mark.parametrize("how", ["add_function", "decorator", "subclass"])
def test_each_operation_validates_params_with_its_own_model(how: str) -> None:
    cat = stats_catalog(how)
    assert cat.implementation("stats").params_model is StatsParams
    issue = only(
        cat.validate(profile(op("stats", params={"threshold": "high"}))), Code.INVALID_PARAMS
    )
    assert issue.operation_id == "stats"
    assert "threshold" in issue.message
    assert cat.validate(profile(op("stats", params={"threshold": 3}))) == []


def test_an_operation_without_a_params_model_does_not_check_params() -> None:
    prof = profile(op("stats", params={"threshold": "high"}))
    assert catalog(definition("stats", "stats_kind")).validate(prof) == []


def test_a_custom_llm_kind_operation_without_a_params_model_does_not_get_llm_params() -> None:
    """The kind name alone chooses no params model: only the built-in ``llm`` kind has one."""
    params = llm_params("notes")
    del params["prompt"]  # invalid for LlmParams
    prof = profile(op("notes", params=params))
    cat = OperationCatalog()
    cat.add_function(definition("notes", "llm"), _noop)
    assert cat.implementation("notes").params_model is None
    assert cat.validate(prof) == []
    builtin = catalog(definition("notes", "llm"))
    assert only(builtin.validate(prof), Code.INVALID_PARAMS).operation_id == "notes"


class Counted(BaseModel):
    n: int


def test_a_function_operation_params_model_is_checked_at_validation() -> None:
    cat = OperationCatalog()

    @cat.function("count", name="Count", params_model=Counted)
    async def count(ctx: OperationContext) -> OperationResult:
        return OperationResult.done()

    bad = profile(op("count", params={"n": "not-int"}))
    issue = only(cat.validate(bad), Code.INVALID_PARAMS)
    assert issue.operation_id == "count"
    assert "n:" in issue.message
    with pytest.raises(ProfileInvalid):
        cat.ensure_valid(bad)
    assert cat.validate(profile(op("count", params={"n": 2}))) == []


@pytest.mark.parametrize(
    ("kind", "params"),
    [
        ("llm", llm_params("notes", promptEffect={"type": "prompt.system_update"})),
        ("template", {"template": "x", "promptEffect": {"type": "prompt.insert_at_depth"}}),
    ],
)
def test_prompt_effect_after_main_llm(kind: str, params: dict[str, Any]) -> None:
    prof = profile(op("notes", hooks=[AFTER], params=params))
    issue = only(
        catalog(definition("notes", kind)).validate(prof),
        Code.PROMPT_EFFECT_AFTER_MAIN_LLM,
    )
    assert issue.operation_id == "notes"
    assert "after_main_llm" in issue.message


def test_prompt_effect_in_both_hooks_is_reported() -> None:
    params = llm_params("notes", promptEffect={"type": "prompt.append_after_last_user"})
    prof = profile(op("notes", hooks=[BEFORE, AFTER], params=params))
    only(
        catalog(definition("notes", "llm")).validate(prof),
        Code.PROMPT_EFFECT_AFTER_MAIN_LLM,
    )
    before_only = profile(op("notes", hooks=[BEFORE], params=params))
    assert catalog(definition("notes", "llm")).validate(before_only) == []


# --- every problem at once ---------------------------------------------------------------------


def test_every_problem_is_reported_at_once() -> None:
    no_prompt = llm_params("notes")
    del no_prompt["prompt"]
    prof = profile(
        op("a"),
        op("a", order=20),  # duplicate_operation_id
        op("ghost"),  # unknown_operation
        op("b", depends_on=["missing"]),  # unknown_dependency
        op("notes", params=no_prompt),  # invalid_params
        operationProfileSessionId="",  # empty_session_id
    )
    cat = catalog(definition("a"), definition("b"), definition("notes", "llm"))
    assert sorted(codes(cat.validate(prof))) == sorted(
        [
            Code.EMPTY_SESSION_ID,
            Code.DUPLICATE_OPERATION_ID,
            Code.UNKNOWN_OPERATION,
            Code.UNKNOWN_DEPENDENCY,
            Code.INVALID_PARAMS,
        ]
    )


def test_every_code_can_be_produced_by_one_profile() -> None:
    notes_params = llm_params("notes", promptEffect={"type": "prompt.system_update"})
    del notes_params["prompt"]
    prof = profile(
        op(""),
        op("a", depends_on=["a", "nowhere"]),
        op("a"),
        op("ghost"),
        op("x", depends_on=["y"]),
        op("y", depends_on=["x"]),
        op("before", hooks=[BEFORE]),
        op("after", hooks=[AFTER], depends_on=["before"]),
        _with(op("off"), enabled=False),
        _with(op("needs_off", depends_on=["off"]), required=True),
        op("w1", params=llm_params("world_state")),
        op("w2", params=llm_params("world_state")),
        op("untagged"),
        op("notes", params=notes_params),
        op(
            "banner",
            hooks=[AFTER],
            params={"template": "t", "promptEffect": {"type": "prompt.system_update"}},
        ),
        profileId="",
        operationProfileSessionId="",
    )
    cat = catalog(
        definition("a"),
        definition("x"),
        definition("y"),
        definition("before"),
        definition("after"),
        definition("off"),
        definition("needs_off"),
        definition("w1", "llm"),
        definition("w2", "llm"),
        definition("untagged", writes=True),
        definition("notes", "llm"),
        definition("banner", "template"),
    )
    assert set(codes(cat.validate(prof))) == set(ProfileIssueCode)


# --- the raising form --------------------------------------------------------------------------


def test_ensure_valid_profile_raises_with_every_issue() -> None:
    prof = profile(op("a", depends_on=["a"]), op("ghost"), operationProfileSessionId="")
    cat = compute_catalog("a")
    with pytest.raises(ProfileInvalid) as info:
        cat.ensure_valid(prof)
    err = info.value
    assert isinstance(err, OpsrunError)
    assert err.code == "profile_invalid"
    assert err.issues == cat.validate(prof)
    assert codes(err.issues) == [
        Code.EMPTY_SESSION_ID,
        Code.SELF_DEPENDENCY,
        Code.UNKNOWN_OPERATION,
    ]
    assert err.details["issues"] == ["empty_session_id", "self_dependency", "unknown_operation"]
    json.dumps(err.to_dict())  # details stay JSON-safe
    assert "3 problem(s)" in str(err)
    assert "[profile_invalid]" in str(err)
    assert "self_dependency(a)" in str(err)


def test_ensure_valid_profile_summary_is_bounded() -> None:
    prof = profile(*(op(f"ghost_{i:02}") for i in range(12)))
    with pytest.raises(ProfileInvalid) as info:
        OperationCatalog().ensure_valid(prof)
    assert len(info.value.issues) == 12
    assert "12 problem(s)" in str(info.value)
    assert "and 2 more" in str(info.value)
    assert "ghost_10" not in str(info.value)


def test_ensure_valid_profile_uses_each_operations_params_model() -> None:
    prof = profile(op("stats", params={"threshold": "high"}))
    catalog(definition("stats", "stats_kind")).ensure_valid(prof)
    with pytest.raises(ProfileInvalid) as info:
        stats_catalog("add_function").ensure_valid(prof)
    assert codes(info.value.issues) == [Code.INVALID_PARAMS]


# --- find_cycles -------------------------------------------------------------------------------


def test_find_cycles_on_a_dag_is_empty() -> None:
    assert find_cycles({"a": ["b", "c"], "b": ["c"], "c": []}) == []


def test_find_cycles_starts_at_the_smallest_node_and_sorts() -> None:
    graph = {"q": ["p"], "p": ["q"], "c": ["a"], "a": ["b"], "b": ["c"]}
    assert find_cycles(graph) == [["a", "b", "c"], ["p", "q"]]


def test_find_cycles_handles_targets_without_entries_and_deep_chains() -> None:
    chain = {f"n{i:05}": [f"n{i + 1:05}"] for i in range(5000)}
    chain["n05000"] = ["n00000"]
    cycles = find_cycles(chain)
    assert len(cycles) == 1
    assert len(cycles[0]) == 5001
    assert find_cycles({"a": ["outside"]}) == []


def test_find_cycles_ignores_self_loops() -> None:
    assert find_cycles({"a": ["a"], "b": ["b", "c"], "c": []}) == []


def test_find_cycles_ignores_a_self_loop_inside_a_larger_cycle() -> None:
    """A self loop on the start node must not be returned as the cycle of its component.

    The docstring says self loops are not cycles; the component {a, b} has the real cycle
    a → b → a.
    """
    assert find_cycles({"a": ["a", "b"], "b": ["a"]}) == [["a", "b"]]


def test_prompt_effect_capability_after_main_llm_is_reported() -> None:
    """A custom operation that declares prompt effects cannot run after the main LLM."""
    cat = catalog(definition("banner", prompt_effects=True))
    issues = cat.validate(profile(op("banner", hooks=(AFTER,))))
    assert codes(issues) == [ProfileIssueCode.PROMPT_EFFECT_AFTER_MAIN_LLM]
    assert only(issues, ProfileIssueCode.PROMPT_EFFECT_AFTER_MAIN_LLM).operation_id == "banner"


def test_profile_schema_requires_unique_hooks() -> None:
    schema = OperationProfile.model_json_schema(by_alias=True)
    assert schema["$defs"]["OperationConfig"]["properties"]["hooks"]["uniqueItems"] is True


@pytest.mark.parametrize("order", [math.nan, math.inf, -math.inf])
def test_order_must_be_a_finite_number(order: float) -> None:
    with pytest.raises(pydantic.ValidationError):
        OperationConfig(hooks=(Hook.BEFORE_MAIN_LLM,), order=order)


def _one(operation_id: str, params: dict[str, Any]) -> OperationProfile:
    entry = ProfileOperation(
        operation_id=operation_id,
        config=OperationConfig(hooks=(Hook.BEFORE_MAIN_LLM,), order=1, params=params),
    )
    return OperationProfile(
        profile_id="p", name="P", operation_profile_session_id="s", operations=(entry,)
    )


def test_a_catalog_without_providers_checks_templates_but_not_references() -> None:
    catalog = OperationCatalog(kinds=builtin_kinds())
    catalog.add_definition(OperationDefinition(operation_id="x", name="X", kind="llm"))
    fine = {
        "providerRef": "anywhere",
        "model": "m",
        "prompt": "{{ chatHistory | last: 2 }}",
        "writeArtifact": {"tag": "notes"},
    }
    assert catalog.validate(_one("x", fine)) == []
    broken = {**fine, "prompt": "{% for %}"}
    (issue,) = catalog.validate(_one("x", broken))
    assert issue.code == ProfileIssueCode.INVALID_PARAMS
    assert issue.message.startswith("prompt: ")


def test_an_operation_checks_its_own_params_at_save_time() -> None:
    class Picky(Operation[Any]):
        definition = OperationDefinition(operation_id="picky", name="Picky", kind="custom")

        def check(self, params: Any) -> list[str]:
            return [] if params.get("mode") == "ok" else ["mode must be ok"]

        async def execute(self, ctx: OperationContext) -> OperationResult:
            return OperationResult.done()

    catalog = OperationCatalog([Picky()])
    assert catalog.validate(_one("picky", {"mode": "ok"})) == []
    (issue,) = catalog.validate(_one("picky", {"mode": "no"}))
    assert (issue.code, issue.message) == (ProfileIssueCode.INVALID_PARAMS, "mode must be ok")
