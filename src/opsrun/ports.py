"""The interfaces through which opsrun reaches the host's world.

Each port is a small ``typing.Protocol`` that speaks :mod:`opsrun.model` types.
The in-memory implementations in :mod:`opsrun.stores` satisfy them and are the
reference for their semantics; conformance is checked statically in the tests.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol, TypeAlias

from .model import (
    ArchivedVersion,
    Artifact,
    ArtifactVersion,
    ChatMessage,
    ChatSummary,
    OperationProfile,
    OperationProfileSession,
    OperationProfileSessionKey,
    OperationRun,
    Page,
    Run,
    RunEvent,
    Samplers,
    Trigger,
    Usage,
)

__all__ = [
    "STRUCTURED_OUTPUT_LEVELS",
    "ArtifactArchive",
    "ChatStore",
    "Clock",
    "CredentialResolver",
    "EventSink",
    "IdFactory",
    "LlmProvider",
    "LlmRequest",
    "LlmResponse",
    "MainLlm",
    "MainLlmDone",
    "MainLlmRequest",
    "ProfileStore",
    "ProviderCapabilities",
    "ProviderFinishReason",
    "ProviderLookup",
    "ProviderMessage",
    "ResponseFormat",
    "RunStore",
    "SessionStore",
    "Stores",
    "StructuredOutput",
]


class ProfileStore(Protocol):
    """Stored operation profiles."""

    async def get_profile(self, profile_id: str) -> OperationProfile:
        """Return the profile.

        Raises:
            NotFound: if there is no such profile.
        """
        ...

    async def save_profile(self, profile: OperationProfile) -> None:
        """Insert or replace the profile (check it first with ``catalog.ensure_valid``)."""
        ...


class SessionStore(Protocol):
    """Profile sessions and their persisted artifacts."""

    async def get_or_create_session(
        self, key: OperationProfileSessionKey, now: datetime
    ) -> OperationProfileSession:
        """Return the session for ``key``, creating it (``created_at=now``) when missing."""
        ...

    async def get_artifacts(self, key: OperationProfileSessionKey) -> dict[str, Artifact]:
        """Return the latest artifact of every tag in the session (empty when none)."""
        ...

    async def put_artifact(
        self,
        key: OperationProfileSessionKey,
        artifact: Artifact,
        *,
        expected_version: int | None,
    ) -> None:
        """Store ``artifact`` as the latest value of its tag, compare-and-set.

        ``expected_version`` is the version the writer based its value on (None when it
        saw no artifact). The write applies only when the stored latest version equals it.

        Raises:
            ArtifactConflict: when the stored version differs (code ``artifact_conflict``).
        """
        ...


class ArtifactArchive(Protocol):
    """Keeps artifact versions that a retention policy prunes from ``history``.

    Nothing older than a retention window disappears without a trace: the runner hands
    the pruned versions here *before* it stores the write that prunes them, so a failed
    archive never loses a version.
    """

    async def archive(
        self,
        key: OperationProfileSessionKey,
        tag: str,
        versions: Sequence[ArtifactVersion],
        *,
        run_id: str,
    ) -> None:
        """Keep ``versions`` (newest first) of ``art.<tag>`` in the session ``key``.

        Raises:
            StoreError: when they could not be kept; the write that pruned them is then
                not applied and its operation ends ``error`` with this error's code.
        """
        ...

    async def versions(self, key: OperationProfileSessionKey, tag: str) -> list[ArchivedVersion]:
        """Return the kept versions of ``art.<tag>`` in the session ``key``, newest first.

        Each comes with the run whose write pruned it; a version archived twice is
        listed once. Empty when none were kept.

        Raises:
            StoreError: the archive could not be read.
        """
        ...


class ChatStore(Protocol):
    """Chat messages with variants, per chat and branch.

    A message's variants are ``(await get_message(chat_id, message_id)).variants``.
    Editing a message is saving it again with the same id (``save_message``): it keeps
    its place in its branch.
    """

    async def history(self, chat_id: str, branch_id: str) -> list[ChatMessage]:
        """Return the branch's messages, oldest first."""
        ...

    async def get_message(self, chat_id: str, message_id: str) -> ChatMessage:
        """Return one message.

        Raises:
            NotFound: if there is no such message.
        """
        ...

    async def save_message(self, message: ChatMessage) -> None:
        """Insert a message at the end of its branch, or replace it if its id exists."""
        ...

    async def delete_message(self, chat_id: str, message_id: str) -> None:
        """Remove a message from its branch; the messages after it move up one place.

        Runs that used the message keep their records: their prompt snapshot keeps its
        hash, and ``Runner.explain`` then shows no text for it. Artifacts belong to
        profile sessions and are unaffected. A deleted user message is no longer a turn:
        regenerating it raises ``RunError`` (``turn_not_found``).

        Raises:
            NotFound: there is no such message in the chat.
        """
        ...

    async def list_chats(self, *, limit: int = 50, cursor: str | None = None) -> Page[ChatSummary]:
        """Return a page of the chats that have messages, most recently written first.

        A write is a ``save_message`` (new or edited) or a ``delete_message``; the store
        orders writes itself, so the order holds even within one clock tick. A chat
        written while you page moves to the front and shows up on a new first page.

        Args:
            limit: The most chats the page holds (1 or more).
            cursor: ``next_cursor`` of the previous page; None for the first page.

        Raises:
            ConfigError: ``limit`` is below 1.
            StoreError: the cursor is not one this query made (code ``bad_cursor``).
        """
        ...


