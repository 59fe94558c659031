"""Save-time validation of operation profiles, used by :class:`OperationCatalog`.

Every problem is reported at once, each as a :class:`~opsrun.model.ProfileIssue`
with a stable code and the operation it concerns. Dependencies must not cross hooks
(an operation's every hook must also be a hook of each dependency), cycles are errors,
and every operation that writes an artifact must declare its tag statically.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pydantic import BaseModel, ValidationError

from ..model import (
    Hook,
    OperationConfig,
    OperationDefinition,
    OperationProfile,
    ProfileIssue,
    ProfileIssueCode,
    ProfileOperation,
    Trigger,
    check_tag,
)
from ._operation import Operation

__all__ = ["find_cycles", "validate_profile"]

Code = ProfileIssueCode
_Add = Callable[[ProfileIssueCode, str | None, str], None]


def validate_profile(
    profile: OperationProfile,
    definitions: Mapping[str, OperationDefinition],
    operations: Mapping[str, Operation[Any]],
) -> list[ProfileIssue]:
    """Return every problem of ``profile``; an empty list means valid.

    Args:
        profile: The profile to check.
        definitions: Operation definitions by operation id.
        operations: The implementations by operation id: each checks its own params
            (its ``params_model``, then :meth:`Operation.check`).
    """
    issues: list[ProfileIssue] = []

    def add(code: ProfileIssueCode, operation_id: str | None, message: str) -> None:
        issues.append(ProfileIssue(code=code, operation_id=operation_id, message=message))

    if not profile.profile_id.strip():
        add(Code.EMPTY_PROFILE_ID, None, "profileId must not be empty")
    if not profile.operation_profile_session_id.strip():
        add(Code.EMPTY_SESSION_ID, None, "operationProfileSessionId must not be empty")
    entries = _entries(profile, add)
    reach = _Reach(entries)
    writers: dict[str, list[str]] = {}
    for op_id, entry in entries.items():
        definition = definitions.get(op_id)
        if definition is None:
            add(Code.UNKNOWN_OPERATION, op_id, f"no operation {op_id!r} in the catalog")
        else:
            tag = _check_operation(entry, definition, operations.get(op_id), add)
            if tag is not None:
                writers.setdefault(tag, []).append(op_id)
        _check_dependencies(entry, entries, add, reach)
    _check_writers(writers, add)
    graph = {
        op_id: [d for d in entry.config.depends_on if d in entries and d != op_id]
        for op_id, entry in entries.items()
    }
    for cycle in find_cycles(graph):
        add(
            Code.DEPENDENCY_CYCLE,
            cycle[0],
            "dependency cycle: " + " → ".join([*cycle, cycle[0]]),
        )
    return issues


def _entries(profile: OperationProfile, add: _Add) -> dict[str, ProfileOperation]:
    """The profile's operations by id; empty and repeated ids are reported and left out."""
    entries: dict[str, ProfileOperation] = {}
    for entry in profile.operations:
        op_id = entry.operation_id
        if not op_id.strip():
            add(Code.EMPTY_OPERATION_ID, None, "an operation has an empty operationId")
        elif op_id in entries:
            add(Code.DUPLICATE_OPERATION_ID, op_id, f"operation {op_id!r} is listed twice")
        else:
            entries[op_id] = entry
    return entries


def _check_operation(
    entry: ProfileOperation,
    definition: OperationDefinition,
    operation: Operation[Any] | None,
    add: _Add,
) -> str | None:
    """Check one operation's params and effects; return the tag it writes, if any."""
    op_id = entry.operation_id
    model = operation.params_model if operation is not None else None
    params = _check_params(entry, model, add)
    if operation is not None and (params is not None or model is None):
        checked = params if model is not None else dict(entry.config.params)
        for problem in operation.check(checked):
            add(Code.INVALID_PARAMS, op_id, problem)
    tag = _write_tag(entry, definition, params, add)
    sends_prompt = (
        getattr(params, "prompt_effect", None) is not None or definition.capabilities.prompt_effects
    )
    if sends_prompt and Hook.AFTER_MAIN_LLM in entry.config.hooks:
        add(
            Code.PROMPT_EFFECT_AFTER_MAIN_LLM,
            op_id,
            f"{op_id!r} sends a prompt-time effect but runs in after_main_llm, "
            "when the prompt was already sent",
        )
    return tag


