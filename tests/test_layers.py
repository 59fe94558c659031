"""The package's layers stack one way and no modules import each other in a circle.

Imports are read from the source (function-level and ``TYPE_CHECKING`` imports count),
so a circle cannot hide behind a lazy import.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import opsrun

SRC = Path(opsrun.__file__).resolve().parent.parent


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _graph() -> dict[str, set[str]]:
    files = {_module_name(p): p for p in (SRC / "opsrun").rglob("*.py")}
    packages = {name for name, path in files.items() if path.name == "__init__.py"}
    edges: dict[str, set[str]] = {name: set() for name in files}
    for name, path in files.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = name.split(".") if name in packages else name.split(".")[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    module = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    module = node.module or ""
                targets = [module, *(f"{module}.{alias.name}" for alias in node.names)]
            for target in targets:
                while target and target not in files:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    edges[name].add(target)
    return edges


GRAPH = _graph()


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_circles() -> None:
    assert _cycles(GRAPH) == []


def test_the_circle_check_finds_a_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]


def _imports_of(package: str) -> set[str]:
    return {
        target
        for name, targets in GRAPH.items()
        if name == package or name.startswith(package + ".")
        for target in targets
        if not (target == package or target.startswith(package + "."))
    }


def _reaches(imports: set[str], package: str) -> set[str]:
    return {t for t in imports if t == package or t.startswith(package + ".")}


LAYERS_BELOW: dict[str, set[str]] = {
    "opsrun.model": set(),
    "opsrun.operations": {"opsrun.model", "opsrun.errors", "opsrun._redact"},
    "opsrun.prompt": {"opsrun.model", "opsrun.ports", "opsrun.errors", "opsrun._redact"},
    "opsrun.report": {"opsrun.model", "opsrun.errors", "opsrun._redact"},
    "opsrun._logs": set(),
    "opsrun._telemetry": {"opsrun.model", "opsrun.errors", "opsrun._redact"},
    "opsrun.telemetry": {"opsrun._telemetry", "opsrun._logs"},
}
"""Packages and everything they may import from the rest of opsrun (``_config`` too)."""


@pytest.mark.parametrize("package", sorted(LAYERS_BELOW))
def test_lower_layers_import_only_what_is_below_them(package: str) -> None:
    allowed = LAYERS_BELOW[package] | {"opsrun._config"}
    outside = {t for t in _imports_of(package) if t.startswith("opsrun")}
    assert {t for t in outside if not any(_reaches({t}, a) for a in allowed)} == set()


def test_engine_never_imports_the_built_in_kinds() -> None:
    assert _reaches(_imports_of("opsrun.runner"), "opsrun.kinds") == set()


def test_kinds_never_import_the_engine() -> None:
    assert _reaches(_imports_of("opsrun.kinds"), "opsrun.runner") == set()


def test_nothing_imports_the_cli() -> None:
    assert [name for name, targets in GRAPH.items() if "opsrun.cli" in targets] == []
