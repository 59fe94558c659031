"""Hostile templates stop with TemplateError naming the limit hit, fast and in bounded memory."""

from __future__ import annotations

import time
import tracemalloc
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from liquid import DictLoader, Environment
from liquid.exceptions import LiquidError, LiquidSyntaxError

from opsrun.errors import TemplateError
from opsrun.kinds.liquid import TemplateEngine, TemplateLimits
from opsrun.kinds.liquid import _engine as liquid_engine

BIG = "{% assign big = 'xxxxxxxxxx' %}" + "{% assign big = big | append: big %}" * 16  # ~655k chars

# (id, source, the limit that must stop it)
HOSTILE: list[tuple[str, str, str]] = [
    # liquid's template lexer backtracks quadratically over whitespace before a closer.
    ("space-before-close-output", "{{ x" + " " * 60_000 + "}}", "max_space_before_close"),
    (
        "space-before-close-tag",
        "{% if x" + "\n" * 60_000 + "-%}{% endif %}",
        "max_space_before_close",
    ),
    ("huge-range-loop", "{% for i in (1..100000000) %}{% endfor %}", "loop_iteration_limit"),
    (
        "astronomic-range-loop",
        "{% for i in (1..99999999999999999999999) %}x{% endfor %}",
        "max_collection_length",
    ),
    (
        "nested-loops",
        "{% for a in (1..1000) %}{% for b in (1..1000) %}x{% endfor %}{% endfor %}",
        "loop_iteration_limit",
    ),
    (
        "tablerow-range",
        "{% tablerow i in (1..100000000) %}{{ i }}{% endtablerow %}",
        "loop_iteration_limit",
    ),
    (
        "liquid-tag-loop",
        "{% liquid\nfor i in (1..100000000)\necho i\nendfor %}",
        "loop_iteration_limit",
    ),
    (
        "output-flood",
        "{% for i in (1..40000) %}" + "y" * 100 + "{% endfor %}",
        "output_stream_limit",
    ),
    (
        "capture-doubling",
        "{% assign s = 'xxxxxxxx' %}{% for i in (1..64) %}"
        "{% capture s %}{{ s }}{{ s }}{% endcapture %}{% endfor %}",
        "output_stream_limit",
    ),
    (
        "append-doubling",
        "{% assign s = 'x' %}{% for i in (1..64) %}{% assign s = s | append: s %}{% endfor %}",
        "max_string_length",
    ),
    (
        "prepend-doubling",
        "{% assign s = 'x' %}{% for i in (1..64) %}{% assign s = s | prepend: s %}{% endfor %}",
        "max_string_length",
    ),
    (
        "replace-explosion",
        "{{ 'aaaaaaaaaa'" + " | replace: 'a', 'aaaaaaaaaa'" * 8 + " }}",
        "max_string_length",
    ),
    ("join-big-separator", BIG + "{{ (1..1000) | join: big }}", "max_string_length"),
    ("split-into-chars", BIG + "{{ big | split: '' | size }}", "max_collection_length"),
    ("range-join", "{{ (1..100000000) | join: ',' }}", "max_collection_length"),
    ("range-sort", "{{ (1..99999999999999999999999) | sort | first }}", "max_collection_length"),
    (
        "concat-doubling",
        "{% assign a = 'x,y' | split: ',' %}{% for i in (1..40) %}"
        "{% assign a = a | concat: a %}{% endfor %}",
        "max_collection_length",
    ),
    (
        "concat-refs-to-big-string",
        BIG + "{% assign a = big | split: '#' %}{% for i in (1..20) %}"
        "{% assign a = a | concat: a %}{% endfor %}{{ a }}",
        "max_string_length",
    ),
    (
        "integer-squaring",
        "{% assign x = 99999999999 %}{% for i in (1..40) %}"
        "{% assign x = x | times: x %}{% endfor %}",
        "max_integer_digits",
    ),
    (
        "url-encode-growth",
        BIG + "{{ big | replace: 'x', 'é' | url_encode | url_encode }}",
        "max_string_length",
    ),
    (
        "huge-offset",
        "{% for i in (1..1000000000000000000) offset: 999999999999999990 %}{{ i }}{% endfor %}",
        "max_total_loop_iterations",
    ),
    (
        "huge-offset-from-data",
        "{% assign n = 999999990 %}{% for i in (1..1000000000) offset: n %}{{ i }}{% endfor %}",
        "max_total_loop_iterations",
    ),
    (
        "huge-reversed-range",
        "{% for i in (1..1000000000) reversed limit: 3 %}{{ i }}{% endfor %}",
        "max_total_loop_iterations",
    ),
    (
        "huge-tablerow-offset",
        "{% tablerow i in (1..1000000000) offset: 999999990 %}{{ i }}{% endtablerow %}",
        "max_total_loop_iterations",
    ),
    ("long-date-input", BIG + "{{ '2024-01-01' | append: big | date: '%Y' }}", "max_date_input"),
    ("deep-blocks", "{% if true %}" * 200 + "{% endif %}" * 200, "block_nesting_limit"),
    (
        "deep-liquid-blocks",
        "{% liquid\n" + "if true\n" * 200 + "endif\n" * 200 + "%}",
        "block_nesting_limit",
    ),
    ("deep-expression", "{{ a" + "[a" * 1300 + "]" * 1300 + " }}", "recursion_depth"),
    ("long-expression", "{{ " + "(" * 20_000 + " }}", "max_expression_length"),
    ("quoted-ident-quadratic", "{{ " + '["' * 3000 + " }}", "max_expression_length"),
    ("huge-source", "x" * 70_000, "max_source_length"),
    (
        "many-sequential-loops",
        "{% for i in (1..40000) %}{% endfor %}" * 8,
        "max_total_loop_iterations",
    ),
    (
        "namespace-growth",
        BIG + "".join(f"{{% assign v{i} = big %}}" for i in range(10)),
        "local_namespace_limit",
    ),
]

