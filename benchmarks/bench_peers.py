"""opsrun's fixed cost per run, and five-step runs, against Haystack and LangGraph.

    python benchmarks/bench_peers.py [--quick] [--profile]

Needs the ``peers`` extra (``pip install -e '.[peers]'``) for the peers; without it
opsrun is measured alone. ``--profile`` prints instead where an empty run's CPU time
goes (cProfile: own time per package, and the 25 functions with the most).

Every figure is CPU time of this process per call (``time.process_time``: the machine
is shared, and time spent on other processes does not count). The sides of a comparison
are measured in rounds, taking turns in a rotating order, so a slow patch of the machine
hits all of them alike; printed are the median over rounds with its min-max range, and
the ratio opsrun / peer of each round (median, range). Everything runs in one asyncio
event loop (anyio's default backend), and each call's input is built before the clock
starts. What exists before measuring (imported modules, runners, pipelines, graphs) is
frozen out of the garbage collector's passes (``gc.freeze``), so a collection that falls
in a call costs whichever side the same, not a walk over every imported module.

1. Empty run: a profile of no operations [target: opsrun <= 300 µs per run], against a
   one-component Haystack pipeline and a one-node LangGraph graph. The one peer step
   stands in for the main LLM call every opsrun run makes (an empty Haystack pipeline
   returns almost at once, and would measure nothing).
2. Five independent no-op operations, all in the ``before_main_llm`` hook, against five
   unconnected components and five nodes fanned out from ``START``
   [target: opsrun / Haystack <= 1.0x; LangGraph reported].
3. A chain of five, each operation depending on the previous one, against a linear
   pipeline and a linear graph (reported).

What one call does, per side:

- opsrun, ``await runner.run(request)`` with in-memory stores and a main LLM that answers
  "OK" at once: loads the profile (its validation is cached), holds the chat branch,
  stores the user message, claims and stores a run record, emits events (run started,
  phase changes, each operation's start and finish) that a pump task stores in order,
  runs the operations in anyio task groups, assembles the prompt, calls the main LLM
  (two stream items), stores the assistant message, and stores the finished run with
  its operation records. Each run starts a new chat (a history of one turn), and its
  records are deleted after it, outside the clock, as in ``bench_runner.py``.
- Haystack, ``await pipeline.run_async(data, concurrency_limit=n)``: ``AsyncPipeline``
  on 2.x, ``Pipeline`` on 3.x (where the async path moved); the line printed names
  which. The async path is the equivalent of opsrun's: a coroutine in the caller's
  event loop, each component with a ``run_async`` coroutine runs as an asyncio task,
  concurrently where the graph allows (a component without ``run_async`` is sent to a
  thread). ``concurrency_limit`` lets all ``n`` run at once, as opsrun does (the
  default is 4). Per call it warms up and validates, deep-copies each component's
  inputs and outputs, and opens tracing spans (no tracer configured). It stores
  nothing and calls no LLM. Telemetry is off (``HAYSTACK_TELEMETRY_ENABLED=False``,
  set here unless already set); it would otherwise post to PostHog from this process.
- LangGraph, ``await graph.ainvoke(state)`` on a compiled ``StateGraph`` with async
  nodes and no checkpointer: nothing is stored and no LLM is called. ``ainvoke``
  rather than ``invoke``: opsrun's run is a coroutine in an event loop too, whereas
  ``invoke`` cannot run async nodes and runs a step's parallel sync nodes in a thread
  pool, which costs more CPU time (about 1.5x that of ``ainvoke`` for the five
  parallel nodes here, with LangGraph 1.2). Each node appends its index to a list
  channel with an ``operator.add`` reducer (parallel nodes may not write one plain key).

No step does any work: an opsrun operation returns ``OperationResult.done()``, a Haystack
component returns its input (``{"value": value}``), a LangGraph node its index. So the
peers do the orchestration alone, while opsrun's figure also carries its storage
and its main LLM step; the five-step peers get no sixth step for the main LLM.
"""

from __future__ import annotations

import cProfile
import gc
import importlib
import importlib.metadata
import itertools
import operator
import os
import re
import statistics
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Annotated, Any, Protocol, TypedDict, TypeVar

import anyio
from _quiet import QuietMainLlm  # the sibling module (script dir is on path)