class RunStore(Protocol):
    """Runs, their operation runs and their events."""

    async def claim(self, run: Run) -> Run:
        """Insert ``run`` unless a run with the same non-empty ``dedupe_key`` holds it.

        Returns the stored run: ``run`` itself, or the earlier run with that key. A run
        that ended ``aborted`` (a cancelled client, a user abort, a deadline) no longer
        holds its key, and neither does a running one whose ``lease_expires_at`` is
        before ``run.started_at`` (its owner died): that one is stored ``aborted`` with
        reason ``lease_expired`` and ``run`` takes the key over, so the turn can be
        retried. Atomic: two concurrent claims with one key yield one winner.
        """
        ...

    async def renew_lease(self, run_id: str, until: datetime) -> None:
        """Extend a running run's lease to ``until`` (its owner's heartbeat)."""
        ...

    async def save_run(self, run: Run, operation_runs: Sequence[OperationRun]) -> None:
        """Replace the run's record and its operation runs."""
        ...

    def hold_branch(
        self, chat_id: str, branch_id: str, *, wait: bool = True
    ) -> AbstractAsyncContextManager[object]:
        """Hold a chat branch for one run, so a branch has one active run at a time.

        Entering waits while another holder has the branch (first come, first served);
        with ``wait=False`` it raises at once instead. A store shared by several
        processes holds the branch across all of them.

        Raises:
            StoreError: ``wait=False`` and the branch is held (code ``branch_busy``).
        """
        ...

    async def append_events(self, run_id: str, events: Sequence[RunEvent]) -> None:
        """Append events to the run's log (they arrive in ``seq`` order).

        An event whose ``seq`` is already stored is kept once (a retried batch adds
        nothing twice). Wakes the run's followers (:meth:`follow`).
        """
        ...

    async def get_run(self, run_id: str) -> tuple[Run, list[OperationRun]]:
        """Return the run and its operation runs.

        Raises:
            NotFound: if there is no such run.
        """
        ...

    async def events(self, run_id: str) -> list[RunEvent]:
        """Return the run's events in ``seq`` order (empty when none)."""
        ...

    async def delete_run(self, run_id: str) -> None:
        """Forget the run, its operation runs and events (no error when absent)."""
        ...

    async def list_runs(
        self, chat_id: str, *, limit: int = 50, cursor: str | None = None
    ) -> Page[Run]:
        """Return a page of the chat's runs (every branch), newest first.

        Newest by ``started_at``; runs that started at the same time are ordered by run
        id, descending.

        Args:
            chat_id: The chat.
            limit: The most runs the page holds (1 or more).
            cursor: ``next_cursor`` of the previous page; None for the first page.

        Raises:
            ConfigError: ``limit`` is below 1.
            StoreError: the cursor is not one this query made (code ``bad_cursor``).
        """
        ...

    async def prune_runs(
        self, *, older_than: datetime | None = None, keep_last: int | None = None
    ) -> int:
        """Delete finished runs, with their operation runs and events; return how many.

        A run is deleted when it is finished (not ``running``) and every given rule
        selects it: ``older_than`` selects runs that started before that time,
        ``keep_last`` the runs of a chat after its newest ``keep_last`` (counted over
        all the chat's runs, running ones included, in :meth:`list_runs` order). So
        ``older_than=month_ago, keep_last=10`` deletes runs older than a month but
        keeps the last ten of every chat. A running run is never deleted, even one
        whose process died. A deleted run frees its turn key, like :meth:`delete_run`.

        Raises:
            ConfigError: neither rule is given, or ``keep_last`` is below 0.
        """
        ...

    def follow(self, run_id: str, *, after_seq: int = 0) -> AsyncIterator[RunEvent]:
        """Yield the run's events with ``seq`` above ``after_seq``, then each new one as it
        is appended, in ``seq`` order, each once; end after ``run.finished``.

        Works while the run executes elsewhere: in another task, or, with a store
        shared by several processes, in another process. Resuming with the ``seq`` of
        the last event received (``after_seq=``) continues without gaps or repeats. A
        run already finished yields its remaining events and ends. The iteration also
        ends when the run's turn was taken over after its process died (it is stored
        ``aborted`` with reason ``lease_expired`` and will not finish); wrap it in
        ``anyio.fail_after`` to bound the wait for a run that may hang.

        Raises:
            NotFound: there is no such run, or it was deleted while followed (raised
                by the iteration).
        """
        ...


