"""Value objects that configure parsing and validation, and the violation record.

Limits and policies are frozen values passed into :func:`parse_plan` and
:func:`validate_plan`; nothing is read from class attributes or globals, so two
callers with different limits never affect each other.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from opsrun._config import require, require_at_least
from opsrun.errors import ConfigError

__all__ = ["PathPolicy", "PlanLimits", "Severity", "Violation"]

_MIB = 1024 * 1024

Severity = Literal["error", "warning"]


def _require_int(config: object, minimum: int, maximum: int | None, *names: str) -> None:
    """Check that each field is an ``int`` (not a bool) in ``minimum..maximum``."""
    for name in names:
        value = getattr(config, name)
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= minimum
        if maximum is None:
            require(config, name, ok, f"an integer >= {minimum}")
        else:
            require(config, name, ok and value <= maximum, f"an integer in {minimum}..{maximum}")


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanLimits:
    """Size and shape limits of a plan and of the answer it is parsed from.

    The JSON limits (``max_input_bytes``, ``max_json_depth``, ``max_number_chars``)
    guard the parser against hostile input; the others are plan rules reported by
    validation.

    Raises:
        ConfigError: a limit is not an integer (a number for ``pseudo_binary_ratio``)
            or is out of its range; the field is named in ``details["field"]``.
    """

    max_actions: int = 200
    """Actions per plan."""
    max_path_len: int = 240
    """Characters per path."""
    max_total_content_bytes: int = 5 * _MIB
    """UTF-8 bytes of all content and patches together."""
    max_file_bytes: int = 1 * _MIB
    """UTF-8 bytes of one action's content or patch."""
    pseudo_binary_ratio: float = 0.10
    """Largest allowed share of non-printable bytes in content."""
    max_input_bytes: int = 16 * _MIB
    """UTF-8 bytes of the raw LLM answer."""
    max_json_depth: int = 64
    """Deepest nesting of arrays and objects."""
    max_number_chars: int = 64
    """Longest integer or float literal, in characters."""
    max_fence_candidates: int = 32
    """Fenced blocks and raw JSON starts tried in best-effort mode."""

    def __post_init__(self) -> None:
        _require_int(self, 0, None, "max_actions", "max_total_content_bytes", "max_file_bytes")
        _require_int(self, 1, None, "max_path_len", "max_input_bytes", "max_fence_candidates")
        _require_int(self, 1, 512, "max_json_depth")
        _require_int(self, 1, 4000, "max_number_chars")
        require_at_least(self, 0.0, "pseudo_binary_ratio")
        require(self, "pseudo_binary_ratio", self.pseudo_binary_ratio <= 1.0, "a number <= 1.0")


