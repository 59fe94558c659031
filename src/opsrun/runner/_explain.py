"""The "why this answer" report: a finished run's records, explained for a person.

:func:`build_report` reads only what a run leaves behind (the :class:`~opsrun.model.Run`
with its main LLM call, prompt snapshot and applied effects, plus its
:class:`~opsrun.model.OperationRun` records) and returns a :class:`RunReport`;
:func:`render_markdown` turns that into Markdown. Both are pure: nothing is fetched or
written, so a report can be rebuilt from stored records at any time (seed 004
``55-logging``, "User-facing debug report").
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from datetime import datetime
from typing import Final

from pydantic import Field

from .._redact import DEFAULT_REDACTOR, Redactor
from ..model import (
    AppliedEffect,
    ArtifactRef,
    AugmentationStorage,
    DomainRole,
    FailedDetails,
    FailedType,
    FinishReason,
    Hook,
    InclusionRecord,
    JsonObject,
    MainLlmStatus,
    Model,
    OperationRun,
    OperationStatus,
    PromptSource,
    Run,
    RunPhase,
    RunStatus,
    SkippedReason,
    Trigger,
    TrimmedEntry,
    Usage,
)

__all__ = [
    "ReportArtifacts",
    "ReportExcerpt",
    "ReportGeneration",
    "ReportInput",
    "ReportMessage",
    "ReportOperation",
    "ReportOutcome",
    "ReportPrivacy",
    "ReportPrompt",
    "ReportStart",
    "RunReport",
    "build_report",
    "render_markdown",
]

TEXT_LIMIT: Final = 4000
"""Characters of the user message and of the reply kept in a report."""
PREVIEW_CHARS: Final = 400
"""Characters of one text shown in the Markdown before it is cut."""
HASH_PREFIX: Final = 12
"""Hex digits of a message's sha256 kept in a report."""
REASONING_NOTE: Final = (
    "Model reasoning and working notes are not recorded: this report shows only what was "
    "sent to the main LLM, what the operations changed and the final reply."
)
"""The fixed privacy statement of every report."""

_AUGMENTATION_KINDS: Final = frozenset({"effect", "artifact"})
_HOOK_RANK: Final = {hook: rank for rank, hook in enumerate(Hook)}
_STORAGE_RANK: Final = {storage: rank for rank, storage in enumerate(AugmentationStorage)}


class ReportExcerpt(Model):
    """A redacted piece of text, cut to a bounded length."""

    text: str
    """The kept text (at most ``TEXT_LIMIT`` characters)."""
    chars: int
    """Length of the whole text."""
    truncated: bool = False
    """True when ``text`` is shorter than the whole text."""


class ReportStart(Model):
    """Why the run started, and under which identities."""

    run_id: str
    """The run."""
    trigger: Trigger
    """``generate`` (a new turn) or ``regenerate`` (a new assistant variant)."""
    dedupe_key: str
    """The idempotency key; empty when the request carried none."""
    deduplicable: bool
    """True when ``dedupe_key`` is set, so a repeat of the request returns this run."""
    initiator: str
    """Who started it (``user`` or ``system``)."""
    chat_id: str
    """The chat."""
    branch_id: str
    """The branch."""
    user_message_id: str
    """The turn's user message."""
    profile_id: str | None = None
    """The operation profile, if any."""
    profile_ref: str | None = None
    """The profile reference of the session key."""
    operation_profile_session_id: str | None = None
    """The profile session whose artifacts the run used."""
    started_at: datetime
    """When the run started."""
    finished_at: datetime | None = None
    """When it finished."""


class ReportInput(Model):
    """What the run answered."""

    user_message_id: str
    """The user message of the turn."""
    user_message: ReportExcerpt | None = None
    """The selected variant's text, when the caller supplied it."""
    history_size: int | None = None
    """Chat messages up to and including the turn's user message, when the caller
    supplied it (the prompt may keep fewer, see ``ReportPrompt.trimmed``)."""


