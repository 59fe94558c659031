"""PlanLimits and PathPolicy: frozen keyword-only values that refuse bad fields by name."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from opsrun.errors import ConfigError
from opsrun.protocol import PathPolicy, PlanLimits, parse_plan, validate_plan

BAD_LIMITS: list[tuple[str, object]] = [
    ("max_actions", -1),
    ("max_actions", 1.5),
    ("max_actions", True),
    ("max_actions", "200"),
    ("max_path_len", 0),
    ("max_total_content_bytes", -1),
    ("max_file_bytes", -5),
    ("max_file_bytes", None),
    ("pseudo_binary_ratio", -0.01),
    ("pseudo_binary_ratio", 1.01),
    ("pseudo_binary_ratio", float("nan")),
    ("pseudo_binary_ratio", False),
    ("max_input_bytes", 0),
    ("max_json_depth", 0),
    ("max_json_depth", 513),
    ("max_number_chars", 0),
    ("max_number_chars", 4001),
    ("max_fence_candidates", 0),
]

BAD_POLICIES: list[tuple[str, object]] = [
    ("protected", ".env"),
    ("protected", (".env", 1)),
    ("reserved_dirs", None),
    ("allowed_extensions", {".py"}),
    ("allowed_no_extension", b"README"),
    ("whitelist_forbidden", (None,)),
    ("forbidden_prefixes", "build/"),
    ("use_whitelist", 1),
    ("check_elided_content", "yes"),
    ("check_elided_in_creates", None),
    ("block_unknown_memory_keys", 0),
]


def config_error(cls: type[Any], field: str, value: object) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        cls(**{field: value})
    return info.value


@pytest.mark.parametrize(("field", "value"), BAD_LIMITS)
def test_a_bad_limit_is_a_config_error_naming_the_field(field: str, value: object) -> None:
    error = config_error(PlanLimits, field, value)
    assert error.code == "config_error"
    assert error.details == {"config": "PlanLimits", "field": field}
    assert f"PlanLimits.{field} " in error.message


@pytest.mark.parametrize(("field", "value"), BAD_POLICIES)
def test_a_bad_policy_field_is_a_config_error_naming_the_field(field: str, value: object) -> None:
    error = config_error(PathPolicy, field, value)
    assert error.code == "config_error"
    assert error.details == {"config": "PathPolicy", "field": field}
    assert f"PathPolicy.{field} " in error.message


def test_every_field_has_a_bad_value_in_the_tables() -> None:
    assert {f.name for f in dataclasses.fields(PlanLimits)} == {f for f, _ in BAD_LIMITS}
    assert {f.name for f in dataclasses.fields(PathPolicy)} == {f for f, _ in BAD_POLICIES}


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_actions", 0),
        ("max_total_content_bytes", 0),
        ("max_file_bytes", 0),
        ("pseudo_binary_ratio", 0),
        ("pseudo_binary_ratio", 1),
        ("max_json_depth", 512),
        ("max_number_chars", 4000),
    ],
)
def test_limits_at_the_edge_of_their_range_are_accepted(field: str, value: int) -> None:
    assert getattr(PlanLimits(**{field: value}), field) == value


def test_defaults_are_the_protocol_numbers() -> None:
    assert dataclasses.asdict(PlanLimits()) == {
        "max_actions": 200,
        "max_path_len": 240,
        "max_total_content_bytes": 5 * 1024 * 1024,
        "max_file_bytes": 1024 * 1024,
        "pseudo_binary_ratio": 0.10,
        "max_input_bytes": 16 * 1024 * 1024,
        "max_json_depth": 64,
        "max_number_chars": 64,
        "max_fence_candidates": 32,
    }
    policy = PathPolicy()
    assert policy.protected == (".env", "*.pem", "*.key", "*.p12", "id_rsa*", "**/secrets/**")
    assert policy.reserved_dirs == (".git", ".opsrun")
    assert (policy.use_whitelist, policy.check_elided_content) == (False, True)
    assert (policy.check_elided_in_creates, policy.block_unknown_memory_keys) == (False, False)


def test_values_are_frozen_keyword_only_and_hashable() -> None:
    limits = PlanLimits()
    with pytest.raises(dataclasses.FrozenInstanceError):
        limits.max_actions = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        PlanLimits(200)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        PathPolicy(unknown=True)  # type: ignore[call-arg]
    assert hash(PathPolicy()) == hash(PathPolicy())
    assert PlanLimits() == PlanLimits()


def test_replace_checks_the_new_value_too() -> None:
    assert dataclasses.replace(PlanLimits(), max_actions=3).max_actions == 3
    with pytest.raises(ConfigError) as info:
        dataclasses.replace(PlanLimits(), max_actions=-3)
    assert info.value.details["field"] == "max_actions"


def test_a_list_of_patterns_is_stored_as_a_tuple() -> None:
    policy = PathPolicy(protected=["*.secret"])  # type: ignore[arg-type]
    assert policy.protected == ("*.secret",)
    plan = parse_plan('{"actions": [{"kind": "DELETE_FILE", "path": "a.secret"}]}')
    assert [v.code for v in validate_plan(plan, policy=policy)] == ["ERR_PROTECTED_PATH"]
