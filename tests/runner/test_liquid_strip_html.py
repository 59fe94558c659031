"""``strip_html``: liquid's results on ordinary HTML, in one linear pass under the budget."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st
from liquid import Environment

from opsrun.errors import TemplateError
from opsrun.kinds.liquid import TemplateEngine, TemplateLimits
from opsrun.kinds.liquid import _engine as liquid_engine

_LIQUID = Environment().from_string("{{ s | strip_html }}")  # python-liquid's own filter
_ENGINE = TemplateEngine()


def liquid_strip_html(text: str) -> str:
    return _LIQUID.render(s=text)


def strip_html(text: str, engine: TemplateEngine = _ENGINE) -> str:
    return engine.render("{{ s | strip_html }}", {"s": text})


SAMPLES = [
    "plain text, no markup",
    "<p>Hello <b>world</b>!</p>",
    '<a href="https://example.com/?a=1&amp;b=2" title="x > y">link</a> after',
    "<p class='x'>it's</p><br/><img src=\"a.png\" /><hr>",
    "<!DOCTYPE html><html><head><title>T</title></head><body>Body</body></html>",
    "before<!-- a comment with <b>tags</b> and > signs -->after",
    "<script>if (a < b && c > d) { x = '</p>'; }</script>visible",
    "<STYLE type='text/css'>p > a { color: red }</STYLE>text",
    "<script src='x.js'/>kept",
    "a < b and c > d, 3<4",
    "&amp; &lt;tag&gt; &#39;quoted&#39; &#x27;hex&#x27; &nbsp;",
    "<?xml version='1.0'?><root>x</root>",
    "<![CDATA[ a < b ]]>after",
    "<p>unterminated <b",
    '<div\n  class="multi\n line">multi-line tag</div>',
    "x <!-- never closed > y",
]


@pytest.mark.parametrize("text", SAMPLES)
def test_ordinary_html_gives_liquids_result(text: str) -> None:
    assert strip_html(text) == liquid_strip_html(text)


_WORDS = st.text(alphabet="abc XY,.!?\n'\"=/;:-", min_size=1, max_size=8)
_NAMES = st.sampled_from(["p", "b", "div", "a", "span", "br", "img", "H1"])
_VALUES = st.one_of(
    st.text(alphabet="abc >'=/< ", max_size=6).map(lambda t: f'"{t}"'),
    st.text(alphabet='abc >"=/< ', max_size=6).map(lambda t: f"'{t}'"),
    st.text(alphabet="abc123-", min_size=1, max_size=5),
)
_ATTRIBUTES = st.lists(
    st.tuples(st.sampled_from(["href", "class", "title", "data-x"]), _VALUES).map(
        lambda a: f" {a[0]}={a[1]}"
    ),
    max_size=3,
).map("".join)
_START_TAGS = st.tuples(_NAMES, _ATTRIBUTES, st.sampled_from([">", "/>", " />", " >"])).map(
    "<{0[0]}{0[1]}{0[2]}".format
)
_END_TAGS = _NAMES.map("</{}>".format)
_COMMENTS = st.text(alphabet="abc <>!'\"", max_size=10).map("<!--{}-->".format)
_RAW_ELEMENTS = st.tuples(
    st.sampled_from(["script", "style", "SCRIPT"]),
    _ATTRIBUTES,
    st.text(alphabet="abc <>&'\"=;{}()", max_size=15),
).map(lambda r: f"<{r[0]}{r[1]}>{r[2]}</{r[0].lower()}>")
_OTHERS = st.sampled_from(
    [
        *("&amp;", "&lt;", "&#39;", "&#x27;", "& ", "a < b", "3<4", "x > y", "< ", ">"),
        *("<!DOCTYPE html>", "<?xml version='1.0'?>", "<![CDATA[ a < b ]]>", "<br>"),
    ]
)
TAG_SOUP = st.lists(
    st.one_of(_WORDS, _START_TAGS, _END_TAGS, _COMMENTS, _RAW_ELEMENTS, _OTHERS), max_size=15
).map("".join)


@given(TAG_SOUP)
def test_tag_soup_gives_liquids_result(text: str) -> None:
    assert strip_html(text) == liquid_strip_html(text)


# Inputs on which liquid's strip_html (html.parser) takes quadratic time: seconds for a
# chat message of a few tens of kilobytes. Each family's result is checked against
# liquid's on a short instance and then computed, whole, for a long one.
PATHOLOGICAL: dict[str, tuple[Callable[[int], str], Callable[[int], str]]] = {
    "unterminated-tags": (lambda n: ">" + "<a " * n, lambda n: ">" + "<a " * n),
    "unterminated-attributes": (lambda n: ">" + "<a" + " b" * n, lambda n: ">" + "<a" + " b" * n),
    "end-tag-openings": (lambda n: ">" + "</" * n, lambda n: ">" + "</" * n),
    "unclosed-quotes": (lambda n: ">" + '<a x="' * n, lambda n: ">" + '<a x="' * n),
    "unclosed-script": (lambda n: "x<script>" + "</" * n, lambda n: "x"),
    "comment-openings": (lambda n: "<!-- >" * n, lambda n: ""),
}


@pytest.mark.parametrize("family", sorted(PATHOLOGICAL))
def test_pathological_input_is_stripped_whole(family: str) -> None:
    make, expected = PATHOLOGICAL[family]
    assert liquid_strip_html(make(8)) == expected(8)
    text = make(20_000)
    # Far beyond what the quadratic filter finishes in reasonable time; the budget and
    # the string limit are not what stops it.
    engine = TemplateEngine(limits=TemplateLimits(timeout_seconds=600))
    assert strip_html(text, engine) == expected(20_000)


class SteppingClock:
    """Stands in for the engine's clocks: each reading is one second later."""

    def __init__(self) -> None:
        self.readings = 0

    def __call__(self) -> float:
        self.readings += 1
        return float(self.readings)


def test_one_strip_html_call_is_stopped_by_the_time_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The filter checks the render's budget as it goes: a long call on a large text is
    stopped within it, not after it (with a clock that moves one second per reading)."""
    engine = TemplateEngine(limits=TemplateLimits(timeout_seconds=10))
    source = "{{ s | strip_html }}"
    engine.parse(source)  # parsed on the real clock
    clock = SteppingClock()
    monkeypatch.setattr(liquid_engine, "monotonic", clock)
    monkeypatch.setattr(liquid_engine, "thread_time", clock)
    with pytest.raises(TemplateError) as info:
        engine.render(source, {"s": "<b>x</b>" * 5_000})
    assert info.value.details["limit"] == "timeout_seconds"
    assert clock.readings < 100  # stopped early: the text has 10 000 tags
