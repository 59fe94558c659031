"""Markdown rendering of the "why this answer" report (:func:`render_markdown`)."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Final

from ..model import AppliedEffect, FailedType, InclusionRecord, RunStatus, TrimmedRange, Usage
from ._types import (
    ReportArtifacts,
    ReportGeneration,
    ReportInput,
    ReportOperation,
    ReportOutcome,
    ReportPrivacy,
    ReportPrompt,
    ReportStart,
    RunReport,
)

__all__ = ["PREVIEW_CHARS", "render_markdown"]

PREVIEW_CHARS: Final = 400
"""Characters of one text shown in the Markdown before it is cut."""

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


def _fenced(
    text: str, *, limit: int = PREVIEW_CHARS, info: str = "text", total: int | None = None
) -> str:
    """``text`` in a fence no backtick run inside it closes, cut to ``limit`` characters
    with a count of the rest: of ``total`` characters when ``text`` is itself an excerpt
    of a longer text."""
    shown = text[:limit]
    cut = max(0, max(len(text), total or 0) - len(shown))
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
        out.append(_fenced(message.text, total=message.chars))
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
            f"The text of {_count(prompt.omitted_messages, 'older message')} was not kept "
            "(the snapshot reached its size limit); their length and hash are."
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
        notes.append("Trimmed: " + ", ".join(_trimmed(t) for t in prompt.trimmed) + ".")
    out.append(" ".join(notes))
    for m in prompt.messages:
        role = _text(m.role) + ("" if m.role == m.domain_role else f" (as {m.domain_role})")
        cut = ", cut" if m.truncated else ""
        out.append(
            f"**{m.position}. {role}** · {_text(m.source)} · {m.chars} chars · "
            f"sha256 {_code(m.sha256)} · {m.storage}{cut}"
        )
        if m.content is None and m.storage == "reference":
            out.append(
                "_Kept by reference to the chat message; no text with the hash sent was "
                "found (not looked up, or edited or deleted since the run)._"
            )
        elif m.content is None:
            why = "hash_only" if m.storage == "hash_only" else "the snapshot's size limit"
            out.append(f"_Text not stored ({why}): only its length and hash are kept._")
        else:
            out.append(_fenced(m.content, total=m.chars))
    return out


def _trimmed(trimmed: TrimmedRange) -> str:
    """``3 messages, `m1` … `m3` (max_messages)``."""
    span = _code(trimmed.first_message_id)
    if trimmed.count > 1:
        span += f" … {_code(trimmed.last_message_id)}"
    return f"{_count(trimmed.count, 'message')}, {span} ({_text(trimmed.reason)})"


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
        out.append(_fenced(generation.reply.text, total=generation.reply.chars))
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