from opsrun import (
    Hook,
    InMemoryStores,
    OperationCatalog,
    OperationConfig,
    OperationContext,
    OperationProfile,
    OperationResult,
    ProfileOperation,
    Runner,
    RunRequest,
)

QUICK = "--quick" in sys.argv
STEPS = 5
"""Operations, components or nodes of the five-step comparisons."""

BUDGET = "[target <= 300 µs]"
"""The empty run's budget."""

CPU = time.process_time
"""CPU time of this process: the clock of every figure here."""


# opsrun ------------------------------------------------------------------------------


async def no_op(ctx: OperationContext) -> OperationResult:
    return OperationResult.done()


def build(n: int, *, chain: bool = False) -> tuple[Runner, InMemoryStores]:
    """A runner whose profile ``bench`` has ``n`` no-op operations before the main LLM."""
    stores = InMemoryStores()
    catalog = OperationCatalog()
    entries = []
    for i in range(n):
        catalog.function(f"op{i}", name=f"Op {i}")(no_op)
        deps = (f"op{i - 1}",) if chain and i > 0 else ()
        config = OperationConfig(hooks=(Hook.BEFORE_MAIN_LLM,), order=i, depends_on=deps)
        entries.append(ProfileOperation(operation_id=f"op{i}", config=config))
    profile = OperationProfile(
        profile_id="bench",
        name="bench",
        operation_profile_session_id="s",
        operations=tuple(entries),
    )
    anyio.run(stores.profiles.save_profile, profile)
    return Runner(catalog=catalog, stores=stores, main_llm=QuietMainLlm()), stores


_chat_ids = itertools.count()


def request() -> RunRequest:
    """A generate request in a new chat, so every history stays one turn."""
    chat = f"c{next(_chat_ids)}"
    return RunRequest(trigger="generate", chat_id=chat, profile_id="bench", user_message="hi")


async def time_runs(runner: Runner, stores: InMemoryStores, repeats: int) -> float:
    """Median CPU seconds per run; each run's records are deleted right after it."""
    samples = []
    for _ in range(repeats):
        req = request()
        t0 = CPU()
        result = await runner.run(req)
        samples.append(CPU() - t0)
        await stores.runs.delete_run(result.run.run_id)
    return statistics.median(samples)


# The peers ---------------------------------------------------------------------------


async def time_calls(call: Callable[[], Awaitable[object]], repeats: int) -> float:
    """Median CPU seconds per call."""
    samples = []
    for _ in range(repeats):
        t0 = CPU()
        await call()
        samples.append(CPU() - t0)
    return statistics.median(samples)


def optional_module(name: str) -> Any:
    """The module ``name``, or None when it is not installed.

    Typed ``Any`` on purpose: the peers are used through their public names at run time,
    so this file type-checks the same with and without the ``peers`` extra.
    """
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


@dataclass(frozen=True)
class Side:
    """One side of a comparison: what it is, and how to time ``repeats`` calls of it."""

    name: str
    time: Callable[[int], Awaitable[float]]
    """Returns the median CPU seconds per call over ``repeats`` calls."""
    peer: str = ""
    """The peer's short name in ratios; empty for opsrun."""
    target: str = ""
    """Printed at the end of the side's line (``[target <= 1.0x]``)."""


_Method = TypeVar("_Method", bound=Callable[..., object])


class _MethodDecorator(Protocol):
    """A decorator that returns the method it decorates (as Haystack's ``output_types``)."""

    def __call__(self, method: _Method, /) -> _Method: ...


def _haystack_step(haystack: Any) -> Any:
    """The trivial component: passes its input on, from a coroutine."""
    component = haystack.component
    outputs: _MethodDecorator = component.output_types(value=int)

    @component
    class Step:
        @outputs
        def run(self, value: int) -> dict[str, int]:
            return {"value": value}

        @outputs
        async def run_async(self, value: int) -> dict[str, int]:
            return {"value": value}

    return Step


