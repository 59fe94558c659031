"""kind=template through a real Runner, and both built-in kinds together end to end."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _support import examples, make_runner, session_artifacts
from opsrun.errors import ProfileInvalid
from opsrun.kinds import builtin_kinds
from opsrun.kinds.liquid import TemplateEngine, TemplateLimits
from opsrun.model import (
    Artifact,
    Hook,
    OperationConfig,
    OperationDefinition,
    OperationProfile,
    OperationResult,
    OperationStatus,
    ProfileIssueCode,
    ProfileOperation,
    RunRequest,
    RunResult,
    TemplateParams,
    Trigger,
)
from opsrun.operations import OperationCatalog, OperationContext, RunMeta
from opsrun.providers import ProviderRegistry
from opsrun.redaction import Redactor
from opsrun.stores import InMemoryStores
from opsrun.testing import ScriptedMainLlm, ScriptedProvider

pytestmark = pytest.mark.anyio
B, A = Hook.BEFORE_MAIN_LLM, Hook.AFTER_MAIN_LLM


class Harness:
    """Runner + catalog with the built-in kinds; operations are added per test."""

    def __init__(
        self,
        *,
        engine: TemplateEngine | None = None,
        provider: ScriptedProvider | None = None,
        redactor: Redactor | None = None,
    ) -> None:
        self.stores = InMemoryStores()
        self.main_llm = ScriptedMainLlm()
        self.provider = provider or ScriptedProvider()
        self.engine = engine or TemplateEngine()
        self.catalog = OperationCatalog(
            kinds=builtin_kinds(
                providers=ProviderRegistry({"test": self.provider}), engine=self.engine
            )
        )
        self.runner = make_runner(
            stores=self.stores, catalog=self.catalog, main_llm=self.main_llm, redactor=redactor
        )
        self.entries: list[ProfileOperation] = []

    def template(self, op_id: str, params: dict[str, Any], **config: Any) -> None:
        self.catalog.add_definition(
            OperationDefinition(operation_id=op_id, name=op_id.title(), kind="template")
        )
        self.add_entry(op_id, params, **config)

    def add_entry(self, op_id: str, params: dict[str, Any], **config: Any) -> None:
        config.setdefault("hooks", (B,))
        config.setdefault("order", len(self.entries) + 1)
        self.entries.append(
            ProfileOperation(operation_id=op_id, config=OperationConfig(params=params, **config))
        )

    def profile(self) -> OperationProfile:
        return OperationProfile(
            profile_id="p",
            name="P",
            operation_profile_session_id="s",
            operations=tuple(self.entries),
        )

    async def run(self, user: str = "hi", *, system_prompt: str = "") -> RunResult:
        await self.stores.profiles.save_profile(self.profile())
        return await self.runner.run(
            RunRequest(
                trigger=Trigger.GENERATE,
                chat_id="c",
                profile_id="p",
                user_message=user,
                system_prompt=system_prompt,
            )
        )

    async def artifacts(self, result: RunResult) -> dict[str, Artifact]:
        return await session_artifacts(self.stores, result.run)


def code_of(result: RunResult, op_id: str) -> str | None:
    error = result.operation(op_id).error
    return None if error is None else error.code


async def test_renders_artifacts_and_history_into_an_artifact_with_every_spec_field() -> None:
    h = Harness()
    spec = {
        "tag": "panel",
        "persisted": True,
        "usage": "ui_only",
        "semantics": "log/feed",
        "format": "markdown",
        "retention": {"mode": "window", "maxVersions": 2},
        "promptInclusion": {"mode": "none"},
        "uiPresentation": {"mode": "timeline", "surface": "panel:stats"},
    }
    template = (
        "{{ chatHistory | size }} message(s); last: "
        "{{ chatHistory | last: 1 | map: 'content' | join }}; "
        "previous: {{ art.panel.value | default: 'none' }}"
    )
    h.template("panel", {"template": template, "writeArtifact": spec})
    first = await h.run("one")
    assert first.operation("panel").status == OperationStatus.DONE
    second = await h.run("two")
    panel = (await h.artifacts(second))["panel"]
    assert panel.value == (
        "3 message(s); last: two; previous: 1 message(s); last: one; previous: none"
    )
    assert panel.usage.value == "ui_only"
    assert panel.semantics == "log/feed"
    assert panel.format.value == "markdown"
    assert panel.version == 2
    assert panel.based_on_version == 1
    assert [v.version for v in panel.history] == [1]
    assert panel.ui_presentation is not None
    assert panel.ui_presentation.surface == "panel:stats"
    outputs = second.operation("panel").outputs_summary
    assert outputs["renderedLength"] == len(panel.value)
    inputs = second.operation("panel").inputs_summary
    assert set(inputs) == {"templateHash", "templateLength", "strictVariables"}


async def test_the_runners_redactor_masks_the_rendered_text() -> None:
    """Kinds take no redactor of their own: they mask with the run's (``ctx.redactor``)."""
    secret = "host-only-secret-7f3a9c"
    h = Harness(redactor=Redactor(secrets=(secret,)))
    h.template(
        "t",
        {
            "template": "seen " + secret + " today",
            "writeArtifact": {"tag": "t", "persisted": True},
            "promptEffect": {"type": "prompt.append_after_last_user"},
        },
    )
    result = await h.run()
    assert result.operation("t").status == OperationStatus.DONE
    assert (await h.artifacts(result))["t"].value == "seen [REDACTED] today"
    request = h.main_llm.last_request
    assert request is not None
    assert secret not in "".join(m.content for m in request.messages)
    plain = Harness()
    plain.template(
        "t", {"template": "seen " + secret, "writeArtifact": {"tag": "t", "persisted": True}}
    )
    other = await plain.run()
    assert (await plain.artifacts(other))["t"].value == "seen " + secret  # not a secret here


