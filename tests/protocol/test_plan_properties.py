"""Invariants: nothing but PlanError escapes parsing; generated valid plans validate clean."""

from __future__ import annotations

import json
from typing import Any, Literal

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from opsrun.errors import PlanError
from opsrun.protocol import Plan, parse_plan, validate_plan

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
kinds = st.sampled_from(["CREATE_FILE", "CREATE_DIR", "UPDATE_FILE", "DELETE_FILE", "DELETE_DIR"])
plan_like = st.fixed_dictionaries(
    {"actions": st.lists(st.fixed_dictionaries({"kind": kinds, "path": st.text(max_size=12)}))},
    optional={"summary": st.none() | st.text(max_size=20), "memory_patch": json_values},
)


MODES: tuple[Literal["plan", "apply"], ...] = ("plan", "apply")


def _check(text: str, version: int, strict: bool) -> None:
    plan: Plan | None = None
    code = ""
    try:
        plan = parse_plan(text, version=version, strict=strict)
    except PlanError as exc:
        code = exc.code
    if plan is None:
        assert code.startswith("ERR_")
        return
    for mode in MODES:
        violations = validate_plan(plan, mode=mode)
        assert all(v.code != "ERR_VALIDATION_INTERNAL" for v in violations)


@given(st.text(max_size=200), st.sampled_from([1, 2]), st.booleans())
def test_arbitrary_text_raises_only_plan_error(text: str, version: int, strict: bool) -> None:
    _check(text, version, strict)


@given(json_values | plan_like, st.sampled_from([1, 2]), st.booleans())
def test_arbitrary_json_raises_only_plan_error(value: Any, version: int, strict: bool) -> None:
    _check(json.dumps(value), version, strict)
    _check(f"Here:\n```json\n{json.dumps(value, indent=1)}\n```", version, strict)


_WINDOWS_DEVICES = {
    "con",
    "prn",
    "aux",
    "nul",
    *(f"{d}{i}" for d in ("com", "lpt") for i in range(1, 10)),
}
name = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-", min_size=1, max_size=8).filter(
    lambda n: n not in _WINDOWS_DEVICES  # valid plans avoid names Windows reserves
)
safe_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cc", "Cs"), blacklist_characters="\x00"),
    max_size=200,
) | st.text(alphabet="abc \n\t\r", max_size=50)


@st.composite
def valid_plans(draw: st.DrawFn) -> dict[str, Any]:
    count = draw(st.integers(min_value=0, max_value=8))
    actions = []
    for i in range(count):
        path = f"d{i}/" + draw(name) + ".py"  # distinct top directories: no conflicts
        kind = draw(st.sampled_from(["CREATE_FILE", "UPDATE_FILE", "CREATE_DIR", "DELETE_FILE"]))
        if kind == "CREATE_DIR":
            actions.append({"kind": kind, "path": f"d{i}/" + draw(name)})
        elif kind == "DELETE_FILE":
            actions.append({"kind": kind, "path": path})
        else:
            actions.append({"kind": kind, "path": path, "content": draw(safe_text)})
    summary = draw(st.text(max_size=30)) if actions else "NO_CHANGES: " + draw(st.text(max_size=30))
    memory = draw(
        st.fixed_dictionaries(
            {},
            optional={
                "user.ask_budget": st.integers(min_value=0, max_value=2),
                "project.src_roots": st.lists(name, max_size=3),
                "user.risk_tolerance": st.sampled_from(["low", "medium", "high"]),
            },
        )
    )
    return {"actions": actions, "summary": summary, "memory_patch": memory}


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(valid_plans(), st.sampled_from([1, 2]))
def test_generated_valid_plans_have_no_violations(answer: dict[str, Any], version: int) -> None:
    plan = parse_plan(json.dumps(answer), version=version, strict=True)
    assert isinstance(plan, Plan)
    assert validate_plan(plan, mode="apply") == []