LOADER_HOSTILE: list[tuple[str, str, dict[str, str], str]] = [
    ("include-self", "{% include 'a' %}", {"a": "{% include 'a' %}"}, "context_depth_limit"),
    (
        "include-fork",
        "{% include 'a' %}",
        {"a": "x{% include 'a' %}{% include 'a' %}"},
        "context_depth_limit",
    ),
    ("render-self", "{% render 'r' %}", {"r": "{% render 'r' %}"}, "context_depth_limit"),
    (
        "include-in-loop",
        "{% for i in (1..30000) %}{% include 'p' %}{% endfor %}",
        {"p": "{% for j in (1..30000) %}{% endfor %}"},
        "loop_iteration_limit",
    ),
    ("huge-partial", "{% include 'big' %}", {"big": "y" * 70_000}, "max_source_length"),
]


def _limit_of(err: TemplateError) -> str:
    assert err.code == "template_render_error"
    limit = err.details.get("limit")
    assert isinstance(limit, str), err.message
    assert limit in err.message or limit in {"recursion_depth"}
    return limit


# The count and size limits alone must stop every hostile template. The wall-clock budget
# is raised far above them so that machine load can never decide which limit fires first
# (the default 0.5 s could, e.g. for many-sequential-loops); test_render_timeout_* cover it.
COUNT_LIMITS_ONLY = TemplateLimits(timeout_seconds=120)


@pytest.mark.parametrize(("source", "limit"), [h[1:] for h in HOSTILE], ids=[h[0] for h in HOSTILE])
def test_hostile_template_names_its_limit(source: str, limit: str) -> None:
    engine = TemplateEngine(limits=COUNT_LIMITS_ONLY)
    start = time.process_time()
    with pytest.raises(TemplateError) as info:
        engine.render(source, {})
    cpu_seconds = time.process_time() - start
    hit = _limit_of(info.value)
    assert hit == limit, info.value.message
    # Safety bound only, in CPU time (load from other processes does not count): a limit
    # that fired only after unbounded work would take minutes.
    assert cpu_seconds < 10.0


@pytest.mark.parametrize(
    ("source", "partials", "limit"),
    [h[1:] for h in LOADER_HOSTILE],
    ids=[h[0] for h in LOADER_HOSTILE],
)
def test_hostile_partials(source: str, partials: dict[str, str], limit: str) -> None:
    engine = TemplateEngine(loader=DictLoader(partials), limits=COUNT_LIMITS_ONLY)
    with pytest.raises(TemplateError) as info:
        engine.render(source, {})
    assert _limit_of(info.value) == limit


