"""Filter size checks see the arguments a filter receives, by position or by keyword.

Each hostile call here is refused with ``max_string_length`` *before* the filter runs:
the data holds probes that count how often they are turned into text, which the filter
would do for every item, so a count of zero shows the work was never started.
"""

from __future__ import annotations

from typing import Any

import pytest

from opsrun.errors import TemplateError
from opsrun.kinds.liquid import TemplateEngine, TemplateLimits

LIMIT = 1_000
SMALL = TemplateLimits(max_string_length=LIMIT, timeout_seconds=60)
BIG = "x" * LIMIT  # as long as a filter argument may be; joined 50 times, far over


class Probe:
    """An item whose text form is short, and which counts how often it is built."""

    conversions = 0

    def __str__(self) -> str:
        Probe.conversions += 1
        return "p"

    __repr__ = __str__


class ProbeText(str):
    """A string whose ``replace`` counts its calls (liquid's ``replace`` calls it)."""

    replaced = 0

    def replace(self, old: str, new: str, count: Any = -1) -> str:
        ProbeText.replaced += 1
        return str.replace(self, old, new, count)


@pytest.fixture(autouse=True)
def _reset_probes() -> None:
    Probe.conversions = 0
    ProbeText.replaced = 0


def _refused(source: str, context: dict[str, Any]) -> TemplateError:
    engine = TemplateEngine(limits=SMALL)
    with pytest.raises(TemplateError) as info:
        engine.render(source, context)
    assert info.value.code == "template_render_error"
    assert info.value.details["limit"] == "max_string_length"
    return info.value


ITEMS = {"items": [Probe() for _ in range(50)], "big": BIG}
# 20 messages weigh less than LIMIT: only the separator or the labels make them too big.
MESSAGES = {"chat": [{"role": "user", "content": Probe()} for _ in range(20)], "big": BIG}


@pytest.mark.parametrize(
    ("source", "context"),
    [
        ("{{ items | join: big }}", ITEMS),
        ("{{ items | join: separator: big }}", ITEMS),
        ("{{ chat | transcript: big }}", MESSAGES),
        ("{{ chat | transcript: separator: big }}", MESSAGES),
        ("{{ chat | transcript: user: big }}", MESSAGES),
        ("{{ chat | transcript: ', ', assistant: 'a', user: big }}", MESSAGES),
        ("{{ 'x' | append: arg: items }}", {"items": [BIG, Probe()]}),
    ],
    ids=[
        "join-positional",
        "join-keyword",
        "transcript-positional",
        "transcript-keyword-separator",
        "transcript-role-label",
        "transcript-label-and-separator",
        "collection-as-keyword-argument",
    ],
)
def test_refused_before_the_filter_builds_its_text(source: str, context: dict[str, Any]) -> None:
    error = _refused(source, context)
    assert Probe.conversions == 0
    assert "would build about" in error.message  # the estimate, not the result


@pytest.mark.parametrize(
    "tail",
    [
        "replace: 'a', big",
        "replace: 'a', sub: big",
        "replace: seq: 'a', sub: big",
        "replace_first: 'a', sub: big",
    ],
)
def test_replace_is_refused_before_it_runs(tail: str) -> None:
    error = _refused("{{ s | " + tail + " }}", {"s": ProbeText("a" * 50), "big": BIG})
    assert ProbeText.replaced == 0
    assert "would build about" in error.message


def test_keyword_arguments_still_work_within_the_limits() -> None:
    engine = TemplateEngine(limits=SMALL)
    context = {"xs": ["a", "b", "c"], "chat": [{"role": "user", "content": "hi"}] * 2}
    assert engine.render("{{ xs | join: separator: '-' }}", context) == "a-b-c"
    assert engine.render("{{ 'banana' | replace: seq: 'a', sub: 'o' }}") == "bonono"
    assert engine.render("{{ 'a,b' | split: sep: ',' | size }}") == "2"
    out = engine.render("{{ chat | transcript: separator: ' / ', user: 'Player' }}", context)
    assert out == "Player: hi / Player: hi"
