"""Public functions of opsrun.protocol take their options by keyword only."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path

import pytest

import opsrun.protocol
from opsrun.protocol import FileSystem, parse_plan, validate_plan

# Required inputs that stay positional beyond the first two: a range is three values.
POSITIONAL_INPUTS = {"replace_range": 4, "apply_memory_patch": 3}

FUNCTIONS = sorted(
    name for name in opsrun.protocol.__all__ if inspect.isfunction(getattr(opsrun.protocol, name))
)


def positional(function: Callable[..., object]) -> list[inspect.Parameter]:
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return [p for p in inspect.signature(function).parameters.values() if p.kind in kinds]


@pytest.mark.parametrize("name", FUNCTIONS)
def test_options_are_keyword_only(name: str) -> None:
    params = positional(getattr(opsrun.protocol, name))
    assert [p.name for p in params if p.default is not inspect.Parameter.empty] == []
    assert len(params) <= POSITIONAL_INPUTS.get(name, 2)


def test_file_system_open_takes_mode_by_keyword() -> None:
    assert [p.name for p in positional(FileSystem.open)] == ["self", "name", "flags"]


def test_options_given_by_position_are_refused(tmp_path: Path) -> None:
    plan = parse_plan('{"actions": [], "summary": "NO_CHANGES: none"}')
    with pytest.raises(TypeError):
        parse_plan("{}", 2)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        validate_plan(plan, "apply")  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        opsrun.protocol.apply_plan(plan, tmp_path, ["true"])  # type: ignore[call-arg]
