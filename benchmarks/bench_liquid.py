"""Cost of the sandbox: TemplateEngine.render vs a bare python-liquid render.

Renders one cached template against 50 artifacts and 200 history messages, with the
opsrun engine (limits, guarded filters, deadline checks) and with a plain
``liquid.Environment`` parse-once template, and prints both timings and their ratio.
The target is a ratio of at most 3. Timings are CPU time of this process
(``time.process_time``), the best of interleaved rounds.

Run: ``.venv/bin/python benchmarks/bench_liquid.py``
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from liquid import Environment

from opsrun.kinds.liquid import TemplateEngine

TEMPLATE = """\
World state:
{% for pair in art %}- {{ pair[0] }} (v{{ pair[1].meta.version }}): {{ pair[1].value.summary | truncate: 60 }}
  hp={{ pair[1].value.hp | plus: 0 }} previous={{ pair[1].history | size }}{% if pair[1].history.size > 0 %} last={{ pair[1].history | first | map: 'hp' }}{% endif %}
{% endfor %}
Recent conversation:
{% for m in chatHistory | last: 20 %}{{ m.role | upcase }}: {{ m.content | strip | truncate: 200 }}
{% endfor %}
{{ chatHistory | last: 5 | map: 'content' | join: ' / ' }}
Messages so far: {{ chatHistory.size }}; run {{ run.id }}.
"""  # noqa: E501

# The bare environment has no `transcript`; `last: 20` is spelled with `slice` there.
BARE_TEMPLATE = TEMPLATE.replace(
    "{% for m in chatHistory | last: 20 %}",
    "{% assign tail = chatHistory | slice: -20, 20 %}{% for m in tail %}",
).replace("chatHistory | last: 5 |", "chatHistory | slice: -5, 5 |")
TEMPLATE = TEMPLATE.replace(
    "{% for m in chatHistory | last: 20 %}",
    "{% assign tail = chatHistory | last: 20 %}{% for m in tail %}",
)


def make_context() -> dict[str, Any]:
    art = {
        f"tag{i}": {
            "value": {"summary": f"artifact {i} " + "lorem ipsum " * 10, "hp": i},
            "history": [{"hp": i - j} for j in range(5)],
            "meta": {"version": i},
        }
        for i in range(50)
    }
    history = [
        {
            "role": "user" if i % 2 == 0 else "assistant",
            "content": f"  message {i} " + "words " * 30,
        }
        for i in range(200)
    ]
    return {"art": art, "chatHistory": history, "run": {"id": "run-1"}}


def best_of(fns: list[Callable[[], str]], repeat: int = 15, number: int = 10) -> list[float]:
    """Per-call CPU time of each function: best of ``repeat`` interleaved rounds (as timeit)."""
    best = [float("inf")] * len(fns)
    for fn in fns:
        fn()  # warm up
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            start = time.process_time()
            for _ in range(number):
                fn()
            best[i] = min(best[i], (time.process_time() - start) / number)
    return best


def main() -> None:
    context = make_context()
    engine = TemplateEngine()
    bare = Environment().from_string(BARE_TEMPLATE)

    ours_out = engine.render(TEMPLATE, context)
    bare_out = bare.render(**context)
    assert ours_out == bare_out, "the two templates must produce the same text"

    ours, plain = best_of(
        [lambda: engine.render(TEMPLATE, context), lambda: bare.render(**context)]
    )
    ratio = ours / plain
    print(f"output: {len(ours_out)} chars, 50 artifacts, 200 history messages")
    print("CPU time per render (time.process_time):")
    print(f"bare python-liquid render : {plain * 1e3:8.3f} ms")
    print(f"opsrun TemplateEngine     : {ours * 1e3:8.3f} ms")
    print(f"ratio                     : {ratio:8.2f}x (target <= 3x)")
    print(f"parse cache               : {engine.cache_info()}")


if __name__ == "__main__":
    main()
