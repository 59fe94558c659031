"""Artifacts ``art.<tag>``: values, versions, retention and how they reach prompt and UI.

``history`` holds previous values, newest first, and never the current one.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Literal, TypeAlias

from pydantic import AfterValidator, Field, TypeAdapter, field_validator

from ._base import JsonObject, JsonValue, Model, well_formed
from ._enums import ArtifactUsage, ContentFormat, DomainRole

TAG_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
"""A tag is a Liquid-addressable identifier: ``art.world_state`` means tag ``world_state``."""

ArtifactSemantics: TypeAlias = str
"""What an artifact holds: ``state``, ``log/feed``, ``lore/memory``, ``intermediate`` or custom."""

KNOWN_SEMANTICS = ("state", "log/feed", "lore/memory", "intermediate")


def check_tag(tag: str) -> str:
    """Return ``tag`` if it is a valid artifact tag.

    Raises:
        ValueError: if the tag is not an identifier of at most 64 characters.
    """
    if not TAG_PATTERN.fullmatch(tag):
        raise ValueError(
            f"artifact tag {tag!r} must start with a letter or '_' and contain only "
            "letters, digits and '_' (at most 64 characters)"
        )
    return tag


Tag: TypeAlias = Annotated[str, AfterValidator(check_tag)]
"""An artifact tag, validated by :func:`check_tag`."""


# --- retention -------------------------------------------------------------------------


class OverwriteRetention(Model):
    """Keep only the latest value; ``history`` stays empty."""

    mode: Literal["overwrite"] = "overwrite"


class WindowRetention(Model):
    """Keep previous values up to ``max_versions`` and/or younger than ``ttl_ms``."""

    mode: Literal["window"] = "window"
    max_versions: int | None = Field(default=None, ge=1)
    """How many previous values ``history`` keeps at most."""
    ttl_ms: int | None = Field(default=None, ge=1)
    """Previous values older than this many milliseconds are pruned."""


class DurableRetention(Model):
    """Keep every previous value."""

    mode: Literal["durable"] = "durable"


Retention: TypeAlias = Annotated[
    OverwriteRetention | WindowRetention | DurableRetention, Field(discriminator="mode")
]
RetentionAdapter: TypeAdapter[Retention] = TypeAdapter(Retention)


# --- prompt inclusion --------------------------------------------------------------------


class AfterLastUser(Model):
    """Anchor right after the user message of the current turn."""

    type: Literal["after_last_user"] = "after_last_user"


class BeforeLastAssistant(Model):
    """Anchor right before the last assistant message of the history."""

    type: Literal["before_last_assistant"] = "before_last_assistant"


class AfterMessageId(Model):
    """Anchor after a specific history message."""

    type: Literal["after_message_id"] = "after_message_id"
    message_id: str
    """The id of the chat message to anchor on."""


class RelativeToEnd(Model):
    """Anchor ``offset`` messages from the end (``-4`` = four messages back)."""

    type: Literal["relative_to_end"] = "relative_to_end"
    offset: int = Field(le=0)
    """Non-positive offset counted from the end of the history."""
    role_filter: Literal["any", "user", "assistant"] = "any"
    """Count only messages of this role."""


class RelativeToAnchor(Model):
    """Anchor ``offset`` messages away from another anchor."""

    type: Literal["relative_to_anchor"] = "relative_to_anchor"
    anchor: AfterLastUser | BeforeLastAssistant | AfterMessageId
    """The base anchor."""
    offset: int
    """Messages to move from the base anchor (negative = earlier)."""


Anchor: TypeAlias = Annotated[
    AfterLastUser | BeforeLastAssistant | AfterMessageId | RelativeToEnd | RelativeToAnchor,
    Field(discriminator="type"),
]


class VersionSelector(Model):
    """Which versions of an artifact enter the prompt."""

    type: Literal["latest", "last_n", "all"] = "latest"
    """``latest``: the value; ``last_n``: value + ``n - 1`` newest history items; ``all``."""
    n: int | None = Field(default=None, ge=1)
    """How many versions ``last_n`` includes (the current value counts as one)."""


class PromptInclusion(Model):
    """How an artifact enters the effective prompt.

    ``mode`` is the shorthand; the other fields refine or replace it. With
    ``mode="none"`` (the default) the artifact never enters the prompt.
    """

    mode: Literal["none", "append_after_last_user", "prepend_system", "as_message"] = "none"
    """Shorthand for the common cases."""
    operation: Literal["insert", "replace", "wrap", "merge_section"] | None = None
    """What to do with the target."""
    target: Literal["system", "timeline", "message_ref"] | None = None
    """What the operation acts on."""
    anchor: Anchor | None = None
    """Where in the timeline, for ``target`` timeline or message_ref."""
    place: Literal["before", "after", "replace", "wrap"] | None = None
    """Position relative to the anchor."""
    depth_policy: Literal["strict_drop", "clamp_to_oldest_kept", "relocate_to_nearest"] = (
        "strict_drop"
    )
    """What to do when the anchor fell out of the trimmed history window."""
    phase: Literal["system", "early", "near_anchor", "after_last_user", "tail"] | None = None
    """Coarse ordering stage; defaults from the mode."""
    priority: int = 0
    """Order inside a phase: lower first."""
    role: DomainRole = DomainRole.DEVELOPER
    """Domain role of an inserted message."""
    format: ContentFormat | None = None
    """Serialisation of the value; defaults to the artifact's own format."""
    version_selector: VersionSelector = Field(default_factory=VersionSelector)
    """Which versions to include."""
    section: str | None = None
    """Section name for ``merge_section``."""


