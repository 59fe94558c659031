"""Value objects that configure parsing and validation, and the violation record.

Limits and policies are frozen values passed into :func:`parse_plan` and
:func:`validate_plan`; nothing is read from class attributes or globals, so two
callers with different limits never affect each other.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["PathPolicy", "PlanLimits", "Severity", "Violation"]

_MIB = 1024 * 1024

Severity = Literal["error", "warning"]


class PlanLimits(BaseModel):
    """Size and shape limits. Defaults are the protocol's numbers.

    The JSON limits (``max_input_bytes``, ``max_json_depth``, ``max_number_chars``)
    guard the parser against hostile input; the others are plan rules reported by
    validation.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_actions: int = Field(default=200, ge=0, description="Actions per plan.")
    max_path_len: int = Field(default=240, ge=1, description="Characters per path.")
    max_total_content_bytes: int = Field(
        default=5 * _MIB, ge=0, description="UTF-8 bytes of all content and patches together."
    )
    max_file_bytes: int = Field(
        default=1 * _MIB, ge=0, description="UTF-8 bytes of one action's content or patch."
    )
    pseudo_binary_ratio: float = Field(
        default=0.10,
        ge=0.0,
        le=1.0,
        description="Largest allowed share of non-printable bytes in content.",
    )
    max_input_bytes: int = Field(
        default=16 * _MIB, ge=1, description="UTF-8 bytes of the raw LLM answer."
    )
    max_json_depth: int = Field(
        default=64, ge=1, le=512, description="Deepest nesting of arrays and objects."
    )
    max_number_chars: int = Field(
        default=64, ge=1, le=4000, description="Longest integer or float literal, in characters."
    )
    max_fence_candidates: int = Field(
        default=32, ge=1, description="Fenced blocks and raw JSON starts tried in best-effort mode."
    )


#: Patterns of the protocol's protected-path denylist.
DEFAULT_PROTECTED: tuple[str, ...] = (".env", "*.pem", "*.key", "*.p12", "id_rsa*", "**/secrets/**")
#: Seed whitelist: extensions allowed for files written when the whitelist is on.
DEFAULT_ALLOWED_EXTENSIONS: tuple[str, ...] = (
    ".py",
    ".ts",
    ".tsx",
    ".js",
    ".jsx",
    ".json",
    ".md",
    ".yaml",
    ".yml",
    ".toml",
    ".css",
    ".html",
    ".sql",
    ".sh",
    ".env.example",
)
#: Seed whitelist: extension-less names allowed when the whitelist is on.
DEFAULT_ALLOWED_NO_EXTENSION: tuple[str, ...] = (
    "README",
    "Makefile",
    ".gitignore",
    ".editorconfig",
    "Dockerfile",
    "LICENSE",
)
#: Seed whitelist: names refused at any depth when the whitelist is on.
DEFAULT_WHITELIST_FORBIDDEN: tuple[str, ...] = (
    ".env",
    "*.key",
    "*.pem",
    "node_modules",
    ".git",
    "__pycache__",
)


class PathPolicy(BaseModel):
    """Which paths a plan may touch, beyond the always-on safety rules.

    ``.git`` and ``.opsrun`` (the apply journal) are refused at any depth in any
    case regardless of this policy. Matching is case-insensitive and applies to
    every segment of a path.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    protected: tuple[str, ...] = Field(
        default=DEFAULT_PROTECTED,
        description=(
            "Globs (fnmatch, per segment; ``**/x/**`` means a directory named x) that may not "
            "be edited or deleted, nor created over an existing file."
        ),
    )
    reserved_dirs: tuple[str, ...] = Field(
        default=(".git", ".opsrun"), description="Directory names refused at any depth."
    )
    use_whitelist: bool = Field(
        default=False, description="Apply the optional extension / name whitelist."
    )
    allowed_extensions: tuple[str, ...] = Field(
        default=DEFAULT_ALLOWED_EXTENSIONS, description="Whitelisted file name endings."
    )
    allowed_no_extension: tuple[str, ...] = Field(
        default=DEFAULT_ALLOWED_NO_EXTENSION, description="Whitelisted extension-less names."
    )
    whitelist_forbidden: tuple[str, ...] = Field(
        default=DEFAULT_WHITELIST_FORBIDDEN,
        description="Globs refused at any depth while the whitelist is on.",
    )
    check_elided_content: bool = Field(
        default=True,
        description="Refuse edits of existing files whose new text elides code with placeholders.",
    )
    check_elided_in_creates: bool = Field(
        default=False, description="Also check CREATE_FILE content for elision placeholders."
    )
    block_unknown_memory_keys: bool = Field(
        default=False,
        description="Report unknown memory_patch keys as errors instead of warnings.",
    )


class Violation(BaseModel):
    """One problem found in a plan.

    ``code`` is stable (``ERR_*``); ``message`` is for people and may change.
    Warnings (``severity="warning"``) describe something dropped or ignored and
    do not block applying the plan.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    code: str = Field(description="Stable ERR_* code.")
    message: str = Field(description="Human-readable explanation.")
    path: str | None = Field(default=None, description="The path concerned, if any.")
    action_index: int | None = Field(default=None, description="Index into plan.actions.")
    context_index: int | None = Field(default=None, description="Index into plan.context_requests.")
    severity: Severity = Field(default="error", description="error blocks; warning does not.")

    @property
    def blocking(self) -> bool:
        """Whether this violation stops the plan from being applied."""
        return self.severity == "error"
