"""DriverConfig: every knob of the plan driver, with the protocol's defaults."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from opsrun._config import require, require_at_least

from ._apply import CheckCommand
from ._diet import ContextLimits
from ._limits import PathPolicy, PlanLimits

__all__ = ["DriverConfig", "DriverMode"]

DriverMode = Literal["plan", "apply"]

_STRINGS = ("apply_triggers", "plan_words", "apply_words", "remember_words")


@dataclass(frozen=True, slots=True, kw_only=True)
class DriverConfig:
    """How :class:`PlanDriver` proposes, repairs, falls back and applies.

    The defaults are the protocol's. Tuples of words may be given as lists.

    Raises:
        ConfigError: a field has the wrong type or is out of range; the field is named
            in ``details["field"]``.
    """

    protocol_version: Literal[1, 2] = 2
    """Protocol the model is asked for first."""
    fallback_to_v1: bool = True
    """In APPLY, retry once with protocol v1 when v2 cannot express the change."""
    default_mode: DriverMode = "plan"
    """Mode of a message no prefix, trigger or keyword decides."""
    strict_json: bool = True
    """Send ``response_format`` when the provider supports it (else best-effort parsing)."""
    repair_attempts: int = 1
    """Repair rounds per protocol attempt for unparseable or invalid answers."""

    temperature: float = 0.0
    """Sampling temperature."""
    top_p: float = 1.0
    """Nucleus sampling mass."""
    presence_penalty: float = 0.0
    """Presence penalty."""
    frequency_penalty: float = 0.0
    """Frequency penalty."""
    max_tokens: int = 16384
    """Output token limit."""
    max_tokens_large_input: int = 4096
    """Output token limit when the prompt is longer than ``large_input_chars``."""
    large_input_chars: int = 80_000
    """Prompt length (characters) above which ``max_tokens_large_input`` applies."""
    timeout: float = 90.0
    """Seconds one model call may take."""
    provider_attempts: int = 3
    """Calls per request when the provider is rate limited or unavailable."""

    check: CheckCommand | None = None
    """Command run after applying (argv in the root, or a callable); failure rolls back."""
    check_timeout: float = 600.0
    """Seconds an argv check may run."""
    allow_delete: bool = False
    """The user's standing confirmation for DELETE_FILE / DELETE_DIR actions."""
    normalize_eol: bool = False
    """Convert CRLF to LF in written content."""
    patch_tolerance: Literal["exact", "whitespace", "loose"] = "exact"
    """How sloppy a PATCH_FILE hunk may be (``apply_patch``'s ``tolerance``)."""
    limits: PlanLimits = field(default_factory=PlanLimits)
    """Plan size limits."""
    policy: PathPolicy = field(default_factory=PathPolicy)
    """Which paths plans and context reads may touch."""

    max_file_bytes: int = 2 * 1024 * 1024
    """Largest file read into the prompt; a bigger one is refused in the context."""
    max_context_rounds: int = 2
    """Rounds per turn in which the model's ``context_requests`` are fulfilled."""
    context: ContextLimits = field(default_factory=ContextLimits)
    """The context diet's budget (blocks, characters per file and in all)."""
    auto_collect: bool = True
    """Read the files a traceback names (and manifests for import errors) up front."""
    memory_updates: Literal["never", "when_asked", "always"] = "when_asked"
    """When a ``memory_patch`` is saved: ``when_asked`` = the message asks to remember."""
    remember_words: tuple[str, ...] = ("remember", "from now on", "запомни", "впредь")
    """Phrases that ask to remember (case-insensitive, anywhere in the message)."""
    use_project_test_command: bool = True
    """Without ``check``, run the project's ``default_test_command`` after applying."""

    write_traces: bool = False
    """Write each turn's trace to ``<root>/.opsrun/traces/<trace_id>.json``."""
    trace_raw: bool = False
    """Keep the model's raw answers in the trace (secrets masked)."""

    apply_triggers: tuple[str, ...] = ("ok", "ок", "apply", "применяй", "да")
    """Whole messages that apply the saved plan."""
    plan_words: tuple[str, ...] = ("fix", "debug", "исправь", "почини")
    """Words that start a message in PLAN."""
    apply_words: tuple[str, ...] = ("create", "generate", "создай", "сгенерируй")
    """Words that start a message in APPLY."""

    def __post_init__(self) -> None:
        require(self, "protocol_version", self.protocol_version in (1, 2), "1 or 2")
        require(self, "default_mode", self.default_mode in ("plan", "apply"), "'plan' or 'apply'")
        for name in ("fallback_to_v1", "strict_json", "allow_delete", "normalize_eol"):
            require(self, name, isinstance(getattr(self, name), bool), "a bool")
        require(self, "write_traces", isinstance(self.write_traces, bool), "a bool")
        for name in ("auto_collect", "use_project_test_command"):
            require(self, name, isinstance(getattr(self, name), bool), "a bool")
        require_at_least(self, 0, "max_context_rounds")
        require(self, "context", isinstance(self.context, ContextLimits), "a ContextLimits")
        require(
            self,
            "memory_updates",
            self.memory_updates in ("never", "when_asked", "always"),
            "'never', 'when_asked' or 'always'",
        )
        require(self, "trace_raw", isinstance(self.trace_raw, bool), "a bool")
        require(
            self,
            "patch_tolerance",
            self.patch_tolerance in ("exact", "whitespace", "loose"),
            "'exact', 'whitespace' or 'loose'",
        )
        require_at_least(self, 0, "repair_attempts", "temperature", "presence_penalty")
        require_at_least(self, 1, "max_tokens", "max_tokens_large_input", "large_input_chars")
        require_at_least(self, 1, "provider_attempts", "max_file_bytes")
        require(self, "top_p", _number(self.top_p) and 0 < self.top_p <= 1, "a number in (0, 1]")
        require(self, "frequency_penalty", _number(self.frequency_penalty), "a number")
        require(self, "timeout", _number(self.timeout) and self.timeout > 0, "a number > 0")
        require(
            self,
            "check_timeout",
            _number(self.check_timeout) and self.check_timeout > 0,
            "a number > 0",
        )
        for name in ("repair_attempts", "max_tokens", "max_tokens_large_input"):
            require(self, name, isinstance(getattr(self, name), int), "an integer")
        require(self, "limits", isinstance(self.limits, PlanLimits), "a PlanLimits")
        require(self, "policy", isinstance(self.policy, PathPolicy), "a PathPolicy")
        for name in _STRINGS:
            value = getattr(self, name)
            if isinstance(value, list):
                value = tuple(value)
                object.__setattr__(self, name, value)
            ok = isinstance(value, tuple) and all(isinstance(v, str) and v for v in value)
            require(self, name, ok, "a tuple of non-empty strings")

    def output_tokens(self, input_chars: int) -> int:
        """The output limit for a prompt of ``input_chars`` characters."""
        if input_chars > self.large_input_chars:
            return min(self.max_tokens, self.max_tokens_large_input)
        return self.max_tokens


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