#: Protected-path patterns on by default: environment files, keys and secrets.
DEFAULT_PROTECTED: tuple[str, ...] = (".env", "*.pem", "*.key", "*.p12", "id_rsa*", "**/secrets/**")
#: Default whitelist: extensions allowed for files written when the whitelist is on.
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
#: Default whitelist: extension-less names allowed when the whitelist is on.
DEFAULT_ALLOWED_NO_EXTENSION: tuple[str, ...] = (
    "README",
    "Makefile",
    ".gitignore",
    ".editorconfig",
    "Dockerfile",
    "LICENSE",
)
#: Default whitelist: names refused at any depth when the whitelist is on.
DEFAULT_WHITELIST_FORBIDDEN: tuple[str, ...] = (
    ".env",
    "*.key",
    "*.pem",
    "node_modules",
    ".git",
    "__pycache__",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class PathPolicy:
    """Which paths a plan may touch, beyond the always-on safety rules.

    ``.git`` and ``.opsrun`` (the apply journal) are refused at any depth in any
    case regardless of this policy. Matching is case-insensitive and applies to
    every segment of a path. Pattern and name fields take tuples of strings (a
    list is stored as a tuple).

    Raises:
        ConfigError: a pattern field is not a tuple or list of strings, or a switch
            is not a bool; the field is named in ``details["field"]``.
    """

    protected: tuple[str, ...] = DEFAULT_PROTECTED
    """Globs (fnmatch, per segment; ``**/x/**`` means a directory named x) that may not be
    edited or deleted, nor created over an existing file."""
    reserved_dirs: tuple[str, ...] = (".git", ".opsrun")
    """Directory names refused at any depth."""
    use_whitelist: bool = False
    """Apply the optional extension / name whitelist."""
    allowed_extensions: tuple[str, ...] = DEFAULT_ALLOWED_EXTENSIONS
    """Whitelisted file name endings."""
    allowed_no_extension: tuple[str, ...] = DEFAULT_ALLOWED_NO_EXTENSION
    """Whitelisted extension-less names."""
    whitelist_forbidden: tuple[str, ...] = DEFAULT_WHITELIST_FORBIDDEN
    """Globs refused at any depth while the whitelist is on."""
    forbidden_prefixes: tuple[str, ...] = ()
    """Path prefixes refused (``"build/"``, ``"vendor"``), compared case-insensitively with
    the path as written; ``".."`` and ``"/"`` are always refused anyway."""
    check_elided_content: bool = True
    """Refuse edits of existing files whose new text elides code with placeholders."""
    check_elided_in_creates: bool = False
    """Also check CREATE_FILE content for elision placeholders."""
    block_unknown_memory_keys: bool = False
    """Report unknown memory_patch keys as errors instead of warnings."""

    @classmethod
    def from_whitelist(cls, whitelist: Mapping[str, Any], **overrides: Any) -> PathPolicy:
        """A policy with the whitelist on, from the whitelist file's JSON object.

        The keys are those of the protocol's whitelist file: ``allowed_extensions``,
        ``allowed_no_extension``, ``forbidden_paths`` (globs refused at any depth) and
        ``forbidden_prefixes``; any may be left out to keep the default. ``overrides``
        sets other fields.

        Example::

            policy = PathPolicy.from_whitelist(json.loads(Path("whitelist.json").read_text()))

        Raises:
            ConfigError: an unknown key, or a value that is not a list of strings.
        """
        if not isinstance(whitelist, Mapping):
            raise ConfigError("a whitelist is a JSON object", code="config_error")
        unknown = sorted(set(whitelist) - set(_WHITELIST_KEYS))
        if unknown:
            raise ConfigError(
                f"unknown whitelist key(s) {', '.join(map(repr, unknown))}; known: "
                + ", ".join(_WHITELIST_KEYS),
                code="config_error",
                details={"field": unknown[0]},
            )
        fields: dict[str, Any] = {_WHITELIST_KEYS[k]: v for k, v in whitelist.items()}
        return cls(**({"use_whitelist": True} | fields | overrides))

    def __post_init__(self) -> None:
        for name in _PATTERN_FIELDS:
            value = getattr(self, name)
            if isinstance(value, list):
                value = tuple(value)
                object.__setattr__(self, name, value)
            ok = isinstance(value, tuple) and all(isinstance(item, str) for item in value)
            require(self, name, ok, "a tuple of strings")
        for name in _SWITCHES:
            require(self, name, isinstance(getattr(self, name), bool), "a bool")


_PATTERN_FIELDS = (
    "protected",
    "reserved_dirs",
    "allowed_extensions",
    "allowed_no_extension",
    "whitelist_forbidden",
    "forbidden_prefixes",
)
_WHITELIST_KEYS = {
    "allowed_extensions": "allowed_extensions",
    "allowed_no_extension": "allowed_no_extension",
    "forbidden_paths": "whitelist_forbidden",
    "forbidden_prefixes": "forbidden_prefixes",
}
"""The whitelist file's keys and the PathPolicy fields they set."""
_SWITCHES = (
    "use_whitelist",
    "check_elided_content",
    "check_elided_in_creates",
    "block_unknown_memory_keys",
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