class ReportMessage(Model):
    """One message of the effective prompt, as recorded."""

    position: int
    """Its place in send order, from 1."""
    role: str
    """The provider role it was sent with."""
    domain_role: DomainRole
    """Its domain role (``developer`` when it was sent as ``system``)."""
    source: str
    """Where it came from, for a person: ``history m4``, ``artifact world_state v3``…"""
    source_kind: str | None = None
    """``system``, ``history``, ``effect`` or ``artifact``; None in records without it."""
    content: str | None = None
    """The stored text; None when only its hash was kept."""
    chars: int
    """Length of the text actually sent."""
    sha256: str
    """The first ``HASH_PREFIX`` hex digits of the sha256 of the text sent."""
    truncated: bool = False
    """True when the stored text was cut."""
    storage: AugmentationStorage = AugmentationStorage.REDACTED
    """How the text was kept: ``redacted``, ``summary`` or ``hash_only``."""


class ReportPrompt(Model):
    """The effective prompt in send order, with trimming and artifact inclusions."""

    prompt_hash: str
    """sha256 of the provider messages sent."""
    messages: tuple[ReportMessage, ...] = ()
    """The recorded messages in send order."""
    omitted_messages: int = 0
    """Messages sent but not recorded (the snapshot reached its size limit)."""
    roles_mapped: bool = False
    """True when some ``developer`` message was sent as ``system``."""
    history_window: JsonObject = Field(default_factory=dict)
    """The window limits in force (``maxMessages``, ``maxChars``, ``maxTokens``)."""
    history_messages: int = 0
    """Recorded messages that came from the chat history."""
    trimmed: tuple[TrimmedEntry, ...] = ()
    """History messages the window left out, oldest first, with the limit that did it."""


class ReportOperation(Model):
    """One operation in one hook: how it ended and what it changed."""

    operation_id: str
    """The operation."""
    operation_name: str
    """Its definition's name."""
    hook: Hook
    """The hook it ran in."""
    order: float
    """Its configured order."""
    required: bool
    """Whether the run needed it to end ``done``."""
    depends_on: tuple[str, ...] = ()
    """Its configured dependencies."""
    status: OperationStatus
    """How it ended."""
    skipped_reason: SkippedReason | None = None
    """Why it skipped."""
    error_code: str | None = None
    """Its error code."""
    error_message: str | None = None
    """Its error message (redacted when recorded)."""
    duration_ms: float | None = None
    """Execution time."""
    committed: bool = False
    """True when its effects were applied."""
    commit_index: int | None = None
    """Its place in the run's commit queue."""
    changes: tuple[AppliedEffect, ...] = ()
    """The effects it committed in this hook, in commit order."""


class ReportArtifacts(Model):
    """The artifacts the run could read, considered for the prompt, and wrote."""

    at_start: tuple[ArtifactRef, ...] = ()
    """The session's persisted artifacts when the run started."""
    inclusions: tuple[InclusionRecord, ...] = ()
    """One record per artifact considered for the prompt, in profile order: where it went,
    or why it was dropped."""
    written: tuple[AppliedEffect, ...] = ()
    """The ``artifact.write`` effects, in commit order: ``basedOnVersion`` is the old
    version, ``version`` the new one, ``summary`` a short redacted diff."""

    @property
    def in_prompt(self) -> tuple[InclusionRecord, ...]:
        """The artifacts included in the prompt."""
        return tuple(r for r in self.inclusions if r.included)

    @property
    def left_out(self) -> tuple[InclusionRecord, ...]:
        """The artifacts considered for the prompt and dropped, each with its reason."""
        return tuple(r for r in self.inclusions if not r.included)