class HaystackPeer:
    """Pipelines of trivial async components."""

    def __init__(self, haystack: Any) -> None:
        # 2.x has the async path in AsyncPipeline; 3.x moved it into Pipeline.
        pipelines = importlib.import_module("haystack.core.pipeline")
        self._pipeline = getattr(pipelines, "AsyncPipeline", None) or pipelines.Pipeline
        self._step = _haystack_step(haystack)
        version = importlib.metadata.version("haystack-ai")
        self.name = f"Haystack {version} {self._pipeline.__name__}.run_async"

    def side(self, n: int, *, chain: bool = False, target: str = "") -> Side:
        pipeline = self._pipeline()
        for i in range(n):
            pipeline.add_component(f"s{i}", self._step())
        for i in range(1, n if chain else 0):
            pipeline.connect(f"s{i - 1}.value", f"s{i}.value")
        data = {"s0": {"value": 1}} if chain else {f"s{i}": {"value": 1} for i in range(n)}
        call = partial(pipeline.run_async, data, concurrency_limit=n)
        shape = "linear, " if chain else ""
        label = f"{self.name}, {shape}{n} component{'s' if n > 1 else ''}"
        return Side(label, partial(time_calls, call), peer="Haystack", target=target)


class Trail(TypedDict):
    """The LangGraph state: the indexes of the nodes that ran."""

    seen: Annotated[list[int], operator.add]


def _langgraph_node(index: int) -> Callable[[Trail], Awaitable[dict[str, list[int]]]]:
    async def node(state: Trail) -> dict[str, list[int]]:
        return {"seen": [index]}

    return node


class LangGraphPeer:
    """Compiled state graphs of trivial async nodes."""

    def __init__(self, graph: Any) -> None:
        self._graph = graph
        self.name = f"LangGraph {importlib.metadata.version('langgraph')} ainvoke"

    def side(self, n: int, *, chain: bool = False) -> Side:
        start, end = self._graph.START, self._graph.END
        builder = self._graph.StateGraph(Trail)
        names = [f"n{i}" for i in range(n)]
        for i, name in enumerate(names):
            builder.add_node(name, _langgraph_node(i))
        if chain:
            for before, after in itertools.pairwise([start, *names, end]):
                builder.add_edge(before, after)
        else:
            for name in names:
                builder.add_edge(start, name)
                builder.add_edge(name, end)
        call = partial(builder.compile().ainvoke, {"seen": []})
        shape = "linear, " if chain else ""
        label = f"{self.name}, {shape}{n} node{'s' if n > 1 else ''}"
        return Side(label, partial(time_calls, call), peer="LangGraph")


def load_peers() -> tuple[HaystackPeer | None, LangGraphPeer | None]:
    """The peers that are installed; prints one line when one is missing."""
    # Before Haystack is imported: it reads the switch once.
    os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
    haystack = optional_module("haystack")
    graph = optional_module("langgraph.graph")
    found = (("haystack-ai", haystack), ("langgraph", graph))
    missing = [name for name, module in found if module is None]
    if missing:
        print(
            f"{' and '.join(missing)} not installed: measuring without "
            f"{'it' if len(missing) == 1 else 'them'}; install the peers extra "
            "(pip install -e '.[peers]') to compare"
        )
    return (
        HaystackPeer(haystack) if haystack is not None else None,
        LangGraphPeer(graph) if graph is not None else None,
    )


# Measuring and reporting -------------------------------------------------------------


async def measure(sides: Sequence[Side], rounds: int, repeats: int) -> list[list[float]]:
    """Per side, its median CPU seconds per call of each round, the sides interleaved."""
    for side in sides:  # warm-up, not recorded
        await side.time(repeats)
    samples: list[list[float]] = [[] for _ in sides]
    for r in range(rounds):
        for k in range(len(sides)):
            index = (r + k) % len(sides)
            gc.collect()
            samples[index].append(await sides[index].time(repeats))
    return samples


def report(title: str, sides: Sequence[Side], samples: list[list[float]]) -> None:
    """One line per side; the first side is opsrun, the others are compared with it."""
    rounds = len(samples[0])
    print(f"{title} (CPU µs per call, median of {rounds} rounds [min-max]):")
    width = max(len(side.name) for side in sides)
    for side, times in zip(sides, samples, strict=True):
        us = sorted(t * 1e6 for t in times)
        spread = f"[{us[0]:.0f}-{us[-1]:.0f}]"
        line = f"  {side.name:{width}s} {statistics.median(us):5.0f} µs {spread:11s}"
        if side.peer:
            ratios = sorted(o / p for o, p in zip(samples[0], times, strict=True))
            line += (
                f"  opsrun / {side.peer} {statistics.median(ratios):4.2f}x "
                f"[{ratios[0]:.2f}-{ratios[-1]:.2f}]"
            )
        print(f"{line}  {side.target}".rstrip())


