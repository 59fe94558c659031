"""TemplateEngine: variables, the last/transcript filters, strictness, caching, errors."""

from __future__ import annotations

from typing import Any

import pytest
from liquid import DictLoader

from opsrun.errors import ConfigError, TemplateError
from opsrun.kinds.liquid import TemplateEngine, TemplateLimits


def _history(n: int) -> list[dict[str, str]]:
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}"} for i in range(n)]


@pytest.fixture
def context() -> dict[str, Any]:
    return {
        "art": {
            "stats": {
                "value": {"hp": 7, "name": "Ann"},
                "history": [{"hp": 5}, {"hp": 3}],
                "meta": {"version": 4},
            },
            "notes": {"value": "plain text", "history": [], "meta": {}},
        },
        "chatHistory": _history(8),
        "run": {"id": "r1", "hook": "before_main_llm"},
        "extra": "caller value",
    }


@pytest.fixture
def engine() -> TemplateEngine:
    return TemplateEngine()


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("HP {{ art.stats.value.hp }} of {{ art.stats.value.name }}", "HP 7 of Ann"),
        ("{{ art.notes.value }}", "plain text"),
        ("{% for h in art.stats.history %}{{ h.hp }},{% endfor %}", "5,3,"),
        ("{{ art.stats.history | first | map: 'hp' }}", "5"),
        ("{{ art.stats.history.size }}", "2"),
        ("v{{ art.stats.meta.version }}", "v4"),
        ("{{ run.id }}/{{ run.hook }}", "r1/before_main_llm"),
        ("{{ extra | upcase }}", "CALLER VALUE"),
        ("no liquid here: { } %", "no liquid here: { } %"),
        ("{% if art.missing %}x{% else %}y{% endif %}", "y"),
    ],
)
def test_renders_context(
    engine: TemplateEngine, context: dict[str, Any], source: str, expected: str
) -> None:
    assert engine.render(source, context) == expected


def test_last_with_count_returns_list(engine: TemplateEngine, context: dict[str, Any]) -> None:
    out = engine.render(
        "{% assign tail = chatHistory | last: 5 %}{{ tail.size }}|"
        "{% for m in tail %}{{ m.content }} {% endfor %}",
        context,
    )
    assert out == "5|m3 m4 m5 m6 m7 "


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("{{ chatHistory | last | map: 'content' }}", "m7"),
        ("{{ chatHistory.last.content }}", "m7"),
        ("{{ art.stats.history | last | map: 'hp' }}", "3"),
        ("{{ chatHistory | last: 0 | size }}", "0"),
        ("{{ chatHistory | last: 100 | size }}", "8"),
        ("{{ missing | last: 3 | size }}", "0"),
        ("{{ 'abc' | last: 2 }}", ""),
        ("{{ (1..10) | last: 3 | join: ',' }}", "8,9,10"),
        ("{{ (1..10) | last }}", "10"),
    ],
)
def test_last_semantics(
    engine: TemplateEngine, context: dict[str, Any], source: str, expected: str
) -> None:
    assert engine.render(source, context) == expected


def test_last_negative_count_is_error(engine: TemplateEngine, context: dict[str, Any]) -> None:
    with pytest.raises(TemplateError, match="count"):
        engine.render("{{ chatHistory | last: -1 }}", context)


def test_transcript(engine: TemplateEngine, context: dict[str, Any]) -> None:
    assert engine.render("{{ chatHistory | last: 3 | transcript }}", context) == (
        "assistant: m5\nuser: m6\nassistant: m7"
    )
    out = engine.render(
        "{{ chatHistory | last: 2 | transcript: ' | ', user: 'Player', assistant: 'GM' }}", context
    )
    assert out == "Player: m6 | GM: m7"
    out = engine.render("{{ chatHistory | last: 2 | transcript: separator: '--' }}", context)
    assert out == "user: m6--assistant: m7"


def test_transcript_content_shapes(engine: TemplateEngine) -> None:
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {"role": "assistant", "content": None},
        "not a message",
        {"role": "system", "content": 42},
    ]
    assert (
        engine.render("{{ m | transcript }}", {"m": messages})
        == "user: ab\nassistant: \nsystem: 42"
    )
    assert (
        engine.render("{{ m | transcript }}", {"m": {"role": "user", "content": "x"}}) == "user: x"
    )
    assert engine.render("{{ nothing | transcript }}", {}) == ""


def test_lax_undefined_renders_empty(engine: TemplateEngine, context: dict[str, Any]) -> None:
    assert engine.render("[{{ nope }}][{{ art.nope.value }}]", context) == "[][]"


@pytest.mark.parametrize(
    "source",
    ["{{ nope }}", "{{ art.nope.value }}", "{% if nope %}x{% endif %}", "{{ nope | upcase }}"],
)
def test_strict_undefined_raises(
    engine: TemplateEngine, context: dict[str, Any], source: str
) -> None:
    with pytest.raises(TemplateError) as info:
        engine.render(source, context, strict_variables=True)
    assert info.value.code == "template_render_error"
    assert "undefined" in info.value.message
    assert info.value.details["line"] == 1


def test_strict_defined_renders(engine: TemplateEngine, context: dict[str, Any]) -> None:
    assert engine.render("{{ art.stats.value.hp }}", context, strict_variables=True) == "7"


def test_error_points_at_line_and_column(engine: TemplateEngine) -> None:
    with pytest.raises(TemplateError) as info:
        engine.render("line one\n  {{ x | no_such_filter }}", {"x": 1})
    err = info.value
    assert err.code == "template_render_error"
    assert "line 2, column 10" in err.message
    assert "no_such_filter" in err.message
    assert err.details["near"] == "no_such_filter"
    assert err.details["line"] == 2


