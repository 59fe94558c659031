"""What an operation sees while it executes, and the abort signal."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic

import anyio
from typing_extensions import TypeVar

from .._redact import DEFAULT_REDACTOR, Redactor
from ..model import (
    Artifact,
    ArtifactWrite,
    ChatMessage,
    Hook,
    JsonValue,
    MainLlmCall,
    OperationConfig,
    OperationDefinition,
    OperationProfileSessionKey,
    PromptMessage,
    Trigger,
    WriteArtifactSpec,
)

__all__ = ["AbortSignal", "OperationContext", "P", "RunMeta"]

P = TypeVar("P", default=Any)
"""The params type of an operation (``Any`` unless the operation names its model)."""


class AbortSignal:
    """Lets the caller abort a run: ``signal.abort()`` from any task of the same event loop.

    From another thread, use ``anyio.from_thread.run_sync(signal.abort)``. Aborting twice
    keeps the first reason.
    """

    __slots__ = ("_callbacks", "_reason")

    def __init__(self) -> None:
        self._reason: str | None = None
        self._callbacks: list[Callable[[str], None]] = []

    @property
    def aborted(self) -> bool:
        """True once :meth:`abort` was called."""
        return self._reason is not None

    @property
    def reason(self) -> str | None:
        """``user_abort``, ``deadline`` or the reason given; None while not aborted."""
        return self._reason

    def abort(self, reason: str = "user_abort") -> None:
        """Abort: running operations and the main LLM end ``aborted``, the run ``aborted``."""
        if self._reason is not None:
            return
        self._reason = reason
        for callback in list(self._callbacks):
            callback(reason)

    def subscribe(self, callback: Callable[[str], None]) -> Callable[[], None]:
        """Call ``callback(reason)`` on abort (at once if already aborted); return an undo."""
        if self._reason is not None:
            callback(self._reason)
        self._callbacks.append(callback)
        # The undo lets go of the callback once used: a subscriber that keeps its undo
        # (as a run does) would otherwise form a reference cycle with its own callback,
        # and everything it holds would wait for the garbage collector.
        held = [callback]

        def unsubscribe() -> None:
            if held:
                subscribed = held.pop()
                if subscribed in self._callbacks:
                    self._callbacks.remove(subscribed)

        return unsubscribe


def _trigger(value: Any) -> Trigger:
    """``value`` as a ``Trigger``.

    Raises:
        ValueError: it is neither a ``Trigger`` nor one's value.
    """
    try:
        return Trigger(value)
    except ValueError:
        valid = ", ".join(repr(t.value) for t in Trigger)
        raise ValueError(f"RunMeta.trigger must be one of {valid}, got {value!r}") from None


@dataclass(frozen=True, slots=True, kw_only=True)
class RunMeta:
    """Identity of the run an operation executes in.

    ``trigger`` may be given as its string value (``"generate"``, ``"regenerate"``); it
    is stored as a :class:`~opsrun.model.Trigger`.

    Raises:
        ValueError: ``trigger`` is neither a ``Trigger`` nor one's value.
    """

    run_id: str
    """The run."""
    trigger: Trigger
    """generate or regenerate."""
    chat_id: str
    """The chat."""
    branch_id: str
    """The branch."""
    user_message_id: str
    """The turn (its user message id)."""
    profile_id: str | None
    """The profile, if any."""
    session_key: OperationProfileSessionKey | None
    """The profile session, if any."""
    assistant_message_id: str | None = None
    """The assistant message of the turn, once it exists."""
    assistant_variant_id: str | None = None
    """The assistant variant this run creates."""

    def __post_init__(self) -> None:
        # The engine passes a Trigger: one type check, nothing more.
        if type(self.trigger) is not Trigger:
            object.__setattr__(self, "trigger", _trigger(self.trigger))

    def as_dict(self) -> dict[str, Any]:
        """The meta as JSON-ready camelCase data (``run`` in templates)."""
        return {
            "runId": self.run_id,
            "trigger": self.trigger.value,
            "chatId": self.chat_id,
            "branchId": self.branch_id,
            "userMessageId": self.user_message_id,
            "turnId": self.user_message_id,
            "profileId": self.profile_id,
            "assistantMessageId": self.assistant_message_id,
            "assistantVariantId": self.assistant_variant_id,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class OperationContext(Generic[P]):
    """The read-only world of one operation execution.

    ``artifacts`` holds the session's persisted artifacts, run-only artifacts committed
    earlier in the run, and the staged artifacts of the operation's transitive
    dependencies (which win). In ``before_main_llm`` ``prompt`` is the draft effective
    prompt; in ``after_main_llm`` ``main_llm`` is the main LLM's result.
    """

    run: RunMeta
    """Run identity."""
    hook: Hook
    """The hook this execution belongs to."""
    definition: OperationDefinition
    """The operation's definition."""
    config: OperationConfig
    """Its configuration in the profile."""
    params: P
    """``config.params`` validated by the operation's params model (or the raw dict)."""
    history: tuple[ChatMessage, ...]
    """The chat history of the branch up to and including the turn's user message."""
    artifacts: Mapping[str, Artifact]
    """Readable artifacts by tag."""
    prompt: tuple[PromptMessage, ...] | None = None
    """Draft effective prompt (before_main_llm only)."""
    main_llm: MainLlmCall | None = None
    """The main LLM result (after_main_llm only)."""
    deadline: float | None = None
    """``anyio.current_time()`` value after which the operation is cut off, if any."""
    _until: float | None = field(default=None, init=False, repr=False, compare=False)
    """``deadline`` on ``time.monotonic()``'s clock, which every thread can read."""
    abort: AbortSignal = field(default_factory=AbortSignal)
    """The run's abort signal; cancellation also reaches ``await`` points directly."""
    write_tag: str | None = None
    """The artifact tag this operation declared (the only one it may write)."""
    redactor: Redactor = DEFAULT_REDACTOR
    """The run's redactor: mask secrets with it in anything the operation returns."""
    host: Mapping[str, JsonValue] = field(default_factory=dict)
    """The host data of the turn (``RunRequest.host``); read-only all the way down (its
    dicts and lists raise ``TypeError`` when changed)."""

    @property
    def operation_id(self) -> str:
        """The operation's id."""
        return self.definition.operation_id

    def __post_init__(self) -> None:
        if self.deadline is not None:
            try:
                now = anyio.current_time()
            except Exception:  # built outside an event loop: its clock is unknown
                now = time.monotonic()
            object.__setattr__(self, "_until", self.deadline - now + time.monotonic())

    @property
    def aborted(self) -> bool:
        """True once the run was aborted or this execution's ``timeoutMs`` passed;
        blocking operations should poll it (from their worker thread too)."""
        if self.abort.aborted:
            return True
        return self._until is not None and time.monotonic() >= self._until

    def remaining(self) -> float | None:
        """Seconds left before this execution's ``timeoutMs`` runs out, or None without
        one; readable from a worker thread too."""
        if self._until is None:
            return None
        return max(0.0, self._until - time.monotonic())

    def art(self, tag: str) -> Artifact | None:
        """Return ``art.<tag>`` if readable, else None."""
        return self.artifacts.get(tag)

    def art_value(self, tag: str, default: JsonValue = None) -> JsonValue:
        """Return ``art.<tag>.value``, or ``default`` when absent."""
        artifact = self.artifacts.get(tag)
        return default if artifact is None else artifact.value

    def template_context(self) -> dict[str, Any]:
        """The Liquid render context: ``art``, ``chatHistory``, ``run``, ``host`` and
        ``mainLlm``."""
        return {
            "art": {tag: a.view() for tag, a in self.artifacts.items()},
            "chatHistory": [
                {"role": m.role.value, "content": m.prompt_text, "id": m.message_id}
                for m in self.history
            ],
            "run": {**self.run.as_dict(), "hook": self.hook.value},
            "host": self.host,
            "mainLlm": None
            if self.main_llm is None
            else {"text": self.main_llm.text, "status": self.main_llm.status},
        }

    def write(self, value: JsonValue, **fields: Any) -> ArtifactWrite:
        """Build the artifact write for the declared tag, based on the version read.

        Defaults come from the operation's ``writeArtifact`` params when it has them
        (persisted, usage, semantics, format, retention, promptInclusion,
        uiPresentation); keyword arguments (snake_case ``ArtifactWrite`` fields) win.

        Raises:
            ValueError: if the operation declared no write tag.
            pydantic.ValidationError: if a field does not fit ``ArtifactWrite``.
        """
        if self.write_tag is None:
            raise ValueError(
                f"{self.operation_id!r} declared no artifact tag to write: give its "
                "definition capabilities=OperationCapabilities(write_tag=...), or its "
                "params writeArtifact.tag"
            )
        current = self.artifacts.get(self.write_tag)
        merged = {**self._write_defaults(), **fields}
        merged.setdefault("based_on_version", None if current is None else current.version)
        return ArtifactWrite(tag=self.write_tag, value=value, **merged)

    def _write_defaults(self) -> dict[str, Any]:
        spec = getattr(self.params, "write_artifact", None)
        if spec is None and isinstance(self.params, Mapping):
            raw = self.params.get("writeArtifact")
            spec = WriteArtifactSpec.model_validate(raw) if isinstance(raw, Mapping) else None
        if not isinstance(spec, WriteArtifactSpec):
            return {}
        return {name: value for name, value in spec if name != "tag" and value is not None}