@pytest.mark.parametrize("source", [h[1] for h in HOSTILE[::3]], ids=[h[0] for h in HOSTILE[::3]])
def test_hostile_memory_is_bounded(source: str) -> None:
    engine = TemplateEngine()
    tracemalloc.start()
    try:
        # Any limit may fire first here: tracemalloc slows everything down.
        with pytest.raises(TemplateError):
            engine.render(source, {})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024 * 1024


# A loop that only the clock can stop: the count limits are far above its length.
ENDLESS = "{% for i in (1..10000000) %}{% if i == 3 %}{% endif %}{{ i | plus: 1 }}{% endfor %}"
ONLY_THE_CLOCK = {
    "loop_iteration_limit": 10**8,
    "max_total_loop_iterations": 10**8,
    "output_stream_limit": 10**9,
}


class SteppingClock:
    """Stands in for the engine's monotonic clock: each reading is ``step`` later."""

    def __init__(self, step: float) -> None:
        self.step = step
        self.readings: list[float] = []

    def __call__(self) -> float:
        self.readings.append(len(self.readings) * self.step)
        return self.readings[-1]

    def latest(self) -> float:
        """The last reading (the CPU clock of a thread that got every moment of it)."""
        return self.readings[-1] if self.readings else 0.0


def test_render_timeout_is_cooperative(monkeypatch: pytest.MonkeyPatch) -> None:
    """The render checks the clock as it goes and stops at the first check past its budget.

    With a clock that moves a fixed step per reading the outcome does not depend on the
    machine's speed or load.
    """
    engine = TemplateEngine(limits=TemplateLimits(timeout_seconds=10, **ONLY_THE_CLOCK))
    engine.parse(ENDLESS)  # parsed (and cached) on the real clock
    clock = SteppingClock(0.25)
    monkeypatch.setattr(liquid_engine, "monotonic", clock)
    monkeypatch.setattr(liquid_engine, "thread_time", clock.latest)  # all of it CPU
    with pytest.raises(TemplateError) as info:
        engine.render(ENDLESS)
    assert _limit_of(info.value) == "timeout_seconds"
    assert "render took longer than 10s" in info.value.message
    # The first reading (0) set the deadline at 10; the first reading past it (10.25)
    # ended the render, 41 readings in: nowhere near the loop's 10 million iterations.
    assert clock.readings[0] == 0
    assert clock.readings[-1] == 10.25


def test_render_timeout_stops_an_endless_loop_on_the_real_clock() -> None:
    engine = TemplateEngine(limits=TemplateLimits(timeout_seconds=0.05, **ONLY_THE_CLOCK))
    with pytest.raises(TemplateError) as info:
        engine.render(ENDLESS)
    assert _limit_of(info.value) == "timeout_seconds"


def test_parse_timeout_is_cooperative(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = SteppingClock(1.0)
    monkeypatch.setattr(liquid_engine, "monotonic", clock)
    monkeypatch.setattr(liquid_engine, "thread_time", clock.latest)
    engine = TemplateEngine(limits=TemplateLimits(timeout_seconds=5))
    with pytest.raises(TemplateError) as info:
        engine.parse("{{ x }}" * 100)
    assert _limit_of(info.value) == "timeout_seconds"
    assert "parsing took longer than 5s" in info.value.message
    # Deadline at 0 + 5, one reading per token: the sixth token's reading stops it.
    assert clock.readings == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0]


