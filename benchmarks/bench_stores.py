"""Turns per second and latency per turn on each store, against LangGraph's checkpointers.

    python benchmarks/bench_stores.py [--quick] [--profile]

A turn is one ``runner.run`` of a profile of five no-op operations in ``before_main_llm``
and a main LLM that answers "OK" at once and keeps no request log (``QuietMainLlm`` of
``_quiet.py``). It runs on opsrun's in-memory stores, on SQLite (a file in a
temporary directory) and on PostgreSQL (when ``opsrun.stores.postgres`` imports and the
server at ``OPSRUN_TEST_POSTGRES_DSN`` answers; default
``postgresql://postgres@127.0.0.1:5432/test``; a schema of its own, dropped afterwards),
in two modes:

- sequential: one chat, turn after turn (a new chat of :data:`SEQUENTIAL_TURNS` turns
  each round, so every round measures the same chat lengths);
- concurrent: :data:`CHATS` chats at once, one task per chat, each running
  :data:`CONCURRENT_TURNS` turns one after another.

Printed per store and mode: turns per second (turns over the wall time of the round: the
point is how long turns take, waiting on the database included), the median and 99th
percentile of the wall time of one turn (over every turn of every round), and the CPU
time of this process per turn (``time.process_time``: the event loop and every worker
thread, but not the PostgreSQL server's processes). Targets:
opsrun on SQLite >= 1,000 turns/s sequential (on the 2-core machine these figures were
first taken on), and opsrun on PostgreSQL >= LangGraph on PostgreSQL (turns/s). A last
line prints the SQLite target's floor with the stores' threads: the in-memory turn (p50)
plus two empty write jobs on the writer's thread (the claim and the final save, which a
turn cannot do without), measured in the same run.

The peers, with the ``peers`` extra (otherwise opsrun is measured alone, and one line
says so): LangGraph's ``AsyncSqliteSaver`` (its own file) and ``AsyncPostgresSaver`` (a
schema of its own, same server and database) as the checkpointer of a graph of the same
shape, five parallel no-op nodes from ``START`` joined into one node that stands in for
the main LLM, one thread per chat and ``await graph.ainvoke(...)`` per turn.

Every side runs in one asyncio event loop in this process, and the sides take turns in
rounds, in a rotating order, so a slow patch of the machine hits all of them alike;
turns per second is the median over rounds with its min-max range, and a ratio compares
two sides within each round (median, range). A store's own time per turn is, within each
round, the wall time per turn on it less the wall time per turn in memory (median, range):
what the store adds to a turn. Records are kept, not deleted, on every
side. What exists before measuring is frozen out of the garbage collector's passes
(``gc.freeze``).

What each side stores per turn (the header prints the counts measured on one turn):

- opsrun: the user message and the assistant message (one record each), the run record
  (claimed at the start, stored again at the end with its five operation records), and
  the run's event log (run started, phase changes, each operation's start and finish,
  the main LLM's start, text and finish, run finished), stored in batches by the event
  pump; SQLite also writes and deletes a branch-queue row per turn (PostgreSQL takes an
  advisory lock instead). It reads the profile, the chat's history and the profile
  session's artifacts. All of this is written as the run goes: ``run()`` returns once
  it is stored.
- LangGraph: a checkpoint per superstep, four a turn (the input, the start, the five
  nodes, the main LLM node), each with the channel values that changed (the chat's
  whole ``messages`` list included), and the pending writes of each task; it reads the
  thread's latest checkpoint first. Durability is LangGraph's default (``"async"``: a
  checkpoint is written while the next step runs; ``ainvoke`` returns once all are
  written). The chat history is a ``messages`` channel with an ``operator.add``
  reducer, as in LangGraph's chat examples; each checkpoint that changes it stores the
  whole list, so its cost grows with the chat, while opsrun stores each message once
  and reads the history back each turn (the chats here are short: see the modes above).
- SQLite durability is the same on both sides: WAL with ``synchronous=NORMAL``, opsrun's
  setting, set here on LangGraph's connection (whose default is ``FULL``, a sync per
  commit). LangGraph serialises its calls on one connection; opsrun writes through one
  connection and reads through a second, in worker threads.
- PostgreSQL: opsrun's ``PostgresStores`` with its defaults (a pool of up to 10
  connections for store calls, 20 for branch holds); LangGraph's saver over a psycopg
  ``AsyncConnectionPool`` of up to 10 connections (autocommit, as its
  ``from_conn_string`` sets up), though the saver also takes a lock around each call.
- opsrun does work the peer does not: redaction, prompt assembly and its snapshot,
  events; LangGraph keeps state history that opsrun does not.

``--profile`` prints instead where a sequential SQLite turn's time goes: the cost of one
empty job on the stores' threads (the hop every store call makes), the split of
wall time into the event loop thread's CPU time, the worker threads' CPU time and
waiting, the store calls per turn, and cProfile tables (top 20 by cumulative and by own
time) for the event loop thread and, merged, for the worker threads that run the
``sqlite3`` calls.
"""

