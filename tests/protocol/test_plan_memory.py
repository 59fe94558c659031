"""memory_patch: whitelist, types, and applying to preference models."""

from __future__ import annotations

from opsrun.protocol import (
    MEMORY_PATCH_KEYS,
    ProjectPrefs,
    UserPrefs,
    apply_memory_patch,
    check_memory_patch,
)


def test_whitelist_is_the_protocol_list() -> None:
    assert set(MEMORY_PATCH_KEYS) == {
        "user.preferred_style",
        "user.ask_budget",
        "user.risk_tolerance",
        "user.default_language",
        "user.output_format",
        "project.default_test_command",
        "project.default_lint_command",
        "project.default_format_command",
        "project.package_manager",
        "project.build_command",
        "project.src_roots",
        "project.test_roots",
        "project.ci_notes",
    }


def test_check_splits_clean_values_from_violations() -> None:
    clean, violations = check_memory_patch(
        {
            "project.default_test_command": "pytest -q",
            "user.ask_budget": True,
            "user.preferred_style": "brief",
            "project.src_roots": ["src", 3],
            "user.risk_tolerance": None,
            "user.api_key": "sk-123",
        }
    )
    assert clean == {"project.default_test_command": "pytest -q", "user.preferred_style": "brief"}
    assert [(v.code, v.severity) for v in violations] == [
        ("ERR_MEMORY_PATCH_TYPE", "error"),
        ("ERR_MEMORY_PATCH_TYPE", "error"),
        ("ERR_MEMORY_PATCH_UNKNOWN_KEY", "warning"),
    ]
    _, blocked = check_memory_patch({"x": 1}, block_unknown=True)
    assert blocked[0].severity == "error"
    assert check_memory_patch(None) == ({}, [])


def test_apply_updates_only_valid_whitelisted_keys() -> None:
    user = UserPrefs(preferred_style="verbose", default_language="python")
    project = ProjectPrefs(default_lint_command="ruff check .")
    new_user, new_project = apply_memory_patch(
        {
            "user.preferred_style": "brief",
            "user.ask_budget": 5,
            "project.src_roots": ["src", "lib"],
            "project.default_test_command": "pytest -q",
            "project.ci_notes": None,
            "user.shell": "zsh",
        },
        user,
        project,
    )
    assert new_user == UserPrefs(preferred_style="brief", default_language="python")
    assert new_project == ProjectPrefs(
        default_lint_command="ruff check .",
        default_test_command="pytest -q",
        src_roots=("src", "lib"),
    )
    assert user.preferred_style == "verbose"
