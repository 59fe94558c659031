"""``include``/``render``: save-time checks of partials never raise liquid's exceptions."""

from __future__ import annotations

from typing import Any

import pytest
from liquid import DictLoader

from _support import make_runner
from opsrun.errors import ProfileInvalid
from opsrun.kinds import builtin_kinds
from opsrun.kinds.liquid import TemplateEngine
from opsrun.model import (
    Hook,
    OperationConfig,
    OperationDefinition,
    OperationProfile,
    OperationStatus,
    ProfileIssueCode,
    ProfileOperation,
    RunRequest,
    RunResult,
    Trigger,
)
from opsrun.operations import OperationCatalog
from opsrun.stores import InMemoryStores
from opsrun.testing import ScriptedMainLlm

PARTIALS = {
    "persona": "You are {{ name }}.",
    "broken": "{% if %}",
    "huge": "x" * 70_000,
    "unknown_filter": "first line\n{{ x | nope }}",
    "nested": "{% include 'missing_inner' %}",
    "loop": "{% include 'loop' %}",
}


@pytest.fixture
def engine() -> TemplateEngine:
    return TemplateEngine(loader=DictLoader(PARTIALS))


@pytest.mark.parametrize("strict", [False, True])
@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("{% include 'broken' %}", "partial 'broken' (at line 1, column 12): template parse"),
        ("{% render 'huge' %}", "partial 'huge' (at line 1, column 11): template parse"),
        ("{% include 'nothere' %}", "partial 'nothere' (at line 1, column 12): template parse"),
        ("{% if a %}\n  {% render 'nothere' %}{% endif %}", "partial 'nothere' (at line 2, column"),
        (
            "{% include 'nested' %}",
            "partial 'missing_inner' (at line 1, column 12 in partial 'nested')",
        ),
    ],
)
def test_a_partial_that_cannot_load_is_a_problem(
    engine: TemplateEngine, source: str, expected: str, strict: bool
) -> None:
    (problem,) = engine.problems(source, strict_variables=strict)
    assert problem.startswith(expected)


def test_the_reason_a_partial_cannot_load_is_named(engine: TemplateEngine) -> None:
    assert "max_source_length" in engine.problems("{% include 'huge' %}")[0]
    assert "not found" in engine.problems("{% include 'nothere' %}")[0]
    assert "line 1, column 4" in engine.problems("{% include 'broken' %}")[0]


@pytest.mark.parametrize("strict", [False, True])
def test_an_unknown_filter_in_a_partial_names_the_partial(
    engine: TemplateEngine, strict: bool
) -> None:
    problems = engine.problems("line one\n{% include 'unknown_filter' %}", strict_variables=strict)
    assert problems == ["unknown filter 'nope' at line 2, column 8 in partial 'unknown_filter'"]


@pytest.mark.parametrize("strict", [False, True])
def test_a_partial_named_by_a_variable_is_not_a_save_time_problem(
    engine: TemplateEngine, strict: bool
) -> None:
    assert engine.problems("{% include host.card %}", strict_variables=strict) == []
    problems = engine.problems("{% include host.card %}{{ x | nope }}", strict_variables=strict)
    assert problems == ["unknown filter 'nope' at line 1, column 31"]


def test_valid_and_recursive_partials_have_no_problems(engine: TemplateEngine) -> None:
    assert engine.problems("{% render 'persona', name: 'Ann' %}{% include 'persona' %}") == []
    assert engine.problems("{% include 'loop' %}") == []  # context_depth_limit stops it later


def test_without_a_loader_a_partial_is_a_problem() -> None:
    (problem,) = TemplateEngine().problems("{% render 'persona' %}")
    assert problem.startswith("partial 'persona' (at line 1, column 11): ")
    assert "not found" in problem


# --- through a catalog and a runner ---------------------------------------------------


def _harness(engine: TemplateEngine, template: str) -> tuple[OperationCatalog, Any, Any]:
    catalog = OperationCatalog(kinds=builtin_kinds(engine=engine))
    catalog.add_definition(OperationDefinition(operation_id="t", name="T", kind="template"))
    profile = OperationProfile(
        profile_id="p",
        name="P",
        operation_profile_session_id="s",
        operations=(
            ProfileOperation(
                operation_id="t",
                config=OperationConfig(
                    hooks=(Hook.BEFORE_MAIN_LLM,),
                    order=1,
                    params={"template": template, "writeArtifact": {"tag": "t"}},
                ),
            ),
        ),
    )
    stores = InMemoryStores()
    runner = make_runner(stores=stores, catalog=catalog, main_llm=ScriptedMainLlm())
    return catalog, profile, (stores, runner)


async def _run(parts: Any, profile: OperationProfile, host: dict[str, Any]) -> RunResult:
    stores, runner = parts
    await stores.profiles.save_profile(profile)
    request = RunRequest(
        trigger=Trigger.GENERATE, chat_id="c", profile_id="p", user_message="hi", host=host
    )
    result: RunResult = await runner.run(request)
    return result


@pytest.mark.anyio
async def test_a_missing_partial_is_a_profile_issue_not_an_exception() -> None:
    catalog, profile, parts = _harness(TemplateEngine(), "{% render 'persona' %}")
    (issue,) = catalog.validate(profile)
    assert issue.code == ProfileIssueCode.INVALID_PARAMS
    assert issue.message.startswith("template: partial 'persona' (at line 1, column 11)")
    with pytest.raises(ProfileInvalid):
        await _run(parts, profile, {})


@pytest.mark.anyio
async def test_a_partial_named_by_host_data_renders_at_run_time(engine: TemplateEngine) -> None:
    catalog, profile, parts = _harness(engine, "{% include host.card, name: 'Ann' %}")
    assert catalog.validate(profile) == []
    result = await _run(parts, profile, {"card": "persona"})
    assert result.operation("t").status == OperationStatus.DONE
    missing = await _run(parts, profile, {"card": "nothere"})
    error = missing.operation("t").error
    assert error is not None
    assert error.code == "template_render_error"