def test_time_the_machine_spends_elsewhere_does_not_count(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a busy machine the wall clock runs far past the budget while the rendering
    thread itself gets little CPU time: the budget is the thread's CPU time."""
    wall = SteppingClock(1.0)
    cpu = SteppingClock(0.01)
    monkeypatch.setattr(liquid_engine, "monotonic", wall)
    monkeypatch.setattr(liquid_engine, "thread_time", cpu)
    engine = TemplateEngine(limits=TemplateLimits(timeout_seconds=5))
    source = "{% for i in (1..50) %}{{ i }}{% endfor %}"
    assert engine.render(source).startswith("12345")
    assert wall.readings[-1] > 50  # far past 5 s on the wall clock
    assert len(cpu.readings) > 2  # the CPU clock was read once the wall deadline passed
    assert cpu.readings[-1] < 5


def test_small_custom_limits() -> None:
    engine = TemplateEngine(
        limits=TemplateLimits(max_total_loop_iterations=10, output_stream_limit=20)
    )
    assert engine.render("{% for i in (1..10) %}{% endfor %}ok") == "ok"
    with pytest.raises(TemplateError) as info:
        engine.render("{% for i in (1..6) %}{% endfor %}{% for i in (1..6) %}{% endfor %}")
    assert _limit_of(info.value) == "max_total_loop_iterations"
    with pytest.raises(TemplateError) as info:
        engine.render("x" * 21)
    assert _limit_of(info.value) == "output_stream_limit"


def test_default_limits_allow_ordinary_work() -> None:
    engine = TemplateEngine(limits=COUNT_LIMITS_ONLY)  # every count limit at its default
    history = [{"role": "user", "content": "hello " * 50} for _ in range(500)]
    art = {f"t{i}": {"value": {"n": i}, "history": list(range(20)), "meta": {}} for i in range(50)}
    source = (
        "{% for pair in art %}{{ pair[0] }}={{ pair[1].value.n }};"
        "{% for h in pair[1].history %}{{ h }}{% endfor %}{% endfor %}"
        "{{ chatHistory | last: 200 | transcript }}"
    )
    out = engine.render(source, {"art": art, "chatHistory": history})
    assert out.count("user: ") == 200


# --- property: random templates render or fail with TemplateError, nothing else ------

_FRAGMENTS = st.sampled_from(
    [
        "{{ x }}",
        "{{ art.a.value }}",
        "{{ art.a.history | last: 2 | join: ',' }}",
        "{{ chatHistory | last: 3 | transcript }}",
        "{{ chatHistory | last }}",
        "{% for i in (1..5) %}",
        "{% for m in chatHistory %}",
        "{% endfor %}",
        "{% if x %}",
        "{% elsif y %}",
        "{% else %}",
        "{% endif %}",
        "{% assign y = x | append: x %}",
        "{% capture c %}",
        "{% endcapture %}",
        "{{ c | size }}",
        "{% case x %}{% when 1 %}",
        "{% endcase %}",
        "{% unless x %}",
        "{% endunless %}",
        "{{ x | times: 3 | plus: 'a' }}",
        "{{ x | split: '' | sort | uniq | join }}",
        "{{ x | replace: 'a', x }}",
        "{{ x | date: '%Y' }}",
        "{{ x | slice: -3, 2 }}",
        "{{ x | divided_by: 0 }}",
        "{{ x | modulo: 0 }}",
        "{{ x | concat: x }}",
        "{{ x | map: 'a' | compact | sum }}",
        "{% include x %}",
        "{% render 'p' %}",
        "{% cycle 'a', 'b' %}",
        "{% increment n %}",
        "{% break %}",
        "{% raw %}",
        "{% endraw %}",
        "{% comment %}",
        "{% endcomment %}",
        "{{",
        "}}",
        "{%",
        "%}",
        "|",
        "(1..",
        "text ",
        "\n",
    ]
)
_TEMPLATES = st.lists(st.one_of(_FRAGMENTS, st.text(max_size=8)), max_size=12).map("".join)
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
)
_VALUES = st.recursive(
    _SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.text(max_size=5), children, max_size=4)
    ),
    max_leaves=12,
)

_ENGINE = TemplateEngine(loader=DictLoader({"p": "{{ x }}"}))


# Drawing recursive values can be slow on a loaded machine; that is not a failure.
@settings(suppress_health_check=[HealthCheck.too_slow])
@given(source=_TEMPLATES, x=_VALUES, value=_VALUES, strict=st.booleans())
def test_random_templates_render_or_raise_template_error(
    source: str, x: Any, value: Any, strict: bool
) -> None:
    context = {
        "x": x,
        "art": {"a": {"value": value, "history": [value, x], "meta": {}}},
        "chatHistory": [{"role": "user", "content": x}, {"role": "assistant", "content": value}],
    }
    try:
        out: object = _ENGINE.render(source, context, strict_variables=strict)
    except TemplateError as err:
        out = err.code
        expected: type = TemplateError
    else:
        expected = str
    assert (expected is TemplateError and out == "template_render_error") or isinstance(out, str)