class ReportGeneration(Model):
    """The main LLM call."""

    called: bool
    """Whether the call started."""
    status: MainLlmStatus | None = None
    """How it ended."""
    finish_reason: FinishReason | None = None
    """Why it ended."""
    provider_finish_reason: str | None = None
    """The provider's own finish reason."""
    params: JsonObject = Field(default_factory=dict)
    """The generation settings, redacted."""
    usage: Usage | None = None
    """Token usage and cost, when reported."""
    duration_ms: float | None = None
    """Time from start to end of the call."""
    prompt_hash: str | None = None
    """sha256 of the provider messages sent."""
    error_code: str | None = None
    """Its error code."""
    error_message: str | None = None
    """Its error message."""
    assistant_message_id: str | None = None
    """The assistant message of the turn."""
    assistant_variant_id: str | None = None
    """The variant the run created."""
    reply: ReportExcerpt | None = None
    """The final text, redacted and bounded (partial when aborted)."""


class ReportOutcome(Model):
    """How the run ended."""

    status: RunStatus
    """``done``, ``failed``, ``aborted`` (or ``running`` for an unfinished record)."""
    phase: RunPhase
    """The last phase reached."""
    failed_type: FailedType | None = None
    """Which part failed."""
    failed_details: FailedDetails | None = None
    """Why, bounded."""
    abort_reason: str | None = None
    """``user_abort`` or ``deadline``."""
    duration_ms: float | None = None
    """Total time."""


class ReportPrivacy(Model):
    """What the records keep of prompt augmentation, and what they never keep."""

    snapshot_recorded: bool
    """False when the run kept no prompt snapshot."""
    augmentation_storage: tuple[AugmentationStorage, ...] = ()
    """Storage modes of the recorded effect and artifact messages."""
    note: str = REASONING_NOTE
    """The fixed statement that model reasoning is not recorded."""


class RunReport(Model):
    """Why a run produced its answer: inputs, effective prompt, operations, outcome."""

    run_id: str
    """The run."""
    status: RunStatus
    """Its status."""
    start: ReportStart
    """Why it started."""
    inputs: ReportInput
    """What it answered."""
    prompt: ReportPrompt | None = None
    """The effective prompt; None when no snapshot was recorded."""
    operations: tuple[ReportOperation, ...] = ()
    """Operation runs sorted by hook, order and operation id."""
    artifacts: ReportArtifacts
    """Artifacts read, included and written."""
    generation: ReportGeneration
    """The main LLM call."""
    outcome: ReportOutcome
    """How it ended."""
    privacy: ReportPrivacy
    """What the records keep and leave out."""

    def to_markdown(self) -> str:
        """Render the report as Markdown (see :func:`render_markdown`); raises nothing."""
        return render_markdown(self)


