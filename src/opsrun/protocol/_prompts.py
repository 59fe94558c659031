"""The texts the plan driver sends: system prompts for v1 and v2, the format reminder,
the user message of a PLAN or APPLY round, and the repair prompt with a hint per code.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

from ._driver_config import DriverMode
from ._limits import Violation
from ._schemas import schema_hash
from ._validate import NO_CHANGES_PREFIX

__all__ = [
    "REPAIR_HINTS",
    "format_reminder",
    "repair_hint",
    "repair_prompt",
    "system_prompt",
    "user_prompt",
]

_COMMON: Final = f"""\
You are a careful software engineer editing a project through a JSON edit plan.
Answer with ONE JSON value and nothing else: no prose, no markdown fences.

Paths are relative to the project root, with "/" separators: never absolute, never "~",
never "." or ".." segments. Never touch .env files, keys (*.pem, *.key, *.p12, id_rsa*),
anything under secrets/, .git or .opsrun.

Modes:
- PLAN: diagnose and propose. Return "actions": [] and a "summary" with the diagnosis,
  the numbered steps and how to check them. Ask for files you need to see with
  "context_requests": [{{"type": "read_file", "path": "...", "start_line": 1,
  "end_line": 200}}] (also {{"type": "search", "query": "..."}}, {{"type": "logs",
  "source": "..."}}, {{"type": "env"}}).
- APPLY: make the change. Edit only files shown to you in FILE blocks; create new ones
  freely. If nothing needs to change, return "actions": [] and a "summary" starting
  exactly with "{NO_CHANGES_PREFIX}".

Keep "summary" short: what you did or propose, and how to check it.
"memory_patch" may only set the user's or project's preferences when the user asks.
"""

_V1: Final = """\
Protocol v1 (schema_version=1, schema_hash={hash}).
Return an object {{"actions": [...], "summary": "...", "context_requests": [...],
"memory_patch": {{}}}} (a bare array of actions is also accepted).
Each action is {{"kind": K, "path": "...", "content": "..."}} with K one of
CREATE_FILE, CREATE_DIR, UPDATE_FILE, DELETE_FILE, DELETE_DIR. "content" is the full
new text of the file for CREATE_FILE and UPDATE_FILE, and absent otherwise.
"""

_V2: Final = """\
Protocol v2 (schema_version=2, schema_hash={hash}).
Return an object only: {{"actions": [...], "summary": "...", "context_requests": [...],
"memory_patch": {{}}}}.
Action kinds: CREATE_FILE (path, content), CREATE_DIR (path), PATCH_FILE (path, patch,
base_sha256), REPLACE_RANGE (path, start_line, end_line, content, base_sha256),
DELETE_FILE (path), DELETE_DIR (path). UPDATE_FILE is only for files that do not
exist yet; change an existing file with PATCH_FILE.
PATCH_FILE rules:
- "patch" is a unified diff of that one file: "--- a/<path>", "+++ b/<path>", then
  "@@ -l,n +l,n @@" hunks.
- "base_sha256" is copied exactly from the file's header FILE[<path>] (sha256=<hash>).
- Keep the patch minimal: change only the lines that must change, with 1-3 unchanged
  context lines before and after each change, copied exactly from the file.
- Never reformat a file, reorder imports or change line endings in passing.
- If a file is not UTF-8, too large or generated, do not patch it: answer in PLAN
  (actions: []) and propose another way.