def compare(haystack: HaystackPeer | None, langgraph: LangGraphPeer | None) -> None:
    rounds, repeats = (5, 20) if QUICK else (21, 100)
    n = STEPS
    empty = partial(time_runs, *build(0))
    fan = partial(time_runs, *build(n))
    chain = partial(time_runs, *build(n, chain=True))
    scenarios: list[tuple[str, list[Side]]] = [
        ("empty run", [Side("opsrun Runner.run, no operations", empty, target=BUDGET)]),
        (f"{n} independent steps", [Side(f"opsrun Runner.run, {n} operations", fan)]),
        (f"{n}-step chain", [Side(f"opsrun Runner.run, {n}-long chain", chain)]),
    ]
    if haystack is not None:
        scenarios[0][1].append(haystack.side(1))
        scenarios[1][1].append(haystack.side(n, target="[target <= 1.0x]"))
        scenarios[2][1].append(haystack.side(n, chain=True))
    if langgraph is not None:
        scenarios[0][1].append(langgraph.side(1))
        scenarios[1][1].append(langgraph.side(n))
        scenarios[2][1].append(langgraph.side(n, chain=True))
    # Everything built so far (imports, runners, pipelines, graphs) is left out of the
    # collector's passes: a collection during a call then costs any side the same.
    gc.freeze()
    for title, sides in scenarios:
        report(title, sides, anyio.run(measure, sides, rounds, repeats))


# Where the empty run's time goes -----------------------------------------------------


def profile_empty_run() -> None:
    """cProfile of empty runs: own time per package, and the 25 functions with the most.

    The profiler's own cost per function call inflates every figure; read the shares.
    """
    runner, stores = build(0)
    runs = 500 if QUICK else 3_000
    profiler = cProfile.Profile()

    async def go() -> None:
        for _ in range(runs):
            req = request()
            profiler.enable()
            result = await runner.run(req)
            profiler.disable()
            await stores.runs.delete_run(result.run.run_id)

    anyio.run(go)
    profiler.create_stats()
    # Per function: (primitive calls, calls, own time, cumulative time, callers).
    stats = profiler.stats
    total = sum(row[2] for row in stats.values())
    print(f"empty run under cProfile: {total / runs * 1e6:.0f} µs per run, {runs} runs")
    packages: Counter[str] = Counter()
    for (path, _, func), row in stats.items():
        packages[_package(path, func)] += row[2]
    shares = ", ".join(f"{name} {own / total:.0%}" for name, own in packages.most_common(8))
    print(f"own time by package: {shares}")
    print(f"{'own µs':>7} {'share':>6} {'cum µs':>7} {'calls':>6}  function")
    top = sorted(stats.items(), key=lambda item: item[1][2], reverse=True)[:25]
    for (path, line, func), (_, calls, own, cum, _) in top:
        where = f"{'/'.join(Path(path).parts[-3:])}:{line}({func})" if line else func
        print(
            f"{own / runs * 1e6:7.1f} {own / total:6.1%} {cum / runs * 1e6:7.1f} "
            f"{calls / runs:6.1f}  {where}"
        )


_STDLIB = f"python{sys.version_info.major}.{sys.version_info.minor}"


def _package(path: str, func: str) -> str:
    """The top-level package of a profiled function (``opsrun``, ``anyio``, ``asyncio``)."""
    if path == "~":  # C code: "<method 'validate_python' of 'pydantic_core.….SchemaValidator' …>"
        owner = re.search(r"of '(\w+)\.", func)
        return owner[1] if owner else "builtins"
    parts = Path(path).parts
    for anchor in ("site-packages", "src", _STDLIB):
        if anchor in parts[:-1]:
            return Path(parts[len(parts) - parts[::-1].index(anchor)]).stem
    return Path(path).stem


if __name__ == "__main__":
    if "--profile" in sys.argv:
        profile_empty_run()
    else:
        compare(*load_peers())