def build_report(
    run: Run,
    operation_runs: Sequence[OperationRun],
    *,
    user_message: str | None = None,
    history_size: int | None = None,
    redactor: Redactor | None = None,
) -> RunReport:
    """Explain a run from its records.

    Args:
        run: The run record.
        operation_runs: Its operation runs, in any order.
        user_message: The selected variant's text of the turn's user message, if known;
            redacted and cut to ``TEXT_LIMIT`` characters.
        history_size: How many chat messages the history held up to and including the
            turn's user message, if known.
        redactor: Masks secrets in the user message and the reply (built-in rules by
            default); everything else was redacted when it was recorded.

    Raises:
        ValueError: if an operation run belongs to another run, or ``history_size`` is
            negative.
    """
    foreign = sorted({o.run_id for o in operation_runs if o.run_id != run.run_id})
    if foreign:
        raise ValueError(f"operation runs of other runs given for {run.run_id!r}: {foreign}")
    if history_size is not None and history_size < 0:
        raise ValueError(f"history_size must be >= 0, got {history_size}")
    redactor = redactor or DEFAULT_REDACTOR
    llm = run.main_llm
    snapshot = llm.prompt
    prompt = None
    storages: set[AugmentationStorage] = set()
    if snapshot is not None:
        messages = tuple(
            ReportMessage(
                position=i,
                role=m.role,
                domain_role=m.domain_role,
                source=_source_label(m.source),
                source_kind=m.source.kind if m.source else None,
                content=None if m.storage == AugmentationStorage.HASH_ONLY else m.content,
                chars=m.chars,
                sha256=m.sha256[:HASH_PREFIX],
                truncated=m.truncated,
                storage=m.storage,
            )
            for i, m in enumerate(snapshot.messages, start=1)
        )
        storages = {m.storage for m in messages if m.source_kind in _AUGMENTATION_KINDS}
        prompt = ReportPrompt(
            prompt_hash=snapshot.prompt_hash,
            messages=messages,
            omitted_messages=snapshot.omitted_messages,
            roles_mapped=snapshot.roles_mapped
            or any(m.role != m.domain_role for m in snapshot.messages),
            history_window=snapshot.history_window,
            history_messages=sum(m.source_kind == "history" for m in messages),
            trimmed=snapshot.trimmed,
        )
    return RunReport(
        run_id=run.run_id,
        status=run.status,
        start=ReportStart(
            run_id=run.run_id,
            trigger=run.trigger,
            dedupe_key=run.dedupe_key,
            deduplicable=bool(run.dedupe_key),
            initiator=run.initiator,
            chat_id=run.chat_id,
            branch_id=run.branch_id,
            user_message_id=run.user_message_id,
            profile_id=run.profile_id,
            profile_ref=run.profile_ref,
            operation_profile_session_id=run.operation_profile_session_id,
            started_at=run.started_at,
            finished_at=run.finished_at,
        ),
        inputs=ReportInput(
            user_message_id=run.user_message_id,
            user_message=_excerpt(user_message, redactor),
            history_size=history_size,
        ),
        prompt=prompt,
        operations=_operations(run, operation_runs),
        artifacts=ReportArtifacts(
            at_start=run.artifacts_at_start,
            inclusions=snapshot.inclusions if snapshot is not None else (),
            written=tuple(
                e
                for e in sorted(run.applied_effects, key=lambda e: e.index)
                if e.type == "artifact.write"
            ),
        ),
        generation=ReportGeneration(
            called=llm.started,
            status=llm.status,
            finish_reason=llm.finish_reason,
            provider_finish_reason=llm.provider_finish_reason,
            params=llm.params,
            usage=llm.usage,
            duration_ms=_elapsed_ms(llm.started_at, llm.finished_at),
            prompt_hash=llm.prompt_hash or (snapshot.prompt_hash if snapshot else None),
            error_code=llm.error.code if llm.error else None,
            error_message=llm.error.message if llm.error else None,
            assistant_message_id=llm.assistant_message_id,
            assistant_variant_id=llm.assistant_variant_id,
            reply=_excerpt(llm.text, redactor),
        ),
        outcome=ReportOutcome(
            status=run.status,
            phase=run.phase,
            failed_type=run.failed_type,
            failed_details=run.failed_details,
            abort_reason=run.abort_reason,
            duration_ms=run.duration_ms
            if run.duration_ms is not None
            else _elapsed_ms(run.started_at, run.finished_at),
        ),
        privacy=ReportPrivacy(
            snapshot_recorded=snapshot is not None,
            augmentation_storage=tuple(sorted(storages, key=_STORAGE_RANK.__getitem__)),
        ),
    )


def _source_label(source: PromptSource | None) -> str:
    """Name where a prompt message came from: ``history m4``, ``effect guard (…)``…"""
    if source is None:
        return "not recorded"
    match source.kind:
        case "system":
            return "system prompt"
        case "history":
            return f"history {source.message_id or '?'}"
        case "artifact":
            label = f"artifact {source.tag or '?'}"
            if source.version is not None:
                label += f" v{source.version}"
            return label + (f" on {source.message_id}" if source.message_id else "")
        case "effect":
            label = f"effect {source.operation_id or '?'}"
            return label + (f" ({source.effect})" if source.effect else "")
        case other:
            return other


