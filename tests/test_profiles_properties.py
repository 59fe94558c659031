"""Properties of dependency-cycle detection, checked against reference algorithms."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from _support import examples
from opsrun import (
    OperationCatalog,
    OperationContext,
    OperationDefinition,
    OperationProfile,
    OperationResult,
)
from opsrun.kinds import builtin_kinds
from opsrun.model import ProfileIssueCode
from opsrun.operations._validate import find_cycles

Code = ProfileIssueCode
Graph = dict[str, list[str]]
CYCLE_PREFIX = "dependency cycle: "


def name(i: int) -> str:
    return f"op{i:02}"


@st.composite
def graphs(draw: st.DrawFn, max_nodes: int = 12) -> Graph:
    """Random directed graphs on ``op00…``, self loops and duplicate-free edge lists included."""
    n = draw(st.integers(1, max_nodes))
    targets = draw(st.lists(st.sets(st.integers(0, n - 1)), min_size=n, max_size=n))
    return {name(i): [name(j) for j in sorted(ts)] for i, ts in enumerate(targets)}


def kahn_is_acyclic(graph: Mapping[str, Sequence[str]]) -> bool:
    """Reference topological sort; self loops do not count as edges."""
    indegree = dict.fromkeys(graph, 0)
    for node, targets in graph.items():
        for target in targets:
            if target != node:
                indegree[target] += 1
    ready = [node for node, degree in indegree.items() if degree == 0]
    seen = 0
    while ready:
        node = ready.pop()
        seen += 1
        for target in graph[node]:
            if target != node:
                indegree[target] -= 1
                if indegree[target] == 0:
                    ready.append(target)
    return seen == len(graph)


def reachable(graph: Mapping[str, Sequence[str]], start: str) -> set[str]:
    """Nodes reachable from ``start`` by one or more non-self-loop edges."""
    seen: set[str] = set()
    frontier = [t for t in graph.get(start, ()) if t != start]
    while frontier:
        node = frontier.pop()
        if node in seen:
            continue
        seen.add(node)
        frontier.extend(t for t in graph.get(node, ()) if t != node)
    return seen


def nontrivial_components(graph: Mapping[str, Sequence[str]]) -> list[frozenset[str]]:
    """Strongly connected components with two or more nodes, by mutual reachability."""
    reach = {node: reachable(graph, node) for node in graph}
    components = {
        frozenset({node} | {other for other in reach[node] if node in reach.get(other, set())})
        for node in graph
    }
    return [c for c in components if len(c) > 1]


def assert_real_cycle(graph: Mapping[str, Sequence[str]], cycle: Sequence[str]) -> None:
    """``cycle`` lists distinct nodes a, b, … with edges a → b → … → a and no self loop."""
    assert len(cycle) >= 2, cycle
    assert len(set(cycle)) == len(cycle), cycle
    for source, target in zip(cycle, [*cycle[1:], cycle[0]], strict=True):
        assert target in graph[source], (cycle, source, target)


def as_profile(graph: Graph, hooks: Sequence[str] = ("before_main_llm",)) -> OperationProfile:
    return OperationProfile.model_validate(
        {
            "profileId": "random",
            "name": "Random",
            "operationProfileSessionId": "s",
            "operations": [
                {
                    "operationId": op_id,
                    "config": {"hooks": list(hooks), "order": i, "dependsOn": deps},
                }
                for i, (op_id, deps) in enumerate(graph.items())
            ],
        }
    )


async def _noop(ctx: OperationContext) -> OperationResult:
    return OperationResult.done()


def catalog_of(definitions: Sequence[OperationDefinition]) -> OperationCatalog:
    """Built-in kinds for ``llm``/``template`` definitions, function operations otherwise."""
    catalog = OperationCatalog(kinds=builtin_kinds())
    for d in definitions:
        if d.kind in ("llm", "template"):
            catalog.add_definition(d)
        else:
            catalog.add_function(d, _noop)
    return catalog


def compute_catalog(ids: Sequence[str]) -> OperationCatalog:
    return catalog_of(
        [OperationDefinition(operation_id=op_id, name=op_id, kind="compute") for op_id in ids]
    )


@given(graphs())
def test_cycle_reported_iff_topological_sort_fails(graph: Graph) -> None:
    issues = compute_catalog(list(graph)).validate(as_profile(graph))
    cycles = [i for i in issues if i.code == Code.DEPENDENCY_CYCLE]
    assert bool(cycles) == (not kahn_is_acyclic(graph))

    # Self loops are reported once each, as self dependencies, and nothing else is wrong.
    self_loops = sorted(node for node, targets in graph.items() if node in targets)
    assert sorted(i.operation_id or "" for i in issues if i.code == Code.SELF_DEPENDENCY) == (
        self_loops
    )
    assert {i.code for i in issues} <= {Code.DEPENDENCY_CYCLE, Code.SELF_DEPENDENCY}

    # One cycle per tangled component; each one is a real cycle of the graph.
    assert len(cycles) == len(nontrivial_components(graph))
    for issue in cycles:
        assert issue.message.startswith(CYCLE_PREFIX)
        path = issue.message.removeprefix(CYCLE_PREFIX).split(" → ")
        assert path[0] == path[-1] == issue.operation_id
        assert_real_cycle(graph, path[:-1])
        assert issue.operation_id == min(path)


@st.composite
def valid_profiles(draw: st.DrawFn) -> tuple[OperationProfile, OperationCatalog]:
    """A random DAG (dependencies only on earlier operations) with unique write tags."""
    n = draw(st.integers(1, 12))
    hooks = draw(
        st.sampled_from(
            [["before_main_llm"], ["after_main_llm"], ["before_main_llm", "after_main_llm"]]
        )
    )
    operations = []
    definitions = []
    for i in range(n):
        op_id = f"builtin:op_{i}"
        deps = draw(st.sets(st.integers(0, i - 1))) if i else set()
        style = draw(st.sampled_from(["none", "declared", "llm", "template"]))
        params: dict[str, object] = {}
        capabilities: dict[str, object] = {}
        kind = "compute"
        if style == "declared":
            capabilities = {"writesArtifact": True, "writeTag": f"tag_{i}"}
        elif style == "llm":
            kind = "llm"
            capabilities = {"writesArtifact": True}
            params = {
                "providerRef": "offline",
                "model": "m",
                "prompt": "{{ chatHistory | last: 3 }}",
                "writeArtifact": {"tag": f"tag_{i}"},
            }
        elif style == "template":
            kind = "template"
            params = {"template": "hello", "writeArtifact": {"tag": f"tag_{i}"}}
        operations.append(
            {
                "operationId": op_id,
                "config": {
                    "hooks": hooks,
                    "order": draw(st.integers(-100, 100)),
                    "dependsOn": [f"builtin:op_{d}" for d in sorted(deps)],
                    "params": params,
                },
            }
        )
        definitions.append(
            OperationDefinition.model_validate(
                {"operationId": op_id, "name": op_id, "kind": kind, "capabilities": capabilities}
            )
        )
    order = draw(st.permutations(range(n)))
    profile = OperationProfile.model_validate(
        {
            "profileId": "random",
            "name": "Random",
            "operationProfileSessionId": "s",
            "operations": [operations[i] for i in order],
        }
    )
    return profile, catalog_of(definitions)


# Each example builds and validates a catalog of up to 12 definitions; half of the
# profile's examples still combine every style of operation and hook many times.
@settings(max_examples=examples(1 / 2))
@given(valid_profiles())
def test_valid_random_profile_has_no_issues(
    case: tuple[OperationProfile, OperationCatalog],
) -> None:
    profile, catalog = case
    assert catalog.validate(profile) == []


@given(graphs(max_nodes=15))
def test_find_cycles_one_per_nontrivial_component(graph: Graph) -> None:
    components = nontrivial_components(graph)
    tangled = set().union(*components) if components else set()
    cycles = find_cycles(graph)
    assert len(cycles) == len(components)
    for cycle in cycles:
        assert set(cycle) <= tangled
        assert cycle[0] == min(next(c for c in components if cycle[0] in c))
    assert [c[0] for c in cycles] == sorted(c[0] for c in cycles)


@given(graphs(max_nodes=15))
def test_find_cycles_returns_real_cycles(graph: Graph) -> None:
    for cycle in find_cycles(graph):
        assert_real_cycle(graph, cycle)