async def test_text_without_liquid_is_itself() -> None:
    h = Harness()
    text = "Plain instructions: keep answers short. 100% literal, no {braces} needed."
    h.template("t", {"template": text, "writeArtifact": {"tag": "t", "persisted": True}})
    result = await h.run()
    assert (await h.artifacts(result))["t"].value == text


@pytest.mark.parametrize(
    ("effect", "expected"),
    [
        (
            {"type": "prompt.append_after_last_user", "role": "user"},
            [("system", "SYS"), ("user", "hi"), ("user", "NOTE hi")],
        ),
        (
            {"type": "prompt.system_update", "mode": "prepend"},
            [("system", "NOTE hiSYS"), ("user", "hi")],
        ),
        (
            {"type": "prompt.system_update", "mode": "replace"},
            [("system", "NOTE hi"), ("user", "hi")],
        ),
        (
            {"type": "prompt.insert_at_depth", "depthFromEnd": -1, "role": "assistant"},
            [("system", "SYS"), ("assistant", "NOTE hi"), ("user", "hi")],
        ),
    ],
)
async def test_prompt_effects_carry_the_rendered_text(
    effect: dict[str, Any], expected: list[tuple[str, str]]
) -> None:
    h = Harness()
    template = "NOTE {{ chatHistory | last: 1 | map: 'content' | join }}"
    h.template("t", {"template": template, "promptEffect": effect})
    result = await h.run("hi", system_prompt="SYS")
    assert result.operation("t").status == OperationStatus.DONE
    request = h.main_llm.last_request
    assert request is not None
    assert [(m.role, m.content) for m in request.messages] == expected


async def test_strict_variables_is_template_render_error() -> None:
    h = Harness()
    h.template("strict", {"template": "{{ art.nothing.value }}", "strictVariables": True})
    h.template("lenient", {"template": "[{{ art.nothing.value }}]", "writeArtifact": {"tag": "x"}})
    result = await h.run()
    assert code_of(result, "strict") == "template_render_error"
    error = result.operation("strict").error
    assert error is not None
    assert error.details is not None
    assert error.details["undefined"] is True
    assert result.operation("lenient").status == OperationStatus.DONE


async def test_a_syntax_error_is_refused_when_the_profile_is_saved_with_its_position() -> None:
    h = Harness()
    h.template("t", {"template": "line one\n{% if %}"})
    (issue,) = h.catalog.validate(h.profile())
    assert (issue.code, issue.operation_id) == (ProfileIssueCode.INVALID_PARAMS, "t")
    assert issue.message.startswith("template: ")
    assert "line 2" in issue.message
    with pytest.raises(ProfileInvalid):
        await h.run()


async def test_a_syntax_error_at_run_time_is_template_render_error_with_position() -> None:
    h = Harness()
    operation = h.catalog.add_definition(
        OperationDefinition(operation_id="direct", name="Direct", kind="template")
    )
    ctx: OperationContext[Any] = OperationContext(
        run=RunMeta(
            run_id="r",
            trigger=Trigger.GENERATE,
            chat_id="c",
            branch_id="main",
            user_message_id="u",
            profile_id=None,
            session_key=None,
        ),
        hook=B,
        definition=operation.definition,
        config=OperationConfig(hooks=(B,), order=1),
        params=TemplateParams(template="line one\n{% if %}"),
        history=(),
        artifacts={},
    )
    result = await operation.execute(ctx)
    assert result.error is not None
    assert result.error.code == "template_render_error"
    assert result.error.details is not None
    assert result.error.details["line"] == 2


async def test_loop_limit_is_template_render_error() -> None:
    h = Harness(engine=TemplateEngine(limits=TemplateLimits(loop_iteration_limit=10)))
    h.template("t", {"template": "{% for i in (1..100) %}{{ i }}{% endfor %}"})
    result = await h.run()
    error = result.operation("t").error
    assert error is not None
    assert error.code == "template_render_error"
    assert error.details is not None
    assert error.details["limit"] == "loop_iteration_limit"


async def test_templates_are_parsed_once() -> None:
    h = Harness()
    h.template("t", {"template": "{{ run.chatId }}!", "writeArtifact": {"tag": "t"}})
    await h.run("one")
    await h.run("two")
    info = h.engine.cache_info()
    assert info.misses == 1
    assert info.hits >= 1