def _operations(run: Run, operation_runs: Sequence[OperationRun]) -> tuple[ReportOperation, ...]:
    effects: dict[tuple[str, Hook], list[AppliedEffect]] = {}
    for effect in sorted(run.applied_effects, key=lambda e: e.index):
        effects.setdefault((effect.operation_id, effect.hook), []).append(effect)
    ordered = sorted(operation_runs, key=lambda o: (_HOOK_RANK[o.hook], o.order, o.operation_id))
    return tuple(
        ReportOperation(
            operation_id=o.operation_id,
            operation_name=o.operation_name,
            hook=o.hook,
            order=o.order,
            required=o.required,
            depends_on=o.depends_on,
            status=o.status,
            skipped_reason=o.skipped_reason,
            error_code=o.error.code if o.error else None,
            error_message=o.error.message if o.error else None,
            duration_ms=o.duration_ms
            if o.duration_ms is not None
            else _elapsed_ms(o.started_at, o.finished_at),
            committed=o.committed,
            commit_index=o.commit_index,
            changes=tuple(effects.get((o.operation_id, o.hook), ())),
        )
        for o in ordered
    )


def _excerpt(text: str | None, redactor: Redactor) -> ReportExcerpt | None:
    if text is None:
        return None
    text = redactor.redact(text)
    return ReportExcerpt(text=text[:TEXT_LIMIT], chars=len(text), truncated=len(text) > TEXT_LIMIT)


def _elapsed_ms(start: datetime | None, end: datetime | None) -> float | None:
    if start is None or end is None:
        return None
    return (end - start).total_seconds() * 1000


# --- Markdown -----------------------------------------------------------------------------

_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_BACKTICK_RUN = re.compile(r"`+")
# Inline punctuation that could start emphasis, links, HTML, entities or code; a backslash
# makes CommonMark show it literally, and ``|`` must be escaped inside table cells. An
# underscore between two letters or digits cannot delimit emphasis, so ``max_messages``
# stays readable in the source.
_INLINE_SPECIAL = re.compile(r"([\\`*\[\]<>|~&]|(?<![^\W_])_|_(?![^\W_]))")


def render_markdown(report: RunReport) -> str:
    """Render a report as Markdown for a person; raises nothing.

    Stored texts appear in fenced blocks whose fence is longer than any backtick run in
    them, cut to ``PREVIEW_CHARS`` characters with a note of how much was cut; short
    texts in sentences and tables are escaped, so no stored text can change the
    structure of the document.
    """
    parts = [f"# Run {_code(report.run_id)}: {_status_words(report.outcome)}"]
    parts += _why(report.start)
    parts += _input(report.inputs)
    parts += _prompt(report.prompt)
    parts += _operations_md(report.operations)
    parts += _artifacts_md(report.artifacts)
    parts += _generation_md(report.generation, report.outcome)
    parts += _outcome_md(report.outcome)
    parts += _privacy_md(report.privacy)
    return "\n\n".join(parts) + "\n"


def _one_line(text: str) -> str:
    return _LINE_BREAK.sub(" ", text)


def _text(text: object) -> str:
    """Plain text on one line, safe in sentences and table cells."""
    return _INLINE_SPECIAL.sub(r"\\\1", _one_line(str(text)))


def _code(text: object) -> str:
    """An inline code span showing ``text`` literally, on one line."""
    value = _one_line(str(text))
    if not value:
        return '""'
    runs = _BACKTICK_RUN.findall(value)
    ticks = "`" * (max(map(len, runs), default=0) + 1)
    # CommonMark strips one space from each end of a span that is not all spaces.
    pad = " " if value.strip(" ") and (value[0] in "` " or value[-1] in "` ") else ""
    return f"{ticks}{pad}{value}{pad}{ticks}"