# One-line and multi-line output expressions, each over 40 characters in total.
_LONG_EXPRESSIONS = [
    "{{ x" + " | upcase" * 10 + " }}",
    "{{ x" + "\n | upcase" * 10 + " }}",
]


@pytest.mark.parametrize("expression", _LONG_EXPRESSIONS, ids=["one-line", "multi-line"])
@pytest.mark.parametrize(
    "before",
    ["", "{% liquid\necho 1 %}", "{% liquid\nassign a = 1 %}text", "{% liquid echo 1 %}"],
    ids=["alone", "after-liquid-tag", "after-liquid-tag-and-text", "after-one-line-liquid"],
)
def test_expression_length_holds_after_a_liquid_tag(before: str, expression: str) -> None:
    """Only the lines of a ``{% liquid %}`` tag are measured one by one; an output
    expression after one is measured whole."""
    engine = TemplateEngine(limits=TemplateLimits(max_expression_length=40))
    with pytest.raises(TemplateError) as info:
        engine.parse(before + expression)
    assert _limit_of(info.value) == "max_expression_length"


def test_liquid_tag_lines_are_measured_one_by_one() -> None:
    engine = TemplateEngine(limits=TemplateLimits(max_expression_length=40))
    source = "{% liquid\n" + "echo 'short line'\n" * 20 + "%}"
    assert engine.render(source) == "short line" * 20


# Tags and outputs never closed: liquid's lexer backtracks over each for minutes at 64 KB.
UNCLOSED = [
    ("long-tag-name", "{%" + "a" * 60_000, "%}", 1, 1),
    ("spaces-in-output", "text\n{{" + " " * 60_000, "}}", 2, 1),
    ("tags-in-a-comment", "{% comment %}" + "{%a " * 15_000, "%}", 1, 14),
    ("after-a-closed-one", "{{ x }}{% if x %}" + "{%" + "b" * 60_000, "%}", 1, 18),
]


@pytest.mark.parametrize(
    ("source", "closer", "line", "column"), [u[1:] for u in UNCLOSED], ids=[u[0] for u in UNCLOSED]
)
def test_unclosed_tags_and_outputs_fail_with_their_position(
    source: str, closer: str, line: int, column: int
) -> None:
    start = time.process_time()
    with pytest.raises(TemplateError) as info:
        TemplateEngine().parse(source)
    cpu_seconds = time.process_time() - start
    assert f"expected {closer!r}, found end of file" in info.value.message
    assert (info.value.details["line"], info.value.details["column"]) == (line, column)
    assert cpu_seconds < 10.0  # safety bound only: the old lexer path took minutes


@pytest.mark.parametrize(
    ("source", "rendered"),
    [
        ("{% raw %}{{ {% endraw %}ok", "{{ ok"),
        ("{{ '{%' }}", "{%"),
        ("{% assign x = '{{' %}{{ x }}", "{{"),
        ("{{ 'a'" + " " * liquid_engine.MAX_SPACE_BEFORE_CLOSE + "}}", "a"),
        ("{%- if true" + " " * liquid_engine.MAX_SPACE_BEFORE_CLOSE + "-%} b {%- endif -%}", "b"),
    ],
    ids=["raw-block", "in-output-string", "in-tag-string", "space-at-limit", "space-then-dash"],
)
def test_delimiters_inside_strings_and_raw_blocks_do_not_count(source: str, rendered: str) -> None:
    assert TemplateEngine().render(source) == rendered


_PIECES = ["{%", "%}", "{{", "}}", "-", " ", "\n", "a", "'", '"', "|", "raw", "endraw", "if"]
_PIECES += ["endif", "comment", "endcomment", "doc", "enddoc", "liquid", "#", "{", "}", "%"]


@given(source=st.lists(st.sampled_from(_PIECES), max_size=40).map("".join))
def test_the_delimiter_check_refuses_only_what_liquid_refuses(source: str) -> None:
    try:
        liquid_engine._check_delimiters(source)
    except LiquidSyntaxError:
        with pytest.raises(LiquidError):
            Environment().from_string(source)