class Stores(Protocol):
    """Every store a runner uses, as one bundle (``InMemoryStores`` is one).

    ``archive`` may be None: pruned artifact versions are then dropped.
    """

    @property
    def profiles(self) -> ProfileStore:
        """Operation profiles."""
        ...

    @property
    def sessions(self) -> SessionStore:
        """Profile sessions and their persisted artifacts."""
        ...

    @property
    def chats(self) -> ChatStore:
        """Chat messages."""
        ...

    @property
    def runs(self) -> RunStore:
        """Runs, operation runs and events."""
        ...

    @property
    def archive(self) -> ArtifactArchive | None:
        """Receives artifact versions that retention prunes."""
        ...


class EventSink(Protocol):
    """Receives run events as they happen, in ``seq`` order per run."""

    async def emit(self, event: RunEvent) -> None:
        """Deliver one event. Exceptions are logged and do not affect the run."""
        ...


class Clock(Protocol):
    """Wall-clock time for records; monotonic time comes from anyio."""

    def now(self) -> datetime:
        """Return the current time (timezone-aware)."""
        ...


class IdFactory(Protocol):
    """Makes unique ids."""

    def new_id(self, kind: str) -> str:
        """Return a new unique id; ``kind`` (``run``, ``msg``, ``var``…) may prefix it."""
        ...


# --- LLM ports: what both the main LLM and aux providers share ----------------------------

StructuredOutput: TypeAlias = Literal["json_schema_strict", "json_schema", "json_object", "none"]
"""How much structured output a provider enforces, strongest first.

``json_schema_strict``: the reply is guaranteed to match a JSON Schema; ``json_schema``:
the schema is a strong hint; ``json_object``: the reply is some JSON value; ``none``:
plain text only (JSON is asked for in the prompt).
"""

STRUCTURED_OUTPUT_LEVELS: tuple[StructuredOutput, ...] = (
    "json_schema_strict",
    "json_schema",
    "json_object",
    "none",
)
"""Every :data:`StructuredOutput` level, strongest first (a rejected level steps to the next)."""

ProviderFinishReason: TypeAlias = Literal["stop", "length", "content_filter", "error"]
"""Why a provider's completion ended, normalised over providers (both LLM ports)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ProviderCapabilities:
    """What a provider accepts; callers shape their requests by it."""

    structured_output: StructuredOutput = "none"
    """The strongest response format the provider honours."""
    developer_role: bool = False
    """True when it accepts ``developer`` messages (else they are sent as ``system``)."""


@dataclass(frozen=True, slots=True)
class ProviderMessage:
    """A message as sent to a provider: provider role and text."""

    role: str
    """``system``, ``user``, ``assistant`` (or ``developer`` when supported)."""
    content: str
    """Text."""


@dataclass(frozen=True, slots=True, kw_only=True)
class MainLlmRequest:
    """What the runner asks of the main LLM."""

    messages: tuple[ProviderMessage, ...]
    """The effective prompt in send order, roles already mapped for the provider."""
    run_id: str
    """The run."""
    chat_id: str
    """The chat."""
    user_message_id: str
    """The turn."""
    trigger: Trigger
    """generate or regenerate."""
    meta: Mapping[str, Any] = field(default_factory=dict)
    """The host data of the turn (``RunRequest.host``), read-only all the way down (its
    dicts and lists raise ``TypeError`` when changed)."""
    params: Mapping[str, Any] = field(default_factory=dict)
    """Generation settings from ``RunRequest.main_llm_params`` (provider, model, …)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class MainLlmDone:
    """The last item a main LLM stream yields."""

    text: str
    """The complete text."""
    finish_reason: ProviderFinishReason = "stop"
    """Normalised finish reason."""
    raw_finish_reason: str | None = None
    """The provider's own value, when it differs (``end_turn``, ``max_tokens``…)."""
    usage: Usage | None = None
    """Token usage, when known."""