def _cell_code(text: object) -> str:
    # Tables split on pipes before code spans are parsed, and an escaped pipe cannot keep a
    # backslash in front of it inside a span; escaped plain text shows such values exactly.
    return _text(text) if "|" in str(text) else _code(text)


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell or " " for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def _fenced(text: str, *, limit: int = PREVIEW_CHARS, info: str = "text") -> str:
    shown, cut = text[:limit], max(0, len(text) - limit)
    runs = _BACKTICK_RUN.findall(shown)
    fence = "`" * max(3, max(map(len, runs), default=0) + 1)
    newline = "" if shown.endswith(("\n", "\r")) else "\n"
    block = f"{fence}{info}\n{shown}{newline}{fence}"
    return block + (f"\n\n_… {cut} more characters not shown._" if cut else "")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _ms(value: float | None) -> str:
    if value is None:
        return "?"
    return f"{value:.1f} ms" if value < 10 else f"{value:.0f} ms"


def _status_words(outcome: ReportOutcome) -> str:
    if outcome.failed_type is not None:
        return f"{outcome.status} ({outcome.failed_type})"
    if outcome.abort_reason is not None:
        return f"{outcome.status} ({_text(outcome.abort_reason)})"
    return str(outcome.status)


def _why(start: ReportStart) -> list[str]:
    profile = "none (main LLM only)"
    if start.profile_id is not None:
        profile = _cell_code(start.profile_id)
    if start.profile_ref is not None:
        profile += f" (ref {_cell_code(start.profile_ref)})"
    dedupe = (
        _cell_code(start.dedupe_key)
        if start.deduplicable
        else "none: the request had no idempotency key, so a repeat starts a new run"
    )
    rows = [
        ("Trigger", str(start.trigger)),
        ("Dedupe key", dedupe),
        ("Initiator", _text(start.initiator)),
        ("Chat / branch", f"{_cell_code(start.chat_id)} / {_cell_code(start.branch_id)}"),
        ("Turn (user message)", _cell_code(start.user_message_id)),
        ("Profile", profile),
        (
            "Profile session",
            _cell_code(start.operation_profile_session_id)
            if start.operation_profile_session_id
            else "none",
        ),
        ("Started", start.started_at.isoformat(timespec="milliseconds")),
        (
            "Finished",
            start.finished_at.isoformat(timespec="milliseconds")
            if start.finished_at
            else "not finished",
        ),
    ]
    return ["## Why it ran", _table(("What", "Value"), rows)]


def _input(inputs: ReportInput) -> list[str]:
    out = ["## Input"]
    message = inputs.user_message
    if message is None:
        out.append(f"User message {_code(inputs.user_message_id)} (text not included).")
    else:
        cut = f", kept {len(message.text)}" if message.truncated else ""
        out.append(f"User message {_code(inputs.user_message_id)} ({message.chars} chars{cut}):")
        out.append(_fenced(message.text))
    if inputs.history_size is not None:
        out.append(f"Chat history: {_count(inputs.history_size, 'message')} up to this turn.")
    return out


def _prompt(prompt: ReportPrompt | None) -> list[str]:
    out = ["## Effective prompt"]
    if prompt is None:
        return [*out, "No prompt snapshot was recorded for this run."]
    sent = _count(len(prompt.messages), "message")
    notes = [f"Prompt hash {_code(prompt.prompt_hash)}; {sent} in send order."]
    if prompt.roles_mapped:
        notes.append("Developer messages were sent with the provider role `system`.")
    if prompt.omitted_messages:
        notes.append(
            f"{_count(prompt.omitted_messages, 'more sent message')} not recorded "
            "(the snapshot reached its size limit)."
        )
    limits = ", ".join(
        f"{_text(k)}={_text(v if isinstance(v, str) else _json(v))}"
        for k, v in sorted(prompt.history_window.items())
    )
    notes.append(
        f"History window: {limits or 'no limits'}; "
        f"{_count(prompt.history_messages, 'history message')} in the prompt."
    )
    if prompt.trimmed:
        notes.append(
            "Trimmed: "
            + ", ".join(f"{_code(t.message_id)} ({_text(t.reason)})" for t in prompt.trimmed)
            + "."
        )
    out.append(" ".join(notes))
    for m in prompt.messages:
        role = _text(m.role) + ("" if m.role == m.domain_role else f" (as {m.domain_role})")
        cut = ", cut" if m.truncated else ""
        out.append(
            f"**{m.position}. {role}** · {_text(m.source)} · {m.chars} chars · "
            f"sha256 {_code(m.sha256)} · {m.storage}{cut}"
        )
        if m.content is None:
            out.append(f"_Text not stored ({m.storage}): only its length and hash are kept._")
        else:
            out.append(_fenced(m.content))
    return out