async def test_template_sees_the_staged_artifact_of_its_dependency() -> None:
    h = Harness()

    @h.catalog.function("world", name="World", write_tag="world_state")
    async def world(ctx: OperationContext) -> OperationResult:
        turns = (ctx.art_value("world_state") or {"turns": 0})["turns"] + 1
        return OperationResult.done(artifact=ctx.write({"turns": turns}, persisted=True))

    h.add_entry("world", {}, hooks=(A,), order=1)
    h.template(
        "stats",
        {
            "template": "Turns: {{ art.world_state.value.turns }}",
            "strictVariables": True,
            "writeArtifact": {"tag": "stats", "persisted": True, "usage": "ui_only"},
        },
        hooks=(A,),
        order=2,
        depends_on=("world",),
    )
    await h.run("one")
    result = await h.run("two")
    assert (await h.artifacts(result))["stats"].value == "Turns: 2"


async def test_both_kinds_end_to_end() -> None:
    provider = ScriptedProvider(['{"mood": "tense", "threat": 3}'])
    h = Harness(provider=provider)
    h.catalog.add_definition(OperationDefinition(operation_id="mood", name="Mood", kind="llm"))
    h.add_entry(
        "mood",
        {
            "providerRef": "test",
            "model": "m",
            "prompt": "Mood of: {{ chatHistory | last: 1 | map: 'content' | join }}",
            "output": {"mode": "json"},
            "writeArtifact": {"tag": "mood", "persisted": True},
        },
    )
    h.template(
        "mood_note",
        {
            "template": "The scene is {{ art.mood.value.mood }} "
            "(threat {{ art.mood.value.threat }}).",
            "strictVariables": True,
            "promptEffect": {"type": "prompt.append_after_last_user"},
        },
        depends_on=("mood",),
    )
    result = await h.run("a shadow moves")
    assert result.status.value == "done"
    assert provider.last_request is not None
    assert provider.last_request.messages[-1].content == "Mood of: a shadow moves"
    request = h.main_llm.last_request
    assert request is not None
    assert ("system", "The scene is tense (threat 3).") in [
        (m.role, m.content) for m in request.messages
    ]
    assert (await h.artifacts(result))["mood"].value == {"mood": "tense", "threat": 3}


# -- property: a template either renders or fails with template_render_error ----------------

_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**6), 10**6) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4)
    ),
    max_leaves=12,
)
_fragments = st.sampled_from(
    [
        "{{ art.a.value }}",
        "{{ art.a.value | size }}",
        "{{ art.a.value | first }}",
        "{{ art.a.value | join: ',' }}",
        "{{ art.a.value | plus: 1 }}",
        "{{ art.a.value | divided_by: 0 }}",
        "{{ art.a.value | slice: 'x' }}",
        "{{ art.a.value.x.y }}",
        "{{ art.a.history | last: 2 }}",
        "{% for x in art.a.value %}[{{ x }}]{% endfor %}",
        "{% if art.a.value %}yes{% else %}no{% endif %}",
        "{{ chatHistory | last: 1 | map: 'content' }}",
        "{{ art.missing.value }}",
        "{% for i in (1..art.a.value) %}{{ i }}{% endfor %}",
        "{{ 'x' | append: art.a.value }}",
        "{% assign n = art.a.value %}{{ n | times: 2 }}",
        "{{",
        "}}",
        "{%",
        "{% endfor %}",
        "{{ art.a.value | no_such_filter }}",
        "text ",
    ]
)
_templates = st.lists(_fragments | st.text(max_size=6), max_size=5).map("".join)


# Drawing recursive JSON values can be slow on a loaded machine; that is not a failure.
# Every example is a whole run, and each backend draws examples of its own: half of the
# profile's on each still combine every fragment with the others many times.
@settings(suppress_health_check=[HealthCheck.too_slow], max_examples=examples(1 / 2))
@given(template=_templates, value=_json, strict=st.booleans())
async def test_any_template_renders_or_fails_with_template_render_error(
    template: str, value: Any, strict: bool
) -> None:
    h = Harness(engine=TemplateEngine(limits=TemplateLimits(loop_iteration_limit=1000)))

    @h.catalog.function("seed", name="Seed", write_tag="a")
    async def seed(ctx: OperationContext) -> OperationResult:
        return OperationResult.done(artifact=ctx.write(value, persisted=False))

    h.add_entry("seed", {}, order=1)
    h.template(
        "t",
        {"template": template, "strictVariables": strict, "writeArtifact": {"tag": "out"}},
        order=2,
        depends_on=("seed",),
    )
    issues = h.catalog.validate(h.profile())
    if issues:  # a template that does not parse is refused before any run
        assert {i.code for i in issues} == {ProfileIssueCode.INVALID_PARAMS}
        return
    result = await h.run()
    op = result.operation("t")
    if op.status == OperationStatus.DONE:
        assert op.outputs_summary["renderedLength"] >= 0
    else:
        assert op.status == OperationStatus.ERROR
        assert op.error is not None
        assert op.error.code == "template_render_error", op.error