def _check_writers(writers: Mapping[str, list[str]], add: _Add) -> None:
    for tag, op_ids in sorted(writers.items()):
        for op_id in op_ids[1:]:
            add(
                Code.DUPLICATE_WRITE_TAG,
                op_id,
                f"art.{tag} is written by {', '.join(map(repr, op_ids))}; "
                "a tag has one writer per profile",
            )


_NO_CHILDREN: list[str] = []


def find_cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Return one cycle per strongly connected component that has one.

    Each cycle is a list of nodes ``[a, b, …]`` meaning a → b → … → a, starting at the
    smallest node of its component; cycles are sorted by that node. Self loops are not
    cycles here (they are reported separately). Iterative, so deep graphs are fine.
    """
    adjacency = {node: sorted(set(targets)) for node, targets in graph.items()}
    # Each node's children without itself, made once: a node is revisited once per child.
    children_of = {node: [c for c in targets if c != node] for node, targets in adjacency.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for root in sorted(adjacency):
        if root in index:
            continue
        work: list[tuple[str, int]] = [(root, 0)]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, child_i = work[-1]
            children = children_of.get(node, _NO_CHILDREN)
            if child_i < len(children):
                work[-1] = (node, child_i + 1)
                child = children[child_i]
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, 0))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(component)
    return sorted((_cycle_in(set(c), adjacency) for c in components), key=lambda c: c[0])


def _cycle_in(component: set[str], adjacency: Mapping[str, list[str]]) -> list[str]:
    """Walk inside a strongly connected component from its smallest node back to it."""
    start = min(component)
    # Breadth-first search for the shortest path back to start stays inside the component.
    parents: dict[str, str] = {}
    frontier = [start]
    seen = {start}
    while frontier:
        next_frontier: list[str] = []
        for node in frontier:
            for child in adjacency.get(node, []):
                if child not in component or child == node:
                    continue
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(parents[path[-1]])
                    return list(reversed(path))
                if child not in seen:
                    seen.add(child)
                    parents[child] = node
                    next_frontier.append(child)
        frontier = next_frontier
    raise AssertionError("a strongly connected component always has a cycle")


def _check_params(
    entry: ProfileOperation,
    params_model: type[BaseModel] | None,
    add: _Add,
) -> BaseModel | None:
    if params_model is None:
        return None
    try:
        return params_model.model_validate(entry.config.params)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '(root)'}: {err['msg']}"
            for err in exc.errors()[:5]
        )
        add(Code.INVALID_PARAMS, entry.operation_id, f"params do not fit: {problems}")
        return None


def params_write_tag(params: Any) -> str | None:
    """The tag an operation's params say it writes (``writeArtifact.tag``): from a
    params model's ``write_artifact``, or from raw params (an operation without a params
    model); None when they name none."""
    spec = getattr(params, "write_artifact", None)
    if spec is not None:
        tag = getattr(spec, "tag", None)
        return tag if isinstance(tag, str) else None
    if isinstance(params, Mapping) and isinstance(params.get("writeArtifact"), Mapping):
        raw = params["writeArtifact"].get("tag")
        return raw if isinstance(raw, str) else None
    return None


def _write_tag(
    entry: ProfileOperation,
    definition: OperationDefinition,
    params: BaseModel | None,
    add: _Add,
) -> str | None:
    declared = definition.capabilities.write_tag
    from_params = params_write_tag(entry.config.params if params is None else params)
    op_id = entry.operation_id
    if declared is not None and from_params is not None and declared != from_params:
        add(
            Code.WRITE_TAG_UNKNOWN,
            op_id,
            f"the definition declares art.{declared} but params write art.{from_params}",
        )
        return declared
    tag = declared or from_params
    if tag is None:
        if definition.capabilities.writes_artifact:
            add(
                Code.WRITE_TAG_UNKNOWN,
                op_id,
                f"{op_id!r} writes an artifact but declares no tag "
                "(set capabilities.writeTag or params.writeArtifact.tag)",
            )
        return None
    try:
        check_tag(tag)
    except ValueError as exc:
        add(Code.WRITE_TAG_UNKNOWN, op_id, str(exc))
        return None
    return tag


def _check_dependencies(
    entry: ProfileOperation,
    entries: Mapping[str, ProfileOperation],
    add: _Add,
    reach: _Reach,
) -> None:
    op_id = entry.operation_id
    hooks = set(entry.config.hooks)
    for dep in entry.config.depends_on:
        if dep == op_id:
            add(Code.SELF_DEPENDENCY, op_id, f"{op_id!r} depends on itself")
            continue
        target = entries.get(dep)
        if target is None:
            add(Code.UNKNOWN_DEPENDENCY, op_id, f"{op_id!r} depends on unknown {dep!r}")
            continue
        missing = hooks - set(target.config.hooks)
        if missing:
            add(
                Code.CROSS_HOOK_DEPENDENCY,
                op_id,
                f"{op_id!r} runs in {', '.join(sorted(h.value for h in missing))} "
                f"but its dependency {dep!r} does not",
            )
        if entry.config.required and entry.config.enabled:
            _check_reachable(op_id, dep, entry.config, target.config, add, reach)


class _Reach:
    """Per operation and trigger: the first operation in its dependency chains (itself
    first) that cannot run on that trigger, or None; each pair is worked out once."""

    def __init__(self, entries: Mapping[str, ProfileOperation]) -> None:
        self._entries = entries
        self._memo: dict[tuple[str, Trigger], str | None] = {}

    def _deps(self, op_id: str) -> list[str]:
        deps = self._entries[op_id].config.depends_on
        return [d for d in dict.fromkeys(deps) if d in self._entries and d != op_id]

    def enabled(self, op_id: str) -> bool:
        """Whether ``op_id`` is enabled in the profile."""
        return self._entries[op_id].config.enabled

    def _cannot_run(self, op_id: str, trigger: Trigger) -> bool:
        config = self._entries[op_id].config
        return not config.enabled or not config.runs_on(trigger)

    def blocker(self, root: str, trigger: Trigger) -> str | None:
        """The first operation ``root``'s chains need that cannot run on ``trigger``.

        Iterative (a chain may be thousands long); a cycle is not followed round (it is
        a profile issue of its own).
        """
        memo = self._memo
        if (root, trigger) in memo:
            return memo[(root, trigger)]
        if self._cannot_run(root, trigger):
            memo[(root, trigger)] = root
            return root
        path, pending, on_path = [root], [iter(self._deps(root))], {root}
        while path:
            found: str | None = None
            descend: str | None = None
            for dep in pending[-1]:
                if dep in on_path:
                    continue
                key = (dep, trigger)
                if key in memo:
                    found = memo[key]
                elif self._cannot_run(dep, trigger):
                    found = memo[key] = dep
                else:
                    descend = dep
                if found is not None or descend is not None:
                    break
            if found is not None:
                for node in path:
                    memo[(node, trigger)] = found
                return found
            if descend is not None:
                path.append(descend)
                pending.append(iter(self._deps(descend)))
                on_path.add(descend)
                continue
            memo[(path[-1], trigger)] = None
            on_path.discard(path.pop())
            pending.pop()
        return None


def _check_reachable(
    op_id: str,
    dep: str,
    config: OperationConfig,
    target: OperationConfig,
    add: _Add,
    reach: _Reach,
) -> None:
    """A required operation whose dependency cannot run, or needs (at any depth) one that
    cannot, would fail every run it is in."""
    if not target.enabled:
        add(
            Code.UNREACHABLE_DEPENDENCY,
            op_id,
            f"required {op_id!r} depends on {dep!r}, which is disabled: every run would fail",
        )
        return
    triggers = config.triggers if config.triggers is not None else tuple(Trigger)
    never = sorted(t.value for t in triggers if not target.runs_on(t))
    if never:
        add(
            Code.UNREACHABLE_DEPENDENCY,
            op_id,
            f"required {op_id!r} runs on {', '.join(never)} but its dependency {dep!r} "
            "does not: every such run would fail",
        )
    causes = {t: reach.blocker(dep, t) for t in triggers if target.runs_on(t)}
    for cause in dict.fromkeys(c for c in causes.values() if c is not None):
        on = ", ".join(sorted(t.value for t, c in causes.items() if c == cause))
        why = "disabled" if not reach.enabled(cause) else f"not run on {on}"
        add(
            Code.UNREACHABLE_DEPENDENCY,
            op_id,
            f"required {op_id!r} depends on {dep!r}, which depends on {cause!r} "
            f"({why}): every run on {on} would fail",
        )