def _operations_md(operations: Sequence[ReportOperation]) -> list[str]:
    out = ["## Operations"]
    if not operations:
        return [*out, "No operations ran (no profile, or an empty one)."]
    rows = []
    for o in operations:
        note = ""
        if o.skipped_reason is not None:
            note = f"skipped: {o.skipped_reason}"
        elif o.error_code is not None:
            note = f"{_text(o.error_code)}: {_text(o.error_message or '')}"
        rows.append(
            (
                str(o.hook),
                f"{_cell_code(o.operation_id)} {_text(o.operation_name)}",
                str(o.status),
                "yes" if o.required else "no",
                _ms(o.duration_ms) if o.duration_ms is not None else "",
                f"yes (#{o.commit_index})" if o.committed else "no",
                note,
            )
        )
    out.append(
        _table(("Hook", "Operation", "Status", "Required", "Duration", "Committed", "Note"), rows)
    )
    changes = [
        f"- {_code(o.operation_id)} ({o.hook}): {_change(e)}" for o in operations for e in o.changes
    ]
    out += (
        ["What they changed:", "\n".join(changes)]
        if changes
        else ["No operation changed anything."]
    )
    return out


def _change(effect: AppliedEffect) -> str:
    words = _text(effect.type)
    if effect.tag is not None:
        words += f" {_code(effect.tag)}"
    if effect.version is not None:
        words += f" {_versions(effect)}"
    if effect.summary:
        first, cut = _first_line(effect.summary)
        words += f": {_code(first)}{' …' if cut else ''}"
    return words


def _versions(effect: AppliedEffect) -> str:
    before = f"v{effect.based_on_version}" if effect.based_on_version is not None else "new"
    return f"{before} → {f'v{effect.version}' if effect.version is not None else 'run-only'}"


def _first_line(summary: str, limit: int = 120) -> tuple[str, bool]:
    """The first line of ``summary`` cut to ``limit``, and whether anything was left out."""
    first = _LINE_BREAK.split(summary, maxsplit=1)[0]
    return first[:limit], len(first) > limit or len(first) < len(summary)


def _artifacts_md(artifacts: ReportArtifacts) -> list[str]:
    out = ["## Artifacts"]
    at_start = ", ".join(f"{_code(a.tag)} v{a.version}" for a in artifacts.at_start)
    out.append(f"Available at start: {at_start or 'none'}.")
    rows = [
        (
            _cell_code(r.tag),
            "yes" if r.included else "no",
            ", ".join(f"v{v}" for v in r.versions),
            _inclusion_how(r),
            _text(r.reason or ""),
        )
        for r in artifacts.inclusions
    ]
    out.append(
        _table(("Artifact", "In prompt", "Versions", "How", "Reason"), rows)
        if rows
        else "Considered for the prompt: none."
    )
    if not artifacts.written:
        return [*out, "Written: none."]
    rows = []
    long_summaries = []
    for w in artifacts.written:
        first, cut = _first_line(w.summary or "")
        rows.append(
            (
                _cell_code(w.tag or "?"),
                _versions(w),
                f"{_cell_code(w.operation_id)} ({w.hook})",
                ", ".join(f"v{v}" for v in w.pruned_versions),
                f"{_cell_code(first)}{' …' if cut else ''}" if first else "",
            )
        )
        if cut:
            long_summaries += [
                f"Change to {_code(w.tag or '?')} by {_code(w.operation_id)}:",
                _fenced(w.summary or ""),
            ]
    out += [
        "Written:",
        _table(("Artifact", "Version", "By", "Pruned", "Change"), rows),
        *long_summaries,
    ]
    return out