class UiPresentation(Model):
    """How the UI shows an artifact that lives longer than one turn."""

    mode: Literal["latest_only", "timeline", "diff"] = "latest_only"
    """Panels show the latest value, feeds a timeline, diff panels the change."""
    max_items: int | None = Field(default=None, ge=1)
    """How many items a timeline shows at most."""
    surface: str | None = None
    """Where: ``chat_history``, ``panel:<id>``, ``feed:<id>``, ``overlay:<id>``, ``internal``."""


# --- stored artifacts ----------------------------------------------------------------------


class ArtifactVersion(Model):
    """A previous value of an artifact, kept in ``history`` by its retention policy."""

    version: int = Field(ge=1)
    """The version this value had when it was current."""
    value: JsonValue
    """The value itself."""
    created_at: datetime
    """When this value was written."""

    _well_formed = field_validator("value", mode="after")(well_formed)


class Artifact(Model):
    """The latest state of ``art.<tag>`` in a profile session (or in a run, if run-only)."""

    tag: Tag
    """Address: ``art.<tag>``."""
    usage: ArtifactUsage
    """Who sees it."""
    semantics: ArtifactSemantics = "intermediate"
    """What it holds."""
    persisted: bool
    """True: lives in the profile session across runs; False: exists for one run only."""
    value: JsonValue
    """The current value."""
    format: ContentFormat = ContentFormat.TEXT
    """How the value is serialised for prompt and UI."""
    version: int = Field(default=1, ge=1)
    """Monotonic version, 1 for the first write."""
    based_on_version: int | None = None
    """The version the writer read before computing this one (None for a first write)."""
    history: tuple[ArtifactVersion, ...] = ()
    """Previous values, newest first; never contains the current value."""
    retention: Retention = Field(default_factory=OverwriteRetention)
    """How many previous values ``history`` keeps."""
    prompt_inclusion: PromptInclusion | None = None
    """How it enters the effective prompt; None means it does not."""
    ui_presentation: UiPresentation | None = None
    """How the UI shows it."""
    written_by: str | None = None
    """The operationId that wrote the current value."""
    run_id: str | None = None
    """The run that wrote the current value."""
    created_at: datetime | None = None
    """When version 1 was written."""
    updated_at: datetime | None = None
    """When the current value was written."""

    _well_formed = field_validator("value", mode="after")(well_formed)

    def view(self) -> JsonObject:
        """Return the ``{value, history, meta}`` shape templates see as ``art.<tag>``."""
        return {
            "value": self.value,
            "history": [h.value for h in self.history],
            "meta": {
                "tag": self.tag,
                "version": self.version,
                "basedOnVersion": self.based_on_version,
                "usage": self.usage.value,
                "semantics": self.semantics,
                "persisted": self.persisted,
                "format": self.format.value,
                "writtenBy": self.written_by,
                "updatedAt": self.updated_at.isoformat() if self.updated_at else None,
            },
        }


class ArtifactWrite(Model):
    """The one artifact write an operation may return among its effects."""

    tag: Tag
    """Which ``art.<tag>`` to write; must be the tag the operation declared."""
    value: JsonValue
    """The new value."""
    persisted: bool = True
    """Persist in the profile session (True) or keep for this run only (False)."""
    usage: ArtifactUsage | None = None
    """Who sees it; None keeps the artifact's current usage (``internal`` for a first
    write)."""
    semantics: ArtifactSemantics | None = None
    """What it holds; None keeps the current one (``intermediate`` for a first write)."""
    format: ContentFormat | None = None
    """How the value is serialised for prompt and UI; None keeps the current format
    (``text`` for a first write)."""
    based_on_version: int | None = None
    """The version this write was computed from; None lets the runner use the version the
    operation saw when it started (optimistic concurrency either way)."""
    retention: Retention | None = None
    """Retention for a persisted artifact; None keeps the artifact's current policy."""
    prompt_inclusion: PromptInclusion | None = None
    """How it enters later prompts; None keeps the current rule."""
    ui_presentation: UiPresentation | None = None
    """How the UI shows it; None keeps the current rule."""

    _well_formed = field_validator("value", mode="after")(well_formed)


class WriteArtifactSpec(Model):
    """Where an operation writes its one artifact (``writeArtifact``)."""

    tag: Tag
    """The artifact tag, declared statically."""
    persisted: bool = False
    """Persist across runs (True) or keep for this run (False)."""
    usage: ArtifactUsage = ArtifactUsage.INTERNAL
    """Who sees it."""
    semantics: ArtifactSemantics = "intermediate"
    """What it holds."""
    format: ContentFormat | None = None
    """Serialisation; defaults from the operation's output mode."""
    retention: Retention | None = None
    """Retention for a persisted artifact."""
    prompt_inclusion: PromptInclusion | None = None
    """How it enters later prompts."""
    ui_presentation: UiPresentation | None = None
    """How the UI shows it."""
