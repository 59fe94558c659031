"""Params models of the built-in kinds ``llm`` and ``template``."""

from __future__ import annotations

from typing import Annotated, Literal, TypeAlias

from pydantic import Field

from ._artifact import WriteArtifactSpec
from ._base import Model
from ._enums import DomainRole


class AppendAfterLastUserTarget(Model):
    """Send the result as a message right after the current user message."""

    type: Literal["prompt.append_after_last_user"] = "prompt.append_after_last_user"
    role: DomainRole = DomainRole.DEVELOPER
    """Domain role of the inserted message."""


class SystemUpdateTarget(Model):
    """Send the result into the system prompt."""

    type: Literal["prompt.system_update"] = "prompt.system_update"
    mode: Literal["prepend", "append", "replace"] = "append"
    """How the result combines with the current system prompt."""


class InsertAtDepthTarget(Model):
    """Send the result as a message at a depth from the end of the history."""

    type: Literal["prompt.insert_at_depth"] = "prompt.insert_at_depth"
    depth_from_end: int = Field(default=0, le=0)
    """0 = tail, -N = before the N-th history message from the end."""
    role: DomainRole = DomainRole.DEVELOPER
    """Domain role of the inserted message."""


PromptEffectTarget: TypeAlias = Annotated[
    AppendAfterLastUserTarget | SystemUpdateTarget | InsertAtDepthTarget,
    Field(discriminator="type"),
]
"""Where a built-in operation sends its text as a prompt-time effect (before hook only)."""


class Samplers(Model):
    """Sampling parameters; only numbers."""

    temperature: float | None = Field(default=None, ge=0)
    """Sampling temperature."""
    top_p: float | None = Field(default=None, gt=0, le=1)
    """Nucleus sampling mass."""
    top_k: int | None = Field(default=None, ge=1)
    """Top-k sampling."""
    frequency_penalty: float | None = None
    """Frequency penalty."""
    presence_penalty: float | None = None
    """Presence penalty."""
    seed: int | None = None
    """Sampling seed, when the provider supports it."""


class Budget(Model):
    """Spending limits of one operation run."""

    max_cost_usd: float | None = Field(default=None, ge=0)
    """Calls whose reported cost exceeds this end ``error(budget_exceeded)``."""


class OutputSpec(Model):
    """What the aux LLM is expected to return."""

    mode: Literal["text", "json"] = "text"
    """``json`` parses the reply; a reply that does not parse is ``output_parse_error``."""
    schema_ref: str | None = None
    """Name of a JSON Schema the host registered; the parsed reply must validate."""


class RetryPolicy(Model):
    """Retries of the aux call."""

    max_attempts: int = Field(default=1, ge=1, le=10)
    """Attempts in total, the first included."""
    backoff_ms: int = Field(default=0, ge=0)
    """Wait between attempts (a provider's retry-after wins when longer)."""
    retry_on: tuple[Literal["timeout", "provider_error", "rate_limit"], ...] = ()
    """Which failures are retried."""


class LlmParams(Model):
    """``params`` of ``kind="llm"``: one aux LLM call per operation run."""

    provider_ref: str = Field(min_length=1)
    """Provider in the host's registry; no secrets."""
    model: str = Field(min_length=1)
    """Model name as the provider knows it."""
    credential_ref: str | None = None
    """Opaque reference resolved by the host at run time; never logged."""
    system: str | None = None
    """Liquid template of the system instruction."""
    prompt: str
    """Liquid template of the one user message."""
    strict_variables: bool = False
    """Undefined template variables are ``template_render_error`` when True."""
    max_input_tokens: int | None = Field(default=None, ge=1)
    """Soft limit on the rendered input, counted by the host's token counter."""
    samplers: Samplers = Field(default_factory=Samplers)
    """Sampling parameters."""
    max_output_tokens: int | None = Field(default=None, ge=1)
    """Output limit."""
    stop: tuple[str, ...] = ()
    """Stop sequences."""
    budget: Budget = Field(default_factory=Budget)
    """Spending limits."""
    output: OutputSpec = Field(default_factory=OutputSpec)
    """Expected output format."""
    write_artifact: WriteArtifactSpec
    """Where the result goes (required: an llm operation writes exactly one tag)."""
    prompt_effect: PromptEffectTarget | None = None
    """Also send the result into the effective prompt (before hook only)."""
    timeout_ms: int | None = Field(default=None, ge=1)
    """Timeout of one attempt."""
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    """Retries."""


class TemplateParams(Model):
    """``params`` of ``kind="template"``: one Liquid text rendered to a string."""

    template: str
    """The text; Liquid syntax is optional."""
    strict_variables: bool = False
    """Undefined template variables are ``template_render_error`` when True."""
    write_artifact: WriteArtifactSpec | None = None
    """Write the rendered string to this artifact."""
    prompt_effect: PromptEffectTarget | None = None
    """Send the rendered string into the effective prompt (before hook only)."""