def _inclusion_how(record: InclusionRecord) -> str:
    if not record.included:
        return ""
    how = f"{record.action or 'included'} at {_text(record.where or '?')}"
    if record.anchor_message_id is not None:
        how += f", anchor {_cell_code(record.anchor_message_id)}"
    if record.depth_policy is not None:
        how += f", moved by {_text(record.depth_policy)}"
    return how


def _generation_md(generation: ReportGeneration, outcome: ReportOutcome) -> list[str]:
    out = ["## Generation"]
    if not generation.called:
        reason = "."
        if outcome.failed_type == FailedType.BEFORE_BARRIER:
            reason = ": a required operation before it did not end `done`."
        elif outcome.status == RunStatus.ABORTED:
            reason = f": the run was aborted first ({_text(outcome.abort_reason or '?')})."
        out.append(f"The main LLM was not called{reason}")
    else:
        line = f"Status {generation.status or 'unknown'}, "
        line += f"finish reason {generation.finish_reason or 'unknown'}"
        if generation.provider_finish_reason:
            line += f" (provider: {_text(generation.provider_finish_reason)})"
        out.append(
            line
            + (f", {_ms(generation.duration_ms)}." if generation.duration_ms is not None else ".")
        )
        if generation.error_code is not None:
            out.append(
                f"Error {_code(generation.error_code)}: {_text(generation.error_message or '')}"
            )
        if generation.usage is not None:
            out.append(_usage(generation.usage))
        if generation.prompt_hash:
            out.append(f"Prompt hash {_code(generation.prompt_hash)}.")
    if generation.params:
        rows = [(_text(k), _cell_code(_json(v))) for k, v in sorted(generation.params.items())]
        out.append(_table(("Setting", "Value (redacted)"), rows))
    else:
        out.append("No generation settings recorded.")
    if generation.reply is not None:
        variant = (
            f" {_code(generation.assistant_variant_id)}" if generation.assistant_variant_id else ""
        )
        out.append(f"Reply{variant} ({generation.reply.chars} chars):")
        out.append(_fenced(generation.reply.text))
    return out


def _usage(usage: Usage) -> str:
    parts = [
        f"{value} {name}"
        for name, value in (
            ("input", usage.input_tokens),
            ("output", usage.output_tokens),
            ("total", usage.total_tokens),
        )
        if value is not None
    ]
    cost = f", cost ${usage.cost_usd:g}" if usage.cost_usd is not None else ""
    return f"Usage: {', '.join(parts) or 'no'} tokens{cost}."


def _json(value: object) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"), default=str)
    return text if len(text) <= 200 else text[:200] + "…"


def _outcome_md(outcome: ReportOutcome) -> list[str]:
    line = (
        f"**{_status_words(outcome)}** in phase {outcome.phase}, after {_ms(outcome.duration_ms)}."
    )
    out = ["## Outcome", line]
    details = outcome.failed_details
    if details is not None:
        who = f"Operation {_code(details.operation_id)}" if details.operation_id else "The run"
        code = f" with {_code(details.error_code)}" if details.error_code else ""
        out.append(f"{who} failed{code}: {_text(details.error_message or 'no message')}")
    return out


def _privacy_md(privacy: ReportPrivacy) -> list[str]:
    if not privacy.snapshot_recorded:
        stored = "No prompt snapshot was recorded, so no prompt text is kept."
    elif privacy.augmentation_storage:
        modes = ", ".join(str(s) for s in privacy.augmentation_storage)
        stored = (
            f"Operation effects and artifact inclusions in the prompt were recorded as: {modes}."
        )
    else:
        stored = "The prompt had no operation effects or artifact inclusions."
    return [
        "## Privacy",
        f"- {stored}\n- Generation settings and texts are shown as recorded: redacted and "
        f"bounded.\n- {privacy.note}",
    ]
