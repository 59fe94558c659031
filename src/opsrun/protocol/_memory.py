"""memory_patch: the whitelist of dotted preference keys, checking and applying.

A plan may carry ``memory_patch``, a flat object of dotted keys
(``"project.default_test_command": "pytest -q"``). Only whitelisted keys are
applied; anything else is dropped and reported as ``ERR_MEMORY_PATCH_UNKNOWN_KEY``
(a warning unless :attr:`PathPolicy.block_unknown_memory_keys` is set). A value
of the wrong type is ``ERR_MEMORY_PATCH_TYPE`` (an error). ``null`` means "leave
unchanged", so a provider that must send every key can send ``null`` for most.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, TypeAdapter
from pydantic import ValidationError as PydanticValidationError

from ._limits import Violation

__all__ = [
    "MEMORY_PATCH_KEYS",
    "ProjectPrefs",
    "UserPrefs",
    "apply_memory_patch",
    "check_memory_patch",
]

PreferredStyle = Literal["brief", "normal", "verbose"]
RiskTolerance = Literal["low", "medium", "high"]
# The stored preference is patch_first or plan_first; LLM answers also write plan or
# apply into the same key, so all four are accepted.
OutputFormat = Literal["patch_first", "plan_first", "plan", "apply"]
AskBudget = Annotated[int, Field(ge=0, le=2)]


class UserPrefs(BaseModel):
    """Operator preferences (stored per machine)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    preferred_style: PreferredStyle | None = Field(default=None, description="Answer length.")
    ask_budget: AskBudget | None = Field(
        default=None, description="How many clarifying questions (0..2)."
    )
    risk_tolerance: RiskTolerance | None = Field(default=None, description="low, medium, high.")
    default_language: str | None = Field(default=None, description="e.g. python.")
    output_format: OutputFormat | None = Field(default=None, description="Plan-first or not.")


class ProjectPrefs(BaseModel):
    """Project preferences (stored in the repository)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    default_test_command: str | None = Field(default=None, description="e.g. pytest -q.")
    default_lint_command: str | None = Field(default=None, description="e.g. ruff check .")
    default_format_command: str | None = Field(default=None, description="e.g. ruff format .")
    package_manager: str | None = Field(default=None, description="e.g. uv, npm.")
    build_command: str | None = Field(default=None, description="How to build.")
    src_roots: tuple[str, ...] = Field(default=(), description="Source directories.")
    test_roots: tuple[str, ...] = Field(default=(), description="Test directories.")
    ci_notes: str | None = Field(default=None, description="Free text about CI.")


@dataclass(frozen=True)
class _Key:
    scope: Literal["user", "project"]
    field: str
    adapter: TypeAdapter[Any]
    type_name: str


def _shell_words(value: str) -> str:
    """``value`` when :func:`shlex.split` can split it (no unclosed quote), else ValueError."""
    shlex.split(value)
    return value


_STR: TypeAdapter[Any] = TypeAdapter(str)
_STR_LIST: TypeAdapter[Any] = TypeAdapter(list[str])
_COMMAND: TypeAdapter[Any] = TypeAdapter(Annotated[str, AfterValidator(_shell_words)])
_COMMAND_TYPE = "string of shell words (no unclosed quote)"


def _key(dotted: str, adapter: TypeAdapter[Any], type_name: str) -> tuple[str, _Key]:
    scope, _, field = dotted.partition(".")
    assert scope in ("user", "project")
    return dotted, _Key(scope, field, adapter, type_name)  # type: ignore[arg-type]


#: The whitelist: dotted key → how its value is checked.
MEMORY_PATCH_KEYS: Mapping[str, _Key] = dict(
    [
        _key("user.preferred_style", TypeAdapter(PreferredStyle), "brief|normal|verbose"),
        _key("user.ask_budget", TypeAdapter(AskBudget), "integer 0..2"),
        _key("user.risk_tolerance", TypeAdapter(RiskTolerance), "low|medium|high"),
        _key("user.default_language", _STR, "string"),
        _key("user.output_format", TypeAdapter(OutputFormat), "patch_first|plan_first|plan|apply"),
        _key("project.default_test_command", _COMMAND, _COMMAND_TYPE),
        _key("project.default_lint_command", _COMMAND, _COMMAND_TYPE),
        _key("project.default_format_command", _COMMAND, _COMMAND_TYPE),
        _key("project.package_manager", _STR, "string"),
        _key("project.build_command", _COMMAND, _COMMAND_TYPE),
        _key("project.src_roots", _STR_LIST, "array of strings"),
        _key("project.test_roots", _STR_LIST, "array of strings"),
        _key("project.ci_notes", _STR, "string"),
    ]
)


def memory_patch_provider_schema() -> dict[str, Any]:
    """Return a JSON schema object listing every whitelisted key (used by provider schemas)."""
    props = {name: key.adapter.json_schema() for name, key in MEMORY_PATCH_KEYS.items()}
    return {"type": "object", "properties": props}


def _check_value(key: _Key, value: Any) -> Any:
    # strict: no "1" → 1 coercion, no bool for int.
    return key.adapter.validate_python(value, strict=True)


def check_memory_patch(
    patch: Mapping[str, Any] | None, *, block_unknown: bool = False
) -> tuple[dict[str, Any], list[Violation]]:
    """Split a memory_patch into the values that may be applied and the violations.

    Args:
        patch: The plan's ``memory_patch`` (``None`` means no patch).
        block_unknown: Report unknown keys as errors rather than warnings.

    Returns:
        ``(clean, violations)``: ``clean`` holds whitelisted keys with valid,
        non-null values; unknown keys and wrong types are left out and reported.
        Never raises.
    """
    clean: dict[str, Any] = {}
    violations: list[Violation] = []
    if not patch:
        return clean, violations
    for name, value in patch.items():
        key = MEMORY_PATCH_KEYS.get(name)
        if key is None:
            violations.append(
                Violation(
                    code="ERR_MEMORY_PATCH_UNKNOWN_KEY",
                    message=f"memory_patch key {name!r} is not in the whitelist; it is dropped",
                    severity="error" if block_unknown else "warning",
                )
            )
            continue
        if value is None:
            continue
        try:
            clean[name] = _check_value(key, value)
        except PydanticValidationError:
            violations.append(
                Violation(
                    code="ERR_MEMORY_PATCH_TYPE",
                    message=f"memory_patch key {name!r} must be {key.type_name}",
                )
            )
    return clean, violations


def apply_memory_patch(
    patch: Mapping[str, Any] | None, user: UserPrefs, project: ProjectPrefs
) -> tuple[UserPrefs, ProjectPrefs]:
    """Apply the valid whitelisted part of a memory_patch to preference models.

    Unknown keys, wrong types and ``null`` values are skipped (use
    :func:`check_memory_patch` or :func:`validate_plan` to see them).

    Args:
        patch: The plan's ``memory_patch``.
        user: Current operator preferences.
        project: Current project preferences.

    Returns:
        New ``(user, project)`` values; the inputs are not modified. Never raises.
    """
    clean, _ = check_memory_patch(patch)
    user_update: dict[str, Any] = {}
    project_update: dict[str, Any] = {}
    for name, value in clean.items():
        key = MEMORY_PATCH_KEYS[name]
        target = user_update if key.scope == "user" else project_update
        target[key.field] = tuple(value) if isinstance(value, list) else value
    new_user = UserPrefs.model_validate({**user.model_dump(), **user_update})
    new_project = ProjectPrefs.model_validate({**project.model_dump(), **project_update})
    return new_user, new_project