@pytest.mark.parametrize(
    ("source", "near"),
    [
        ("Hello\n{% if x %}VIP", "{% if x %}"),
        ("Hello\n{% for m in xs %}{% if m %}{% endif %}{{ m }}", "{% for m in xs %}"),
        ("Hello\n{{ x | }}", "{{ x | }}"),
    ],
    ids=["unclosed-if", "unclosed-for", "empty-filter"],
)
def test_errors_liquid_places_nowhere_point_at_their_tag(
    engine: TemplateEngine, source: str, near: str
) -> None:
    with pytest.raises(TemplateError) as info:
        engine.parse(source)
    details = info.value.details
    assert (details["line"], details["column"], details["near"]) == (2, 1, near)
    assert "line 2, column 1" in info.value.message
    assert engine.problems(source) == [info.value.message]


def test_syntax_error_is_template_error(engine: TemplateEngine) -> None:
    with pytest.raises(TemplateError) as info:
        engine.render("{% for x in %}{% endfor %}")
    assert info.value.details["phase"] == "parse"
    assert isinstance(info.value.__cause__, Exception)


def test_parse_is_cached(engine: TemplateEngine, context: dict[str, Any]) -> None:
    source = "{{ art.stats.value.hp }}"
    first = engine.parse(source)
    for _ in range(5):
        engine.render(source, context)
    assert engine.parse(source) is first
    info = engine.cache_info()
    assert info.misses == 1
    assert info.hits == 6
    # Strictness is part of the key.
    assert engine.parse(source, strict_variables=True) is not first
    assert engine.cache_info().misses == 2


def test_parse_spy_counts_one_parse(
    context: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = TemplateEngine()
    env = engine._envs[False]
    calls: list[str] = []
    original = env.from_string

    def spy(source: str, *args: Any, **kwargs: Any) -> Any:
        calls.append(source)
        return original(source, *args, **kwargs)

    monkeypatch.setattr(env, "from_string", spy)
    for _ in range(10):
        engine.render("{{ run.id }}", context)
    assert calls == ["{{ run.id }}"]


def test_cache_is_bounded() -> None:
    engine = TemplateEngine(cache_size=3)
    for i in range(10):
        engine.render(f"{i}")
    assert engine.cache_info().currsize == 3
    engine.cache_clear()
    assert engine.cache_info() == (0, 0, 3, 0)


def test_no_loader_means_no_includes(engine: TemplateEngine) -> None:
    with pytest.raises(TemplateError, match="not found"):
        engine.render("{% include 'etc/passwd' %}")
    with pytest.raises(TemplateError, match="not found"):
        engine.render("{% render '/etc/passwd' %}")


def test_host_loader_enables_partials() -> None:
    engine = TemplateEngine(loader=DictLoader({"greet": "Hi {{ name }}"}))
    assert engine.render("{% render 'greet', name: who %}!", {"who": "Ann"}) == "Hi Ann!"


def test_limits_are_validated() -> None:
    with pytest.raises(ConfigError, match="TemplateLimits") as info:
        TemplateLimits(loop_iteration_limit=0)
    assert info.value.code == "config_error"
    assert info.value.details["field"] == "loop_iteration_limit"
    with pytest.raises(TypeError):
        TemplateLimits(65_536)  # type: ignore[call-arg]  # positional on purpose: keyword-only
    with pytest.raises(ConfigError):
        TemplateEngine(cache_size=0)
    with pytest.raises(AttributeError):
        TemplateLimits().timeout_seconds = 9  # type: ignore[misc]  # frozen: the point of the test


def test_non_string_source_is_template_error(engine: TemplateEngine) -> None:
    with pytest.raises(TemplateError):
        engine.render(123)  # type: ignore[arg-type]  # a wrong type on purpose


def test_python_exceptions_inside_render_are_translated(engine: TemplateEngine) -> None:
    with pytest.raises(TemplateError) as info:
        engine.render("{{ big }}", {"big": 10**5000})  # int -> str digit limit: ValueError
    assert not isinstance(info.value.__cause__, TemplateError)
    with pytest.raises(TemplateError):
        engine.render("{{ x | sort }}", {"x": [1, "a", None]})


def test_uniq_is_linear_and_standard(engine: TemplateEngine) -> None:
    assert engine.render("{{ x | uniq | join: ',' }}", {"x": [1, 2, 1, 3, 2]}) == "1,2,3"
    people = [{"n": "a"}, {"n": "b"}, {"n": "a"}]
    assert engine.render("{{ x | uniq: 'n' | size }}", {"x": people}) == "2"
    assert engine.render("{{ x | uniq | size }}", {"x": people}) == "2"
    assert engine.render("{{ (1..40000) | uniq | size }}") == "40000"


def test_problems_name_unknown_filters_with_their_position() -> None:
    engine = TemplateEngine()
    source = "ok {{ x | upcase }}\n{{ y | nosuch: 2 }} {{ h | last: 3 | transcript }}"
    assert engine.problems(source) == ["unknown filter 'nosuch' at line 2, column 8"]
    assert engine.problems("{{ a | b }}{{ c | b }}") == [
        "unknown filter 'b' at line 1, column 8",
        "unknown filter 'b' at line 1, column 19",
    ]


def test_problems_of_a_template_that_does_not_parse_are_its_parse_error() -> None:
    (problem,) = TemplateEngine().problems("line\n{% if %}")
    assert "line 2" in problem


def test_a_valid_template_has_no_problems() -> None:
    assert TemplateEngine().problems("{% for m in chatHistory %}{{ m.content }}{% endfor %}") == []