class MainLlm(Protocol):
    """The chat's main generation: one streaming call per run."""

    @property
    def capabilities(self) -> ProviderCapabilities:
        """What the provider accepts: ``developer_role`` False sends developer messages as
        ``system``."""
        ...

    def stream(self, request: MainLlmRequest) -> AsyncIterator[str | MainLlmDone]:
        """Yield text deltas, then one :class:`MainLlmDone`.

        Raises:
            ProviderTimeout: the provider did not answer in time.
            RateLimited: the provider rate-limited the call.
            ProviderError: any other provider failure.
        """
        ...


# --- aux LLM providers (kind="llm") --------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ResponseFormat:
    """The reply format asked of the provider."""

    type: Literal["text", "json", "json_schema"]
    """``text``; ``json`` (any JSON value, a provider's JSON mode); ``json_schema``."""
    schema: Mapping[str, Any] | None = None
    """The JSON Schema, for ``json_schema``."""
    name: str | None = None
    """The schema's name (``schemaRef``), for providers that want one."""
    strict: bool = False
    """Ask the provider to enforce the schema exactly (``json_schema_strict``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LlmRequest:
    """One chat completion: what the ``llm`` operation kind sends to a provider."""

    messages: tuple[ProviderMessage, ...]
    """Messages in send order, with provider roles."""
    model: str
    """Model name as the provider knows it."""
    samplers: Samplers = field(default_factory=Samplers)
    """Sampling parameters; None fields are left to the provider."""
    max_output_tokens: int | None = None
    """Output limit."""
    stop: tuple[str, ...] = ()
    """Stop sequences."""
    response_format: ResponseFormat | None = None
    """Reply format; None leaves it to the provider (plain text)."""
    credential: str | None = field(default=None, repr=False)
    """The resolved secret of ``credentialRef``; never logged, never in ``repr``."""
    timeout: float | None = None
    """Seconds this attempt may take (the caller also enforces it)."""
    meta: Mapping[str, str] = field(default_factory=dict)
    """Host-defined extras (run id, operation id) for tracing."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LlmResponse:
    """A provider's completed reply."""

    text: str
    """The reply text."""
    finish_reason: ProviderFinishReason = "stop"
    """Normalised finish reason."""
    raw_finish_reason: str | None = None
    """The provider's own value, when it differs (``end_turn``, ``max_tokens``…)."""
    usage: Usage | None = None
    """Tokens and cost, when the provider reports them."""
    model: str | None = None
    """The model that actually answered."""
    request_id: str | None = None
    """The provider's request or trace id."""


class LlmProvider(Protocol):
    """A chat-completion provider for aux LLM calls (``kind="llm"``).

    Adapters translate their client's exceptions once, at this boundary, into the
    errors listed below; anything else is reported as ``provider_error``.
    """

    @property
    def capabilities(self) -> ProviderCapabilities:
        """What the provider accepts."""
        ...

    async def complete(self, request: LlmRequest) -> LlmResponse:
        """Run one completion.

        Raises:
            ProviderTimeout: the provider did not answer in time.
            RateLimited: the provider rate-limited the call (``retry_after`` when known).
            ResponseFormatRejected: the provider refused ``response_format``; callers
                step down one :data:`StructuredOutput` level and try again.
            ProviderError: any other provider failure.
        """
        ...


class ProviderLookup(Protocol):
    """Finds a provider by ``providerRef`` (:class:`opsrun.providers.ProviderRegistry`)."""

    def get(self, provider_ref: str) -> LlmProvider:
        """Return the provider registered as ``provider_ref``.

        Raises:
            ConfigError: no provider has that reference.
        """
        ...


class CredentialResolver(Protocol):
    """Turns an opaque ``credentialRef`` into the secret at run time."""

    async def resolve(self, credential_ref: str) -> str:
        """Return the secret for ``credential_ref``.

        Raises:
            ConfigError: the reference is unknown (the message must not contain the secret).
        """
        ...
