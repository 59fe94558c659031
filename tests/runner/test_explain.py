"""The run report: built from records alone, rendered as Markdown no stored text can break."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from opsrun._redact import sha256_text
from opsrun.model import (
    AppliedEffect,
    ArtifactRef,
    AugmentationStorage,
    FailedDetails,
    Hook,
    InclusionRecord,
    MainLlmCall,
    OperationError,
    OperationRun,
    PromptSnapshot,
    PromptSource,
    Run,
    SnapshotMessage,
    TrimmedRange,
    Usage,
)
from opsrun.report import RunReport, build_report, render_markdown
from opsrun.report._build import TEXT_LIMIT
from opsrun.report._markdown import PREVIEW_CHARS
from opsrun.report._types import REASONING_NOTE

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
SECTIONS = [
    "## Why it ran",
    "## Input",
    "## Effective prompt",
    "## Operations",
    "## Artifacts",
    "## Generation",
    "## Outcome",
    "## Privacy",
]


def at(ms: float) -> datetime:
    return T0 + timedelta(milliseconds=ms)


def message(
    content: str,
    kind: str | None = "history",
    *,
    role: str = "user",
    domain_role: str | None = None,
    storage: AugmentationStorage = AugmentationStorage.REDACTED,
    truncated: bool = False,
    **source: Any,
) -> SnapshotMessage:
    return SnapshotMessage(
        role=role,
        domain_role=domain_role or role,
        content=None if storage == AugmentationStorage.HASH_ONLY else content,
        chars=len(content),
        sha256=sha256_text(content),
        truncated=truncated,
        storage=storage,
        source=PromptSource(kind=kind, **source) if kind else None,
    )


def snapshot(*messages: SnapshotMessage, **kw: Any) -> PromptSnapshot:
    return PromptSnapshot(prompt_hash="ab" * 32, messages=messages, **kw)


def llm(**kw: Any) -> MainLlmCall:
    fields: dict[str, Any] = {
        "started": True,
        "status": "done",
        "finish_reason": "completed",
        "provider_finish_reason": "stop",
        "text": "The gate creaks open.",
        "prompt_hash": "ab" * 32,
        "prompt": snapshot(message("Open the gate.", message_id="u1")),
        "params": {"model": "local-7b", "temperature": 0.7},
        "started_at": at(100),
        "finished_at": at(2600),
    }
    return MainLlmCall(**(fields | kw))


def make_run(**kw: Any) -> Run:
    fields: dict[str, Any] = {
        "run_id": "run-1",
        "trigger": "generate",
        "chat_id": "chat-1",
        "branch_id": "main",
        "user_message_id": "u1",
        "profile_id": "rp",
        "profile_ref": "rp@1",
        "operation_profile_session_id": "sess-1",
        "dedupe_key": "chat-1:gen:u1",
        "status": "done",
        "phase": "finished",
        "started_at": T0,
        "finished_at": at(3000),
        "duration_ms": 3000.0,
        "main_llm": llm(),
    }
    return Run(**(fields | kw))


def op_run(op_id: str, hook: str = "before_main_llm", order: float = 1, **kw: Any) -> OperationRun:
    fields: dict[str, Any] = {
        "run_id": "run-1",
        "operation_id": op_id,
        "operation_name": op_id.title(),
        "hook": hook,
        "trigger": "generate",
        "required": False,
        "order": order,
        "status": "done",
    }
    return OperationRun(**(fields | kw))


def effect(index: int, op_id: str, kind: str, hook: str = "before_main_llm", **kw: Any) -> Any:
    return AppliedEffect(index=index, operation_id=op_id, hook=hook, type=kind, **kw)


def split_cells(row: str) -> list[str]:
    """Split a table row the way GFM does: on pipes not escaped by an odd backslash run."""
    cells, current, i = [], "", 0
    body = row.strip()[1:-1] if row.strip().endswith("|") else row.strip()[1:]
    while i < len(body):
        char = body[i]
        if char == "\\" and i + 1 < len(body):
            current += body[i : i + 2]
            i += 2
            continue
        if char == "|":
            cells.append(current)
            current = ""
        else:
            current += char
        i += 1
    return [*cells, current]


def outline(markdown: str) -> tuple[list[str], bool]:
    """Lines outside fenced blocks that start a heading or a fence, and whether all closed."""
    found: list[str] = []
    fence: tuple[str, int] | None = None
    for line in re.split(r"\r\n|\r|\n", markdown):
        if fence is not None:
            closing = re.match(r" {0,3}(`{3,}|~{3,})[ \t]*$", line)
            if closing and closing[1][0] == fence[0] and len(closing[1]) >= fence[1]:
                fence = None
            continue
        opening = re.match(r" {0,3}(`{3,}(?!.*`)|~{3,})", line)
        if opening:
            fence = (opening[1][0], len(opening[1]))
        elif re.match(r" {0,3}#{1,6}(\s|$)", line):
            found.append(line)
    return found, fence is None


def test_why_it_ran_names_trigger_key_profile_and_times() -> None:
    report = build_report(make_run(trigger="regenerate", initiator="system"), [])
    start = report.start
    assert (start.trigger, start.initiator) == ("regenerate", "system")
    assert (start.dedupe_key, start.deduplicable) == ("chat-1:gen:u1", True)
    assert (start.profile_id, start.profile_ref) == ("rp", "rp@1")
    assert start.operation_profile_session_id == "sess-1"
    assert (start.started_at, start.finished_at) == (T0, at(3000))
    md = render_markdown(report)
    assert md.startswith("# Run `run-1`: done\n")
    assert "| Dedupe key | `chat-1:gen:u1` |" in md
    assert "| Profile | `rp` (ref `rp@1`) |" in md
    assert "| Chat / branch | `chat-1` / `main` |" in md


def test_empty_dedupe_key_is_called_out() -> None:
    report = build_report(make_run(dedupe_key=""), [])
    assert report.start.deduplicable is False
    assert "| Dedupe key | none: the request had no idempotency key" in render_markdown(report)


def test_input_is_redacted_bounded_and_counts_history() -> None:
    report = build_report(make_run(), [], user_message="my password=hunter2 ok", history_size=6)
    excerpt = report.inputs.user_message
    assert excerpt is not None
    assert excerpt.text == "my password=[REDACTED] ok"
    assert report.inputs.history_size == 6
    md = render_markdown(report)
    assert "hunter2" not in md
    assert "Chat history: 6 messages up to this turn." in md

    long = build_report(make_run(), [], user_message="x" * (TEXT_LIMIT + 5)).inputs.user_message
    assert long is not None
    assert (len(long.text), long.chars, long.truncated) == (TEXT_LIMIT, TEXT_LIMIT + 5, True)


def test_input_without_text_says_so() -> None:
    report = build_report(make_run(), [])
    assert report.inputs.user_message is None
    assert "User message `u1` (text not included)." in render_markdown(report)


@pytest.mark.parametrize(
    ("kind", "source", "label"),
    [
        ("system", {}, "system prompt"),
        ("history", {"message_id": "msg_x"}, "history msg_x"),
        ("artifact", {"tag": "world_state", "version": 3}, "artifact world_state v3"),
        (
            "artifact",
            {"tag": "plan", "version": 2, "message_id": "m4"},
            "artifact plan v2 on m4",
        ),
        (
            "effect",
            {"operation_id": "guard", "effect": "prompt.append_after_last_user"},
            "effect guard (prompt.append_after_last_user)",
        ),
        ("custom", {}, "custom"),
        (None, {}, "not recorded"),
    ],
)
def test_source_labels(kind: str | None, source: dict[str, Any], label: str) -> None:
    run = make_run(main_llm=llm(prompt=snapshot(message("text", kind, **source))))
    prompt = build_report(run, []).prompt
    assert prompt is not None
    assert prompt.messages[0].source == label


def test_prompt_keeps_send_order_roles_hashes_and_trimming() -> None:
    sent = [
        message("You narrate.", "system", role="system"),
        message("Hi", message_id="m2"),
        message("Stay short.", "effect", role="system", domain_role="developer", operation_id="g"),
    ]
    run = make_run(
        main_llm=llm(
            prompt=snapshot(
                *sent,
                omitted_messages=2,
                history_window={"maxMessages": 1},
                trimmed=(
                    TrimmedRange(
                        first_message_id="m1",
                        last_message_id="m1",
                        count=1,
                        reason="max_messages",
                    ),
                ),
            )
        )
    )
    prompt = build_report(run, []).prompt
    assert prompt is not None
    assert [m.position for m in prompt.messages] == [1, 2, 3]
    assert [m.content for m in prompt.messages] == ["You narrate.", "Hi", "Stay short."]
    assert [m.sha256 for m in prompt.messages] == [s.sha256[:12] for s in sent]
    assert prompt.roles_mapped is True  # derived from the roles even when the flag is unset
    assert (prompt.omitted_messages, prompt.history_messages) == (2, 1)
    md = render_markdown(build_report(run, []))
    assert "**3. system (as developer)** · effect g · 11 chars" in md
    assert "Developer messages were sent with the provider role `system`." in md
    assert "The text of 2 older messages was not kept" in md
    assert "History window: maxMessages=1; 1 history message in the prompt." in md
    assert "Trimmed: 1 message, `m1` (max_messages)." in md


def test_hash_only_content_never_reaches_the_report() -> None:
    # An inconsistent record that kept text under hash_only must still not show it.
    leaky = SnapshotMessage(
        role="system",
        domain_role="developer",
        content="secret plan",
        chars=11,
        sha256=sha256_text("secret plan"),
        storage=AugmentationStorage.HASH_ONLY,
        source=PromptSource(kind="artifact", tag="notes", version=1),
    )
    report = build_report(make_run(main_llm=llm(prompt=snapshot(leaky))), [])
    assert report.prompt is not None
    assert report.prompt.messages[0].content is None
    md = render_markdown(report)
    assert "secret plan" not in md
    assert "_Text not stored (hash_only): only its length and hash are kept._" in md
    assert report.model_dump_json().count("secret plan") == 0


def test_long_contents_are_cut_with_a_count() -> None:
    text = "a" * (PREVIEW_CHARS + 250)
    run = make_run(main_llm=llm(prompt=snapshot(message(text, truncated=True, message_id="m"))))
    md = render_markdown(build_report(run, []))
    assert "```text\n" + "a" * PREVIEW_CHARS + "\n```\n\n_… 250 more characters not shown._" in md
    assert "a" * (PREVIEW_CHARS + 1) not in md
    assert f"· {len(text)} chars · sha256 " in md
    assert "· redacted, cut" in md


def test_texts_kept_cut_count_what_was_cut_from_the_whole_text() -> None:
    """The snapshot and the report keep excerpts: the count is of the whole text."""
    whole = 10 * TEXT_LIMIT
    kept = message("b" * 2_000, truncated=True, message_id="m").model_copy(update={"chars": whole})
    run = make_run(main_llm=llm(prompt=snapshot(kept), text="c" * whole))
    md = render_markdown(build_report(run, []))
    assert md.count(f"_… {whole - PREVIEW_CHARS} more characters not shown._") == 2


def test_fences_are_longer_than_any_backtick_run_in_the_content() -> None:
    content = "before\n```\nnot a fence end\n````\n## not a heading"
    run = make_run(main_llm=llm(prompt=snapshot(message(content, message_id="m"))))
    md = render_markdown(build_report(run, [], user_message="``` ` ``"))
    assert "`````text\n" + content + "\n`````" in md
    assert "````text\n``` ` ``\n````" in md
    headings, closed = outline(md)
    assert closed
    assert headings == ["# Run `run-1`: done", *SECTIONS]


def test_pipes_and_markup_in_table_cells_are_escaped() -> None:
    failing = op_run(
        "a|b",
        operation_name="Split | join",
        status="error",
        error=OperationError(code="bad|code", message="left | right \\| *x*"),
    )
    md = render_markdown(build_report(make_run(), [failing]))
    row = next(line for line in md.splitlines() if line.startswith("| before_main_llm"))
    cells = split_cells(row)
    assert len(cells) == 7
    assert cells[1].strip() == r"a\|b Split \| join"
    assert cells[6].strip() == r"bad\|code: left \| right \\\| \*x\*"


def test_operations_are_sorted_by_hook_then_order_then_id_with_their_changes() -> None:
    ops = [
        op_run("zeta", "after_main_llm", 0),
        op_run("beta", order=2, committed=True, commit_index=1),
        op_run("alpha", order=2),
        op_run("first", order=1, committed=True, commit_index=0),
        op_run("beta", "after_main_llm", 5, committed=True, commit_index=2),
    ]
    effects = (
        effect(0, "first", "prompt.system_update", summary="append 12 chars"),
        effect(1, "beta", "prompt.append_after_last_user", summary="Keep it short."),
        effect(
            2,
            "beta",
            "artifact.write",
            "after_main_llm",
            tag="mood",
            version=4,
            based_on_version=3,
            summary="- calm\n+ tense",
        ),
    )
    report = build_report(make_run(applied_effects=effects), ops)
    assert [(o.hook, o.operation_id) for o in report.operations] == [
        ("before_main_llm", "first"),
        ("before_main_llm", "alpha"),
        ("before_main_llm", "beta"),
        ("after_main_llm", "zeta"),
        ("after_main_llm", "beta"),
    ]
    by_key = {(o.hook, o.operation_id): o for o in report.operations}
    assert [e.index for e in by_key[(Hook.BEFORE_MAIN_LLM, "beta")].changes] == [1]
    assert [e.index for e in by_key[(Hook.AFTER_MAIN_LLM, "beta")].changes] == [2]
    assert by_key[(Hook.BEFORE_MAIN_LLM, "alpha")].changes == ()
    md = render_markdown(report)
    assert "- `beta` (after_main_llm): artifact.write `mood` v3 → v4: `- calm` …" in md
    assert "- `first` (before_main_llm): prompt.system_update: `append 12 chars`" in md


def test_operation_status_reason_error_duration_and_commit() -> None:
    ops = [
        op_run("rag", status="skipped", skipped_reason="condition_false"),
        op_run(
            "world",
            "after_main_llm",
            required=True,
            status="error",
            error=OperationError(code="artifact_conflict", message="stale version"),
            started_at=at(2700),
            finished_at=at(2742),
        ),
        op_run("guard", duration_ms=3.0, committed=True, commit_index=0),
    ]
    report = build_report(make_run(), ops)
    world = report.operations[-1]
    assert (world.error_code, world.error_message) == ("artifact_conflict", "stale version")
    assert world.duration_ms == pytest.approx(42.0)
    md = render_markdown(report)
    assert (
        "| before_main_llm | `rag` Rag | skipped | no |   | no | skipped: condition_false |" in md
    )
    assert "| before_main_llm | `guard` Guard | done | no | 3.0 ms | yes (#0) |   |" in md
    assert "| error | yes | 42 ms | no | artifact_conflict: stale version |" in md


def test_artifacts_available_included_dropped_and_written() -> None:
    inclusions = (
        InclusionRecord(
            tag="world_state",
            profile_index=0,
            included=True,
            versions=(7, 6),
            phase="near_anchor",
            action="insert",
            where="before:m4",
            anchor_message_id="m1",
            depth_policy="clamp_to_oldest_kept",
        ),
        InclusionRecord(tag="notes", profile_index=1, included=False, reason="mode_none"),
    )
    run = make_run(
        artifacts_at_start=(ArtifactRef(tag="world_state", version=7),),
        main_llm=llm(prompt=snapshot(inclusions=inclusions)),
        applied_effects=(
            effect(0, "guard", "prompt.append_after_last_user"),
            effect(
                1,
                "world",
                "artifact.write",
                "after_main_llm",
                tag="world_state",
                version=8,
                based_on_version=7,
                summary='-  "hp": 10\n+  "hp": 8',
                pruned_versions=(2,),
            ),
        ),
    )
    artifacts = build_report(run, []).artifacts
    assert artifacts.at_start == (ArtifactRef(tag="world_state", version=7),)
    assert [r.tag for r in artifacts.in_prompt] == ["world_state"]
    assert [(r.tag, r.reason) for r in artifacts.left_out] == [("notes", "mode_none")]
    assert [(w.tag, w.based_on_version, w.version) for w in artifacts.written] == [
        ("world_state", 7, 8)
    ]
    md = render_markdown(build_report(run, []))
    assert "Available at start: `world_state` v7." in md
    assert (
        "| `world_state` | yes | v7, v6 | insert at before:m4, anchor `m1`, "
        "moved by clamp_to_oldest_kept |   |"
    ) in md
    assert "| `notes` | no |   |   | mode_none |" in md
    assert '| `world_state` | v7 → v8 | `world` (after_main_llm) | v2 | `-  "hp": 10` … |' in md
    assert 'Change to `world_state` by `world`:\n\n```text\n-  "hp": 10\n+  "hp": 8\n```' in md


def test_generation_reports_status_params_usage_and_duration() -> None:
    call = llm(usage=Usage(input_tokens=900, output_tokens=12, total_tokens=912, cost_usd=0.002))
    generation = build_report(make_run(main_llm=call), []).generation
    assert generation.called is True
    assert generation.duration_ms == pytest.approx(2500.0)
    assert generation.params == {"model": "local-7b", "temperature": 0.7}
    md = render_markdown(build_report(make_run(main_llm=call), []))
    assert "Status done, finish reason completed (provider: stop), 2500 ms." in md
    assert "Usage: 900 input, 12 output, 912 total tokens, cost $0.002." in md
    assert '| model | `"local-7b"` |' in md
    assert "Reply (21 chars):\n\n```text\nThe gate creaks open.\n```" in md


def test_old_records_without_snapshot_or_params_render() -> None:
    run = make_run(main_llm=llm(prompt=None, params={}))
    report = build_report(run, [])
    assert report.prompt is None
    assert report.privacy.snapshot_recorded is False
    assert report.generation.prompt_hash == "ab" * 32
    md = render_markdown(report)
    assert "No prompt snapshot was recorded for this run." in md
    assert "No generation settings recorded." in md
    assert "- No prompt snapshot was recorded, so no prompt text is kept." in md


def test_barrier_failure_without_main_llm_call() -> None:
    run = make_run(
        status="failed",
        failed_type="before_barrier",
        failed_details=FailedDetails(
            operation_id="guard", error_code="timeout", error_message="took 5000 ms"
        ),
        main_llm=MainLlmCall(),
        profile_ref=None,
    )
    ops = [
        op_run(
            "guard",
            required=True,
            status="error",
            error=OperationError(code="timeout", message="took 5000 ms"),
        ),
        op_run("world", "after_main_llm", status="skipped", skipped_reason="main_llm_not_run"),
    ]
    report = build_report(run, ops)
    assert report.generation.called is False
    assert report.generation.duration_ms is None
    assert report.prompt is None
    md = render_markdown(report)
    assert md.startswith("# Run `run-1`: failed (before_barrier)\n")
    assert "The main LLM was not called: a required operation before it did not end `done`." in md
    assert "Operation `guard` failed with `timeout`: took 5000 ms" in md
    assert "skipped: main_llm_not_run" in md
    assert outline(md) == (["# Run `run-1`: failed (before_barrier)", *SECTIONS], True)


def test_aborted_run_keeps_partial_reply() -> None:
    call = llm(status="aborted", finish_reason="user_abort", text="The gate cre")
    run = make_run(status="aborted", abort_reason="user_abort", main_llm=call)
    report = build_report(run, [])
    assert report.outcome.abort_reason == "user_abort"
    assert report.generation.reply is not None
    assert report.generation.reply.text == "The gate cre"
    md = render_markdown(report)
    assert md.startswith("# Run `run-1`: aborted (user_abort)\n")
    assert "**aborted (user_abort)** in phase finished, after 3000 ms." in md


def test_abort_before_the_call() -> None:
    run = make_run(status="aborted", abort_reason="deadline", main_llm=MainLlmCall())
    md = render_markdown(build_report(run, []))
    assert "The main LLM was not called: the run was aborted first (deadline)." in md


def test_run_without_profile_or_operations() -> None:
    run = make_run(profile_id=None, profile_ref=None, operation_profile_session_id=None)
    md = render_markdown(build_report(run, []))
    assert "| Profile | none (main LLM only) |" in md
    assert "| Profile session | none |" in md
    assert "No operations ran (no profile, or an empty one)." in md


def test_privacy_lists_augmentation_storage_only() -> None:
    messages = (
        message("h", storage=AugmentationStorage.HASH_ONLY, message_id="m1"),
        message("e", "effect", storage=AugmentationStorage.SUMMARY, operation_id="g"),
        message("a", "artifact", tag="t", version=1),
    )
    report = build_report(make_run(main_llm=llm(prompt=snapshot(*messages))), [])
    assert report.privacy.augmentation_storage == (
        AugmentationStorage.REDACTED,
        AugmentationStorage.SUMMARY,
    )
    assert report.privacy.note == REASONING_NOTE
    md = render_markdown(report)
    assert "inclusions in the prompt were recorded as: redacted, summary." in md
    assert f"- {REASONING_NOTE}" in md


def test_report_survives_json_round_trip() -> None:
    run = make_run(
        applied_effects=(effect(0, "w", "artifact.write", tag="t", version=2, based_on_version=1),),
        main_llm=llm(
            usage=Usage(total_tokens=3),
            prompt=snapshot(
                message("x", "artifact", tag="t", version=1),
                inclusions=(InclusionRecord(tag="t", profile_index=0, included=True),),
            ),
        ),
    )
    report = build_report(run, [op_run("w", committed=True, commit_index=0)], user_message="hi")
    assert RunReport.model_validate_json(report.model_dump_json()) == report
    assert '"operationProfileSessionId":"sess-1"' in report.model_dump_json()


def test_records_of_another_run_are_refused() -> None:
    with pytest.raises(ValueError, match="other runs"):
        build_report(make_run(), [op_run("x", run_id="run-2")])
    with pytest.raises(ValueError, match="history_size"):
        build_report(make_run(), [], history_size=-1)


stored_text = st.text(max_size=600)
plain_id = st.text(st.characters(exclude_categories=("Cc", "Cs")), min_size=1, max_size=40)


@given(
    run_id=plain_id,
    contents=st.lists(stored_text, max_size=4),
    user_message=st.none() | stored_text,
    summary=stored_text,
    error_message=stored_text,
    reply=stored_text,
    label=stored_text,
)
def test_render_never_breaks_structure(
    run_id: str,
    contents: list[str],
    user_message: str | None,
    summary: str,
    error_message: str,
    reply: str,
    label: str,
) -> None:
    run = make_run(
        run_id=run_id,
        dedupe_key=label,
        status="failed",
        failed_type="after_main_llm",
        failed_details=FailedDetails(operation_id=label, error_message=error_message),
        main_llm=llm(
            text=reply,
            params={label: label},
            prompt=snapshot(
                *(message(c, "artifact", tag=label, version=1) for c in contents),
                trimmed=(
                    TrimmedRange(
                        first_message_id=label, last_message_id=label, count=2, reason=label
                    ),
                ),
                inclusions=(
                    InclusionRecord(tag=label, profile_index=0, included=False, reason=label),
                ),
            ),
        ),
        applied_effects=(effect(0, label, "artifact.write", tag=label, summary=summary),),
    )
    ops = [
        op_run(
            label,
            run_id=run_id,
            operation_name=label,
            status="error",
            error=OperationError(code=label, message=error_message),
        )
    ]
    md = render_markdown(build_report(run, ops, user_message=user_message))
    assert run_id in md
    headings, closed = outline(md)
    assert closed
    assert headings[1:] == SECTIONS


def test_run_only_write_with_a_short_summary_stays_in_the_table() -> None:
    write = effect(0, "notes", "artifact.write", tag="scratch", summary="created: 3 lines")
    md = render_markdown(build_report(make_run(applied_effects=(write,)), []))
    assert (
        "| `scratch` | new → run-only | `notes` (before_main_llm) |   | `created: 3 lines` |" in md
    )
    assert "Change to `scratch`" not in md