"""

_REMINDER: Final = {
    1: (
        'FORMAT: return only JSON: {"actions": [{"kind": "CREATE_FILE" | "CREATE_DIR" | '
        '"UPDATE_FILE" | "DELETE_FILE" | "DELETE_DIR", "path": "relative/path", "content": '
        '"for CREATE_FILE and UPDATE_FILE"}], "summary": "..."}'
    ),
    2: (
        'FORMAT: return only a JSON object: {"actions": [{"kind": "PATCH_FILE", "path": '
        '"relative/path", "base_sha256": "<from FILE header>", "patch": "--- a/...\\n+++ '
        'b/...\\n@@ ... @@\\n..."}], "summary": "..."} (kinds: CREATE_FILE, CREATE_DIR, '
        "PATCH_FILE, REPLACE_RANGE, DELETE_FILE, DELETE_DIR)"
    ),
}

REPAIR_HINTS: Final[dict[str, str]] = {
    "ERR_INVALID_JSON": (
        "REPAIR_ERR_INVALID_JSON: return exactly one JSON value with no text around it; "
        'escape newlines inside strings as \\n and quotes as \\".'
    ),
    "ERR_SCHEMA": (
        "REPAIR_ERR_SCHEMA: follow the format exactly: known fields only, the right kinds, "
        "the fields each kind requires and no others."
    ),
    "ERR_KIND_NOT_IN_VERSION": (
        "REPAIR_ERR_KIND_NOT_IN_VERSION: use only the action kinds of this protocol version."
    ),
    "ERR_FIELD_NOT_ALLOWED": (
        "REPAIR_ERR_FIELD_NOT_ALLOWED: give each action only the fields its kind takes."
    ),
    "ERR_CONTENT_REQUIRED": (
        "REPAIR_ERR_CONTENT_REQUIRED: CREATE_FILE and UPDATE_FILE need the file's full content."
    ),
    "ERR_PLAN_HAS_ACTIONS": (
        'REPAIR_ERR_PLAN_HAS_ACTIONS: this is PLAN mode: return "actions": [] and describe '
        "the change in the summary."
    ),
    "ERR_PLAN_SUMMARY_REQUIRED": (
        "REPAIR_ERR_PLAN_SUMMARY_REQUIRED: a PLAN answer needs a summary: diagnosis, steps, "
        "how to check."
    ),
    "ERR_NO_CHANGES_MARKER": (
        'REPAIR_ERR_NO_CHANGES_MARKER: with "actions": [] in APPLY the summary must start '
        f"exactly with {NO_CHANGES_PREFIX!r}; otherwise return the actions."
    ),
    "ERR_UPDATE_WITHOUT_BASE": (
        "REPAIR_ERR_UPDATE_WITHOUT_BASE: edit only files shown in FILE blocks; ask for other "
        "files with context_requests in PLAN mode."
    ),
    "ERR_V2_UPDATE_EXISTING_FORBIDDEN": (
        "REPAIR_ERR_V2_UPDATE_EXISTING_FORBIDDEN: the file exists: generate PATCH_FILE (a "
        "unified diff with base_sha256) instead of UPDATE_FILE."
    ),
    "ERR_FILE_SHOWN_IN_PART": (
        "REPAIR_ERR_FILE_SHOWN_IN_PART: you saw only part of this file, so UPDATE_FILE would "
        "delete the lines you did not see: change it with PATCH_FILE (protocol v2), or leave "
        'it alone; to see all of it, return "actions": [] with a read_file context request '
        "without a line range."
    ),
    "ERR_PATCH_NOT_UNIFIED": (
        'REPAIR_ERR_PATCH_NOT_UNIFIED: "patch" must be a unified diff: "--- a/<path>", '
        '"+++ b/<path>" and "@@ -l,n +l,n @@" hunks with " ", "-" and "+" lines.'
    ),
    "ERR_PATCH_APPLY_FAILED": (
        "REPAIR_ERR_PATCH_APPLY_FAILED: the hunks do not match the file. Copy the context "
        "and removed lines exactly from the FILE block, use 3 lines of context, and do not "
        "change neighbouring blocks."
    ),
    "ERR_BASE_MISMATCH": (
        "REPAIR_ERR_BASE_MISMATCH: base_sha256 must be copied exactly from the file's "
        "FILE[...] (sha256=...) header."
    ),
    "ERR_BASE_SHA256_INVALID": (
        "REPAIR_ERR_BASE_SHA256_INVALID: base_sha256 is 64 lower-case hex characters, copied "
        "from the FILE header."
    ),
    "ERR_BASE_SHA256_REQUIRED": (
        "REPAIR_ERR_BASE_SHA256_REQUIRED: PATCH_FILE and REPLACE_RANGE need base_sha256 from "
        "the FILE header."
    ),
    "ERR_NON_UTF8_FILE": (
        "REPAIR_ERR_NON_UTF8_FILE: the file is not UTF-8 text: do not patch it; propose "
        "another way in PLAN mode."
    ),
    "ERR_RANGE_INVALID": (
        "REPAIR_ERR_RANGE_INVALID: start_line and end_line must lie inside the file, "
        "start_line <= end_line."
    ),
    "ERR_CREATE_EXISTS": (
        "REPAIR_ERR_CREATE_EXISTS: the file exists: change it with PATCH_FILE instead of "
        "creating it."
    ),
    "ERR_TARGET_MISSING": (
        "REPAIR_ERR_TARGET_MISSING: the file does not exist: create it with CREATE_FILE."
    ),
    "ERR_ACTION_CONFLICT": (
        "REPAIR_ERR_ACTION_CONFLICT: give each path one action (no create plus update, no "
        "delete plus create)."
    ),
    "ERR_ELIDED_CONTENT": (
        "REPAIR_ERR_ELIDED_CONTENT: write the complete text; never elide code with "
        "placeholders such as '... rest unchanged ...'."
    ),
    "ERR_PATH_PROTECTED": (
        "REPAIR_ERR_PATH_PROTECTED: leave protected files (.env, keys, secrets/) alone."
    ),
    "ERR_PROTECTED_PATH": (
        "REPAIR_ERR_PROTECTED_PATH: leave protected files (.env, keys, secrets/) alone."
    ),
    "ERR_FORBIDDEN_PATH": (
        "REPAIR_ERR_FORBIDDEN_PATH: this path is not allowed here; use another path or "
        "leave it alone."
    ),
}
"""A hint per violation code, sent in the repair prompt (unknown codes get a generic one)."""

_PATH_HINT: Final = (
    "REPAIR_ERR_PATH: paths are relative to the project root with '/' separators, no "
    "'..', '.', '~', drive letters or absolute paths, and at most 240 characters."
)
_GENERIC_HINT: Final = "REPAIR_ERR_OTHER: fix the problem named above and keep the rest."


def repair_hint(code: str) -> str:
    """The repair hint for one violation code."""
    hint = REPAIR_HINTS.get(code)
    if hint is not None:
        return hint
    return _PATH_HINT if code.startswith("ERR_PATH_") else _GENERIC_HINT


def system_prompt(version: int) -> str:
    """The system prompt of protocol ``version`` (1 or 2), schema version and hash included."""
    body = _V2 if version == 2 else _V1
    return _COMMON + "\n" + body.format(hash=schema_hash(version))


def format_reminder(version: int) -> str:
    """One line restating the answer format, sent at the end of each user message."""
    return _REMINDER[2 if version == 2 else 1]


def user_prompt(
    *,
    mode: DriverMode,
    goal: str,
    version: int,
    saved_summary: str | None = None,
    context: str = "",
) -> str:
    """The user message of one round: mode, goal, the saved plan, the context, the format."""
    parts = [f"MODE: {mode.upper()}", f"GOAL:\n{goal.strip() or '(carry out the saved plan)'}"]
    if saved_summary:
        parts.append(f"SAVED_PLAN (the plan the user approved):\n{saved_summary.strip()}")
    if context:
        parts.append(context)
    parts.append(format_reminder(version))
    return "\n\n".join(parts)


def repair_prompt(
    violations: Sequence[Violation], *, mode: DriverMode, version: int, extra: Iterable[str] = ()
) -> str:
    """The follow-up message after an invalid answer: the problems, a hint per code, the format."""
    lines = [f"Your answer was rejected ({mode.upper()} mode). Problems:"]
    for v in violations[:20]:
        where = []
        if v.action_index is not None:
            where.append(f"actions[{v.action_index}]")
        if v.path:
            where.append(v.path)
        lines.append(f"- {v.code}{' at ' + ' '.join(where) if where else ''}: {v.message}")
    if len(violations) > 20:
        lines.append(f"- … and {len(violations) - 20} more")
    hints = dict.fromkeys(repair_hint(v.code) for v in violations)
    lines.append("")
    lines.extend(hints)
    lines.extend(extra)
    lines.append("")
    lines.append("Return the corrected answer in full.")
    lines.append(format_reminder(version))
    return "\n".join(lines)