from __future__ import annotations

import cProfile
import gc
import importlib
import importlib.metadata
import io
import itertools
import operator
import os
import pstats
import re
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Annotated, Any, TypedDict

import anyio
import anyio.to_thread
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
from opsrun.stores._sqlite import _worker  # to profile the jobs its threads run
from opsrun.stores.sqlite import SqliteStores

QUICK = "--quick" in sys.argv
ROUNDS = 2 if QUICK else 7
"""Measured rounds (one more, first, warms up and is not recorded)."""
SEQUENTIAL_TURNS = 10 if QUICK else 20
"""Turns of the one chat of a sequential round."""
CHATS = 50
"""Chats of a concurrent round, one task each."""
CONCURRENT_TURNS = 1 if QUICK else 2
"""Turns of each chat of a concurrent round."""
OPERATIONS = 5
"""No-op operations before the main LLM, per turn."""

DSN = os.environ.get("OPSRUN_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
"""The PostgreSQL server of both sides' PostgreSQL stores."""

WALL = time.perf_counter
"""Wall time: the clock of turns per second and latency."""
CPU = time.process_time
"""CPU time of this process, every thread included."""

SQLITE_TARGET = 1_000.0
"""Sequential turns per second of opsrun on SQLite."""


# The opsrun turn ---------------------------------------------------------------------


async def no_op(ctx: OperationContext) -> OperationResult:
    return OperationResult.done()


def build_catalog() -> tuple[OperationCatalog, OperationProfile]:
    """The catalog and the profile ``bench``: five no-op operations before the main LLM."""
    catalog = OperationCatalog()
    entries = []
    for i in range(OPERATIONS):
        catalog.function(f"op{i}", name=f"Op {i}")(no_op)
        config = OperationConfig(hooks=(Hook.BEFORE_MAIN_LLM,), order=i)
        entries.append(ProfileOperation(operation_id=f"op{i}", config=config))
    profile = OperationProfile(
        profile_id="bench",
        name="bench",
        operation_profile_session_id="s",
        operations=tuple(entries),
    )
    return catalog, profile


@dataclass
class Side:
    """One store under test: what it is, and one turn in a given chat."""

    name: str
    turn: Callable[[str], Awaitable[object]]
    stored: str = ""
    """What one turn stored, measured on a first turn (for the header)."""


async def opsrun_side(name: str, stores: Any) -> Side:
    """A runner of the profile ``bench`` over ``stores``; notes what one turn stores."""
    catalog, profile = build_catalog()
    await stores.profiles.save_profile(profile)
    runner = Runner(catalog=catalog, stores=stores, main_llm=QuietMainLlm())

    async def turn(chat: str) -> object:
        request = RunRequest(
            trigger="generate", chat_id=chat, profile_id="bench", user_message="hi"
        )
        return await runner.run(request)

    result = await runner.run(
        RunRequest(trigger="generate", chat_id="first", profile_id="bench", user_message="hi")
    )
    events = await stores.runs.events(result.run.run_id)
    messages = await stores.chats.history("first", "main")
    stored = (
        f"{len(messages)} messages, 1 run record with {len(result.operation_runs)} operation "
        f"records, {len(events)} events"
    )
    return Side(name, turn, stored)


# LangGraph ---------------------------------------------------------------------------


class Chat(TypedDict, total=False):
    """The LangGraph state: the chat's messages and each no-op node's mark."""

    messages: Annotated[list[dict[str, str]], operator.add]
    op0: str
    op1: str
    op2: str
    op3: str
    op4: str


def _langgraph_node(index: int) -> Callable[[Chat], Awaitable[dict[str, str]]]:
    async def node(state: Chat) -> dict[str, str]:
        return {f"op{index}": "done"}

    return node


async def _main_llm_node(state: Chat) -> dict[str, list[dict[str, str]]]:
    return {"messages": [{"role": "assistant", "content": "OK"}]}


def optional_module(name: str) -> Any:
    """The module ``name``, or None when it is not installed.

    Typed ``Any`` on purpose: the peers (and psycopg) are used through their public names
    at run time, so this file type-checks the same with and without them.
    """
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


class LangGraphPeer:
    """Graphs of five parallel no-op nodes and a main LLM node, with a checkpointer."""

    MODULES = (
        "langgraph.graph",
        "langgraph.checkpoint.sqlite.aio",
        "langgraph.checkpoint.postgres.aio",
        "aiosqlite",
        "psycopg_pool",
        "psycopg.rows",
    )

    def __init__(self, modules: dict[str, Any]) -> None:
        self._m = modules
        self.version = importlib.metadata.version("langgraph")

    @classmethod
    def load(cls) -> LangGraphPeer | None:
        """The peer, or None (after one line saying why) when a package is missing."""
        modules = {name: optional_module(name) for name in cls.MODULES}
        missing = [name for name, module in modules.items() if module is None]
        if missing:
            print(
                f"LangGraph's checkpointers are not installed ({', '.join(missing)} missing): "
                "measuring opsrun alone; install the peers extra (pip install -e '.[peers]') "
                "to compare"
            )
            return None
        return cls(modules)

    def _graph(self, checkpointer: Any) -> Any:
        graph = self._m["langgraph.graph"]
        builder = graph.StateGraph(Chat)
        names = [f"op{i}" for i in range(OPERATIONS)]
        for i, name in enumerate(names):
            builder.add_node(name, _langgraph_node(i))
            builder.add_edge(graph.START, name)
        builder.add_node("main_llm", _main_llm_node)
        builder.add_edge(names, "main_llm")  # waits for all five
        builder.add_edge("main_llm", graph.END)
        return builder.compile(checkpointer=checkpointer)

    async def _side(
        self, name: str, checkpointer: Any, count: Callable[[], Awaitable[str]]
    ) -> Side:
        compiled = self._graph(checkpointer)

        async def turn(chat: str) -> object:
            state = {"messages": [{"role": "user", "content": "hi"}]}
            return await compiled.ainvoke(state, {"configurable": {"thread_id": chat}})

        await turn("first")
        return Side(name, turn, await count())

    async def sqlite(self, path: Path, stack: AsyncExitStack) -> Side:
        conn = await stack.enter_async_context(self._m["aiosqlite"].connect(str(path)))
        saver = self._m["langgraph.checkpoint.sqlite.aio"].AsyncSqliteSaver(conn)
        await saver.setup()
        await conn.execute("PRAGMA synchronous = NORMAL")

        async def count() -> str:
            rows = []
            for table in ("checkpoints", "writes"):
                query = f"SELECT count(*) FROM {table} WHERE thread_id = 'first'"
                async with conn.execute(query) as cursor:
                    rows.append((await cursor.fetchone())[0])
            return f"{rows[0]} checkpoints, {rows[1]} pending writes"

        return await self._side(f"LangGraph {self.version}, AsyncSqliteSaver", saver, count)

    async def postgres(self, conninfo: str, stack: AsyncExitStack) -> Side:
        kwargs = {
            "autocommit": True,
            "prepare_threshold": 0,
            "row_factory": self._m["psycopg.rows"].dict_row,
        }
        pool = self._m["psycopg_pool"].AsyncConnectionPool(
            conninfo, min_size=1, max_size=10, kwargs=kwargs, open=False
        )
        await pool.open()
        stack.push_async_callback(pool.close)
        saver = self._m["langgraph.checkpoint.postgres.aio"].AsyncPostgresSaver(pool)
        await saver.setup()

        async def count() -> str:
            counts = []
            async with pool.connection() as conn:
                for table in ("checkpoints", "checkpoint_blobs", "checkpoint_writes"):
                    query = f"SELECT count(*) AS n FROM {table} WHERE thread_id = 'first'"
                    counts.append((await (await conn.execute(query)).fetchone())["n"])
            return f"{counts[0]} checkpoints, {counts[1]} channel blobs, {counts[2]} writes"

        return await self._side(f"LangGraph {self.version}, AsyncPostgresSaver", saver, count)


# PostgreSQL --------------------------------------------------------------------------


class Postgres:
    """The server both sides' PostgreSQL stores use, and the schemas made for them."""

    def __init__(self, psycopg: Any) -> None:
        self._psycopg = psycopg
        self._schemas: list[str] = []

    @classmethod
    def reach(cls) -> Postgres | None:
        """The server, or None (after one line saying why) when it cannot be used."""
        psycopg = optional_module("psycopg")
        if psycopg is None:
            print("psycopg is not installed: no PostgreSQL figures (pip install -e '.[postgres]')")
            return None
        try:
            with psycopg.connect(DSN, connect_timeout=3) as conn:
                conn.execute("SELECT 1")
        except psycopg.Error as exc:
            where = psycopg.conninfo.conninfo_to_dict(DSN)
            print(
                f"PostgreSQL at {where.get('host')}:{where.get('port')} does not answer "
                f"({' '.join(str(exc).split())}): no PostgreSQL figures; set "
                "OPSRUN_TEST_POSTGRES_DSN"
            )
            return None
        return cls(psycopg)

    def new_schema(self, *, create: bool) -> str:
        """A schema name of its own (created when asked), dropped by :meth:`drop`."""
        schema = f"bench_stores_{uuid.uuid4().hex[:10]}"
        self._schemas.append(schema)
        if create:
            self._execute("CREATE SCHEMA {}", schema)
        return schema

    def conninfo(self, schema: str) -> str:
        """The DSN with ``schema`` first on the search path."""
        return str(self._psycopg.conninfo.make_conninfo(DSN, options=f"-c search_path={schema}"))

    def drop(self) -> None:
        """Drop every schema made here."""
        for schema in self._schemas:
            self._execute("DROP SCHEMA IF EXISTS {} CASCADE", schema)

    def _execute(self, template: str, schema: str) -> None:
        sql = self._psycopg.sql
        with self._psycopg.connect(DSN, autocommit=True) as conn:
            conn.execute(sql.SQL(template).format(sql.Identifier(schema)))


# Opening every side ------------------------------------------------------------------


async def open_sides(
    stack: AsyncExitStack, tmp: Path, peer: LangGraphPeer | None, postgres: Postgres | None
) -> list[Side]:
    """Every side, opsrun's first; a side that cannot run is left out with one line."""
    sides = [await opsrun_side("opsrun, in memory", InMemoryStores())]
    sqlite = stack.enter_context(SqliteStores(tmp / "opsrun.db"))
    sides.append(await opsrun_side("opsrun, SQLite", sqlite))
    if postgres is not None:
        module = optional_module("opsrun.stores.postgres")
        if module is None:
            print("opsrun.stores.postgres does not import: no opsrun PostgreSQL figures")
        else:
            stores = module.PostgresStores(DSN, schema=postgres.new_schema(create=False))
            await stack.enter_async_context(stores)
            sides.append(await opsrun_side("opsrun, PostgreSQL", stores))
    if peer is not None:
        sides.append(await peer.sqlite(tmp / "langgraph.db", stack))
        if postgres is not None:
            schema = postgres.new_schema(create=True)
            sides.append(await peer.postgres(postgres.conninfo(schema), stack))
    return sides


# Measuring ---------------------------------------------------------------------------


@dataclass
class Figures:
    """What the rounds of one side in one mode measured."""

    rates: list[float] = field(default_factory=list)
    """Turns per second, per round."""
    latencies: list[float] = field(default_factory=list)
    """Seconds of every turn of every round."""
    cpu: list[float] = field(default_factory=list)
    """CPU seconds of this process per turn, per round."""


async def _timed(side: Side, chat: str, turns: int, latencies: list[float]) -> None:
    for _ in range(turns):
        t0 = WALL()
        await side.turn(chat)
        latencies.append(WALL() - t0)


async def sequential(side: Side, round_id: str, figures: Figures) -> None:
    """One chat, turn after turn."""
    latencies: list[float] = []
    c0, t0 = CPU(), WALL()
    await _timed(side, f"seq-{round_id}", SEQUENTIAL_TURNS, latencies)
    _record(figures, SEQUENTIAL_TURNS, WALL() - t0, CPU() - c0, latencies)


async def concurrent(side: Side, round_id: str, figures: Figures) -> None:
    """:data:`CHATS` chats at once, each its own task."""
    latencies: list[float] = []
    c0, t0 = CPU(), WALL()
    async with anyio.create_task_group() as tg:
        for k in range(CHATS):
            tg.start_soon(_timed, side, f"conc-{round_id}-{k}", CONCURRENT_TURNS, latencies)
    _record(figures, CHATS * CONCURRENT_TURNS, WALL() - t0, CPU() - c0, latencies)


def _record(figures: Figures, turns: int, wall: float, cpu: float, latencies: list[float]) -> None:
    figures.rates.append(turns / wall)
    figures.cpu.append(cpu / turns)
    figures.latencies.extend(latencies)


Mode = Callable[[Side, str, Figures], Awaitable[None]]
MODES: dict[str, Mode] = {"sequential": sequential, "concurrent": concurrent}


async def measure(sides: Sequence[Side]) -> dict[str, list[Figures]]:
    """Per mode, the figures of each side, the sides taking turns in every round."""
    results = {mode: [Figures() for _ in sides] for mode in MODES}
    for r in range(ROUNDS + 1):  # round 0 warms up
        for mode, run in MODES.items():
            for k in range(len(sides)):
                index = (r + k) % len(sides)
                gc.collect()
                figures = results[mode][index] if r else Figures()
                await run(sides[index], f"{r}", figures)
    return results


# Reporting ---------------------------------------------------------------------------


def _percentile(values: Sequence[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def _spread(values: Sequence[float], fmt: str = ",.0f") -> str:
    ordered = sorted(values)
    median = statistics.median(ordered)
    return f"{median:{fmt}} [{ordered[0]:{fmt}}-{ordered[-1]:{fmt}}]"


def _ratio(name: str, ours: Figures, theirs: Figures, target: str) -> str:
    ratios = [a / b for a, b in zip(ours.rates, theirs.rates, strict=True)]
    median = statistics.median(ratios)
    verdict = ""
    if target:
        verdict = f" {target}: {'met' if median >= 1.0 else 'missed'}"
    return f"  {name}: {_spread(ratios, '.2f')}x{verdict}"


def _store_share(name: str, store: Figures, memory: Figures) -> str:
    """The store's own time per turn: a turn on it less a turn in memory (wall time of a
    round over its turns, both sides of one round; median over rounds [min-max])."""
    shares = [(1 / a - 1 / b) * 1e3 for a, b in zip(store.rates, memory.rates, strict=True)]
    spread = _spread(shares, ".2f")
    return f"  {name}: the store's own time per turn (turn less in-memory turn) {spread} ms"


def report(sides: Sequence[Side], results: dict[str, list[Figures]]) -> None:
    width = max(len(side.name) for side in sides)
    shapes = {
        "sequential": f"one chat of {SEQUENTIAL_TURNS} turns per round, turn after turn",
        "concurrent": f"{CHATS} chats at once, {CONCURRENT_TURNS} turn(s) each per round",
    }
    for mode, per_side in results.items():
        print(
            f"{mode} ({shapes[mode]}; wall time, median of {ROUNDS} rounds [min-max]; "
            "latency over every turn; CPU of this process):"
        )
        print(
            f"  {'':{width}s} {'turns/s':>20s} {'p50 ms':>7s} {'p99 ms':>7s} {'CPU ms/turn':>12s}"
        )
        for side, figures in zip(sides, per_side, strict=True):
            line = (
                f"  {side.name:{width}s} {_spread(figures.rates):>20s} "
                f"{_percentile(figures.latencies, 0.5) * 1e3:7.2f} "
                f"{_percentile(figures.latencies, 0.99) * 1e3:7.2f} "
                f"{statistics.median(figures.cpu) * 1e3:12.2f}"
            )
            if side.name == "opsrun, SQLite" and mode == "sequential":
                rate = statistics.median(figures.rates)
                met = "met" if rate >= SQLITE_TARGET else "missed"
                line += f"  [target >= {SQLITE_TARGET:,.0f} turns/s: {met}]"
            print(line)
        ratios = [
            ("opsrun SQLite / LangGraph SQLite", "opsrun, SQLite", "AsyncSqliteSaver", ""),
            (
                "opsrun PostgreSQL / LangGraph PostgreSQL",
                "opsrun, PostgreSQL",
                "AsyncPostgresSaver",
                "[target >= 1.00x]",
            ),
        ]
        memory = next((i for i, s in enumerate(sides) if s.name == "opsrun, in memory"), None)
        for store in ("opsrun, SQLite", "opsrun, PostgreSQL"):
            index = next((i for i, s in enumerate(sides) if s.name == store), None)
            if memory is not None and index is not None:
                print(_store_share(store, per_side[index], per_side[memory]))
        for title, ours, theirs, target in ratios:
            a = next((i for i, s in enumerate(sides) if s.name == ours), None)
            b = next((i for i, s in enumerate(sides) if s.name.endswith(theirs)), None)
            if a is not None and b is not None:
                print(_ratio(f"{title} (turns/s, per round)", per_side[a], per_side[b], target))


def _sqlite_floor(
    sides: Sequence[Side], sequential: Sequence[Figures], write_hops: Sequence[float]
) -> str:
    """The fastest a sequential SQLite turn could be with the stores' threads: a turn of
    the engine on the in-memory stores, plus two round trips to the writer's thread (the
    claim, whose answer the run needs before any operation starts, and the final save,
    done before ``run()`` returns), each as cheap as an empty write job."""
    memory = next(i for i, s in enumerate(sides) if s.name == "opsrun, in memory")
    turn = _percentile(sequential[memory].latencies, 0.5)
    hop = statistics.median(write_hops)
    floor = turn + 2 * hop
    return (
        f"the SQLite target's floor on this machine: an in-memory turn ({turn * 1e3:.2f} ms, "
        f"p50) + 2 empty write jobs on the writer's thread (2 x {hop * 1e6:.0f} µs, median "
        f"of {len(write_hops)} rounds) = {floor * 1e3:.2f} ms, at best {1 / floor:,.0f} "
        "turns/s before any SQL runs"
    )


def _machine() -> str:
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return f"{os.cpu_count()} CPUs, load average {load}"


async def compare() -> None:
    print(f"machine: {_machine()}")
    peer = LangGraphPeer.load()
    postgres = Postgres.reach()
    with tempfile.TemporaryDirectory() as tmp:
        try:
            async with AsyncExitStack() as stack:
                sides = await open_sides(stack, Path(tmp), peer, postgres)
                print("stored by one turn (the first, measured):")
                for side in sides:
                    if side.stored:
                        print(f"  {side.name}: {side.stored}")
                gc.freeze()
                results = await measure(sides)
                gc.unfreeze()
                report(sides, results)
                hops = await _empty_hops(Path(tmp) / "hops.db", 50 if QUICK else 200)
                print(_sqlite_floor(sides, results["sequential"], hops["write"]))
                print(f"machine after: {_machine()}")
        finally:
            if postgres is not None:
                postgres.drop()


# Where a SQLite turn's time goes -----------------------------------------------------


class ThreadProfiles:
    """Profiles what the SQLite stores' own threads run, in those threads.

    cProfile sees one thread only; the SQLite stores run every ``sqlite3`` call in a
    thread of their own (``opsrun.stores._sqlite._worker``), a read job alone, write jobs
    in groups that share a transaction. While installed, the functions that run them
    (``_run_read``, ``_run_writes``) are wrapped so that a profiler of their thread
    records them, and the jobs handed over are counted by kind and store function.
    """

    def __init__(self, profile: bool) -> None:
        self._profile = profile
        self._profiles: dict[int, cProfile.Profile] = {}
        self._lock = threading.Lock()
        self.calls: Counter[str] = Counter()
        self._originals = (_worker.Job.__init__, _worker._run_read, _worker._run_writes)

    def install(self) -> None:
        init, run_read, run_writes = self._originals

        def counted(job: Any, fn: Callable[..., Any], *, write: bool) -> None:
            self.calls[f"{'write' if write else 'read'} {_function_name(fn)}"] += 1
            init(job, fn, write=write)

        def grouped(group: list[Any], *args: Any) -> None:
            self.calls[f"write transaction of {len(group)} job(s)"] += 1
            run_writes(group, *args)

        _worker.Job.__init__ = counted  # type: ignore[method-assign,assignment]  # same call
        _worker._run_writes = self._wrap(grouped)
        if self._profile:
            _worker._run_read = self._wrap(run_read)

    def uninstall(self) -> None:
        init, run_read, run_writes = self._originals
        _worker.Job.__init__ = init  # type: ignore[method-assign]
        _worker._run_read, _worker._run_writes = run_read, run_writes

    def _wrap(self, func: Callable[..., Any]) -> Callable[..., Any]:
        if not self._profile:
            return func

        def call(*args: Any) -> Any:
            ident = threading.get_ident()
            with self._lock:
                profiler = self._profiles.setdefault(ident, cProfile.Profile())
            profiler.enable()
            try:
                return func(*args)
            finally:
                profiler.disable()

        return call

    def stats(self) -> pstats.Stats | None:
        profilers = list(self._profiles.values())
        if not profilers:
            return None
        stats = pstats.Stats(profilers[0], stream=io.StringIO())
        for profiler in profilers[1:]:
            stats.add(profiler)
        return stats


async def _sqlite_turns(
    turns: int, tmp: Path, around: Callable[[Side, str], Awaitable[None]]
) -> None:
    with SqliteStores(tmp / f"profile-{uuid.uuid4().hex[:6]}.db") as stores:
        side = await opsrun_side("opsrun, SQLite", stores)
        chats = (f"chat-{n // SEQUENTIAL_TURNS}" for n in itertools.count())
        for _ in range(SEQUENTIAL_TURNS):  # warm-up
            await side.turn("warm-up")
        for _ in range(turns):
            await around(side, next(chats))


def _function_name(fn: Callable[..., Any]) -> str:
    """A store function's name, through ``functools.partial`` layers."""
    while isinstance(fn, partial):
        fn = fn.func
    return getattr(fn, "__qualname__", repr(fn)).replace(".<locals>", "")


def _split(turns: int, tmp: Path) -> None:
    """Wall, event-loop-thread CPU and worker-thread CPU per turn, without a profiler."""
    threads = ThreadProfiles(profile=False)
    wall = main_cpu = all_cpu = 0.0

    async def around(side: Side, chat: str) -> None:
        nonlocal wall, main_cpu, all_cpu
        t0, m0, c0 = WALL(), time.thread_time(), CPU()
        await side.turn(chat)
        wall += WALL() - t0
        main_cpu += time.thread_time() - m0
        all_cpu += CPU() - c0

    threads.install()
    try:
        anyio.run(_sqlite_turns, turns, tmp, around)
    finally:
        threads.uninstall()
    workers = all_cpu - main_cpu
    print(
        f"a sequential SQLite turn ({turns} turns, chats of {SEQUENTIAL_TURNS}, no profiler): "
        f"{wall / turns * 1e3:.2f} ms wall = {1 / (wall / turns):,.0f} turns/s; "
        f"event loop thread CPU {main_cpu / turns * 1e3:.2f} ms, worker threads CPU "
        f"{workers / turns * 1e3:.2f} ms, neither ({'waiting' if wall > all_cpu else 'overlap'})"
        f" {(wall - all_cpu) / turns * 1e3:.2f} ms"
    )
    per_turn = ", ".join(
        f"{name} {count / turns:.1f}" for name, count in threads.calls.most_common()
    )
    print(f"store calls handed to the SQLite threads, per turn: {per_turn}")


Row = tuple[int, int, float, float, dict[Any, Any]]
"""A function's profile: primitive calls, calls, own time, cumulative time, callers."""


def _rows(stats: pstats.Stats) -> dict[tuple[str, int, str], Row]:
    rows: dict[tuple[str, int, str], Row] = stats.stats  # type: ignore[attr-defined]
    return rows


def _where(key: tuple[str, int, str]) -> str:
    path, line, func = key
    return f"{'/'.join(Path(path).parts[-2:])}:{line}({func})" if line else func


def _table(stats: pstats.Stats, key: str, title: str, turns: int) -> None:
    rows = _rows(stats)
    total = sum(row[2] for row in rows.values())
    own_time = key == "tottime"

    def rank(item: tuple[Any, Row]) -> float:
        return item[1][2] if own_time else item[1][3]

    top = sorted(rows.items(), key=rank, reverse=True)[:20]
    print(f"{title}, top 20 by {key} (µs per turn; share of the thread's profiled time):")
    print(f"  {'own µs':>8} {'cum µs':>8} {'share':>6} {'calls':>6}  function")
    for where, (_, calls, own, cum, _) in top:
        print(
            f"  {own / turns * 1e6:8.1f} {cum / turns * 1e6:8.1f} "
            f"{(own if own_time else cum) / total:6.1%} {calls / turns:6.1f}  {_where(where)}"
        )


def _packages(stats: pstats.Stats, title: str) -> None:
    """Own time per top-level package (``opsrun``, ``anyio``, ``asyncio``, C code…)."""
    rows = _rows(stats)
    total = sum(row[2] for row in rows.values())
    packages: defaultdict[str, float] = defaultdict(float)
    for (path, _, func), row in rows.items():
        packages[_package(path, func)] += row[2]
    ranked = sorted(packages.items(), key=operator.itemgetter(1), reverse=True)[:8]
    shares = ", ".join(f"{name} {own / total:.0%}" for name, own in ranked)
    print(f"{title}, own time by package: {shares}")


_STDLIB = f"python{sys.version_info.major}.{sys.version_info.minor}"


def _package(path: str, func: str) -> str:
    """The top-level package of a profiled function (as in ``bench_peers.py``)."""
    if path == "~":  # C code: "<method 'execute' of 'sqlite3.Connection' objects>"
        owner = re.search(r"of '(\w+)\.", func)
        return owner[1] if owner else "builtins"
    parts = Path(path).parts
    for anchor in ("site-packages", "src", _STDLIB):
        if anchor in parts[:-1]:
            return Path(parts[len(parts) - parts[::-1].index(anchor)]).stem
    return Path(path).stem


def _store_calls(stats: pstats.Stats, turns: int) -> None:
    """What the functions handed to the worker threads called, by cumulative time.

    The profiler starts inside each handed-over call, so those functions are the ones
    without a caller (the worker's ``_run_read`` and ``_run_writes``, or the wrappers
    around them); below them are the store functions and the transactions' statements.
    """
    rows = _rows(stats)
    entries = {key for key, row in rows.items() if not row[4] and "disable" not in key[2]}
    below = [(key, row) for key, row in rows.items() if entries & row[4].keys()]
    below.sort(key=lambda item: item[1][3], reverse=True)
    handed = ", ".join(f"{_where(key)} {rows[key][1] / turns:.1f}" for key in sorted(entries))
    print(f"worker threads, calls handed over per turn: {handed}; what they ran, per turn:")
    for key, (_, calls, _own, cum, _callers) in below:
        print(f"  {calls / turns:5.1f} calls {cum / turns * 1e6:7.1f} µs  {_where(key)}")


async def _empty_hops(path: Path, count: int) -> dict[str, list[float]]:
    """Wall seconds of one empty read job and one empty write job (a transaction that
    changes nothing) on SQLite stores, in rounds of ``count``."""
    per_job: dict[str, list[float]] = {"read": [], "write": []}
    with SqliteStores(path) as stores:
        db = stores._db  # the hop itself, without a store call's SQL
        for _ in range(7):
            for kind, hop in (("read", db.read), ("write", db.write)):
                t0 = WALL()
                for _ in range(count):
                    await hop(_nothing)
                per_job[kind].append((WALL() - t0) / count)
    return per_job


def _nothing(conn: object) -> None:
    return None


def profile_sqlite() -> None:
    """Where a sequential SQLite turn's time goes (see the module docstring)."""
    turns = 200 if QUICK else 1_000
    with tempfile.TemporaryDirectory() as tmp:
        _split(turns, Path(tmp))
        hops = anyio.run(_empty_hops, Path(tmp) / "hops.db", 100 if QUICK else 500)
        spread = ", ".join(
            f"{kind} {_spread([t * 1e6 for t in times])} µs" for kind, times in hops.items()
        )
        print(f"one empty job on the SQLite stores' threads (wall, median of 7 rounds): {spread}")
        threads = ThreadProfiles(profile=True)
        main = cProfile.Profile()

        async def around(side: Side, chat: str) -> None:
            main.enable()
            await side.turn(chat)
            main.disable()

        threads.install()
        try:
            anyio.run(_sqlite_turns, turns, Path(tmp), around)
        finally:
            threads.uninstall()
    print(
        "under cProfile (its own cost per call inflates every figure; read the shares; a "
        "coroutine's calls count its resumptions):"
    )
    loop = pstats.Stats(main, stream=io.StringIO())
    _packages(loop, "event loop thread")
    _table(loop, "cumulative", "event loop thread", turns)
    _table(loop, "tottime", "event loop thread", turns)
    workers = threads.stats()
    if workers is not None:
        _packages(workers, "worker threads")
        _store_calls(workers, turns)
        _table(workers, "tottime", "worker threads", turns)


if __name__ == "__main__":
    if "--profile" in sys.argv:
        profile_sqlite()
    else:
        anyio.run(compare)
