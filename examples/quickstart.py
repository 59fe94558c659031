"""Quickstart: load the "RP basic" profile and its catalog, validate them, then break the profile.

Run it with ``make demo`` or ``python examples/quickstart.py``. The profile and the catalog
are plain JSON files next to this script; the catalog is a list of operation definitions.
"""

from __future__ import annotations

import json
import shutil
import sys
import textwrap
from pathlib import Path
from typing import Any

from opsrun import OperationDefinition, OperationProfile, ProfileIssue, validate_profile
from opsrun.model import OperationConfig, ProfileOperation

HERE = Path(__file__).resolve().parent
PROFILE_PATH = HERE / "rp_basic.profile.json"
CATALOG_PATH = HERE / "rp_basic.catalog.json"

Catalog = dict[str, OperationDefinition]


def load_profile(path: Path = PROFILE_PATH) -> OperationProfile:
    """Read an OperationProfile from a camelCase JSON file."""
    return OperationProfile.model_validate_json(path.read_text(encoding="utf-8"))


def load_catalog(path: Path = CATALOG_PATH) -> Catalog:
    """Read a JSON list of OperationDefinitions and index it by operationId."""
    raw = json.loads(path.read_text(encoding="utf-8"))
    definitions = [OperationDefinition.model_validate(item) for item in raw]
    return {definition.operation_id: definition for definition in definitions}


def reconfigure(profile: OperationProfile, operation_id: str, **changes: Any) -> OperationProfile:
    """Return a copy of ``profile`` whose ``operation_id`` config has ``changes`` applied.

    The changes go through validation again, so a typo in a field name fails loudly.
    """
    operations: list[ProfileOperation] = []
    for entry in profile.operations:
        if entry.operation_id == operation_id:
            config = OperationConfig.model_validate(
                {**entry.config.model_dump(by_alias=False), **changes}
            )
            entry = entry.model_copy(update={"config": config})
        operations.append(entry)
    return profile.model_copy(update={"operations": tuple(operations)})


def broken_variant(profile: OperationProfile) -> OperationProfile:
    """Return ``profile`` with four mistakes a hand-edited profile could easily contain."""
    guard = "builtin:is_combat_guard"
    rag = "builtin:combat_rag"
    notes = "builtin:augmentation_notes"
    world = "builtin:world_state_update"

    notes_params = profile.operation(notes)
    assert notes_params is not None
    params = dict(notes_params.config.params)
    params["writeArtifact"] = {**params["writeArtifact"], "tag": "world_state"}

    # The guard now waits for the retrieval that waits for the guard: a cycle.
    profile = reconfigure(profile, guard, depends_on=(rag,))
    # Retrieval also waits for an operation nobody configured.
    profile = reconfigure(profile, rag, depends_on=(guard, "builtin:lore_lookup"))
    # The notes now write the tag the world state update owns.
    profile = reconfigure(profile, notes, params=params)
    # An after-hook operation waits for a before-hook one: the barrier separates them.
    return reconfigure(profile, world, depends_on=(notes,))


def format_issues(issues: list[ProfileIssue], width: int | None = None) -> str:
    """Render ``issues`` as a table with columns code, operation and message."""
    width = width or shutil.get_terminal_size((100, 24)).columns
    rows = [(i.code.value, i.operation_id or "-", i.message) for i in issues]
    code_w = max(len("code"), *(len(r[0]) for r in rows))
    op_w = max(len("operation"), *(len(r[1]) for r in rows))
    message_w = max(30, width - code_w - op_w - 4)
    indent = " " * (code_w + op_w + 4)
    lines = [
        f"{'code':<{code_w}}  {'operation':<{op_w}}  message",
        f"{'-' * code_w}  {'-' * op_w}  {'-' * min(message_w, 40)}",
    ]
    for code, operation, message in rows:
        wrapped = textwrap.wrap(message, message_w) or [""]
        lines.append(f"{code:<{code_w}}  {operation:<{op_w}}  {wrapped[0]}")
        lines.extend(indent + more for more in wrapped[1:])
    return "\n".join(lines)


def show_validation(title: str, profile: OperationProfile, catalog: Catalog) -> list[ProfileIssue]:
    """Validate ``profile`` against ``catalog``, print the outcome and return the issues."""
    issues = validate_profile(profile, catalog)
    print(f"== {title}: profile {profile.profile_id!r}, {len(profile.operations)} operations")
    if not issues:
        print("valid: no issues")
    else:
        print(f"invalid: {len(issues)} issue(s)")
        print(format_issues(issues))
    print()
    return issues


def main() -> int:
    """Validate the shipped profile, then a broken copy of it."""
    profile = load_profile()
    catalog = load_catalog()
    show_validation("RP basic as shipped", profile, catalog)
    show_validation("RP basic with four mistakes", broken_variant(profile), catalog)
    return 0


if __name__ == "__main__":
    sys.exit(main())
