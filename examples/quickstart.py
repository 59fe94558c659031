"""Quickstart: validate the "RP basic" profile, then run it for real, offline.

Run it with ``make demo`` or ``python examples/quickstart.py``. The profile and the catalog
are plain JSON files next to this script; the operations live in ``rp_operations.py``.
The demo validates the profile (and a broken copy), then plays three turns, one
regenerate and one run whose required guard fails, printing the live event stream,
the final artifacts and the chat. The chat lives in a SQLite file in a temporary
folder; at the end a second process opens that file and continues the same chat, with
its artifacts.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import anyio
from rp_operations import Classifier, build_catalog  # the sibling module (script dir is on path)

from opsrun import (
    OperationCatalog,
    OperationConfig,
    OperationDefinition,
    OperationProfile,
    ProfileOperation,
    Runner,
    RunRequest,
    RunResult,
)
from opsrun.model import (
    MainLlmDelta,
    MainLlmFinished,
    OperationFinished,
    OperationProfileSessionKey,
    OperationStarted,
    ProfileIssue,
    RunEvent,
    RunFinished,
    RunPhaseChanged,
)
from opsrun.prompt import HistoryWindow
from opsrun.report import render_markdown
from opsrun.stores.sqlite import SqliteStores
from opsrun.testing import OfflineMainLlm

HERE = Path(__file__).resolve().parent
PROFILE_PATH = HERE / "rp_basic.profile.json"
CATALOG_PATH = HERE / "rp_basic.catalog.json"

Definitions = dict[str, OperationDefinition]


def load_profile(path: Path = PROFILE_PATH) -> OperationProfile:
    """Read an OperationProfile from a camelCase JSON file."""
    return OperationProfile.model_validate_json(path.read_text(encoding="utf-8"))


def load_catalog(path: Path = CATALOG_PATH) -> Definitions:
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


def show_validation(
    title: str, profile: OperationProfile, catalog: OperationCatalog
) -> list[ProfileIssue]:
    """Validate ``profile`` against ``catalog``, print the outcome and return the issues."""
    issues = catalog.validate(profile)
    print(f"== {title}: profile {profile.profile_id!r}, {len(profile.operations)} operations")
    if not issues:
        print("valid: no issues")
    else:
        print(f"invalid: {len(issues)} issue(s)")
        print(format_issues(issues))
    print()
    return issues


class PrintEvents:
    """An event sink that prints the live event stream, one line per event."""

    def __init__(self) -> None:
        self.streaming = False

    async def emit(self, event: RunEvent) -> None:
        if isinstance(event, MainLlmDelta):
            if not self.streaming:
                print(f"  {event.seq:>3}  main_llm.delta     ", end="")
                self.streaming = True
            print(event.text, end="", flush=True)
            return
        if self.streaming:
            print()
            self.streaming = False
        detail = ""
        if isinstance(event, RunPhaseChanged):
            detail = event.phase.value
        elif isinstance(event, OperationStarted):
            detail = event.operation_name
        elif isinstance(event, OperationFinished):
            why = event.skipped_reason or (event.error.code if event.error else "")
            detail = f"{event.operation_name}: {event.status.value}" + (f" ({why})" if why else "")
        elif isinstance(event, RunFinished):
            detail = event.status.value + (
                f" ({event.failed_type.value})" if event.failed_type else ""
            )
        elif isinstance(event, MainLlmFinished):
            detail = f"{event.status.value} ({event.finish_reason.value})"
        print(f"  {event.seq:>3}  {event.type:<18} {detail}")


def summarize(result: RunResult) -> str:
    ops = ", ".join(
        f"{o.operation_id.split(':')[-1]}={o.status.value}"
        + (f"({o.skipped_reason.value})" if o.skipped_reason else "")
        + (f"({o.error.code})" if o.error else "")
        for o in result.operation_runs
    )
    failed = f" failedType={result.failed_type.value}" if result.failed_type else ""
    return f"run {result.status.value}{failed}; {ops}"


SYSTEM = "You are the narrator of a short fantasy role-play."


def request(profile: OperationProfile, text: str) -> RunRequest:
    """A new turn of the demo chat."""
    return RunRequest(
        trigger="generate",
        chat_id="demo",
        profile_id=profile.profile_id,
        user_message=text,
        system_prompt=SYSTEM,
    )


async def show_state(stores: SqliteStores, profile: OperationProfile) -> None:
    """Print the persisted artifacts and the chat."""
    key = OperationProfileSessionKey(
        chat_id="demo",
        branch_id="main",
        profile_ref=profile.ref,
        operation_profile_session_id=profile.operation_profile_session_id,
    )
    artifacts = await stores.sessions.get_artifacts(key)
    print("== persisted artifacts")
    for tag, artifact in sorted(artifacts.items()):
        print(f"  art.{tag} v{artifact.version} = {json.dumps(artifact.value)}")
        for old in artifact.history:
            print(f"      history v{old.version} = {json.dumps(old.value)}")
    print("\n== chat")
    for message in await stores.chats.history("demo", "main"):
        variants = f" [{len(message.variants)} variants]" if len(message.variants) > 1 else ""
        print(f"  {message.role.value:>9}: {message.prompt_text}{variants}")


async def play(
    db: Path, profile: OperationProfile, catalog: OperationCatalog, classifier: Classifier
) -> None:
    """Three turns, one regenerate and one run that fails the barrier."""
    with SqliteStores(db) as stores:  # its archive keeps the versions history prunes
        await stores.profiles.save_profile(profile)
        main_llm = OfflineMainLlm()
        runner = Runner(
            catalog=catalog,
            stores=stores,
            main_llm=main_llm,
            events=PrintEvents(),
            window=HistoryWindow(max_messages=4),  # the prompt keeps the newest four messages
        )

        async def turn(title: str, request: RunRequest) -> RunResult:
            print(f"== {title}")
            result = await runner.run(request)
            print(f"  -> {summarize(result)}\n")
            return result

        await turn("turn 1: a quiet scene", request(profile, "We walk into the tavern."))
        await turn("turn 2: combat", request(profile, "I draw my sword and attack the bandit!"))
        third = await turn("turn 3", request(profile, "We rest by the fire."))
        regenerated = await turn(
            "turn 3 again: regenerate",
            RunRequest(
                trigger="regenerate",
                chat_id="demo",
                profile_id=profile.profile_id,
                user_message_id=third.run.user_message_id,
                system_prompt=SYSTEM,
            ),
        )
        classifier.available = False
        failed = await turn(
            "turn 4: the guard's service is down", request(profile, "Let us go on.")
        )
        print(
            f"  the main LLM was called {len(main_llm.requests)} times in 5 runs; "
            f"turn 4 stopped at the barrier: {failed.run.failed_details}\n"
        )

        print("== why this answer? (the debug report of turn 3, regenerated)")
        print(render_markdown(await runner.explain(regenerated.run.run_id)))
        await show_state(stores, profile)


async def resume(db: Path) -> None:
    """A new process: open the same file, continue the chat with a fresh runner."""
    classifier = Classifier()
    catalog = build_catalog(load_catalog(), classifier)
    with SqliteStores(db) as stores:
        profile = await stores.profiles.get_profile(load_profile().profile_id)
        runner = Runner(
            catalog=catalog,
            stores=stores,
            main_llm=OfflineMainLlm(),
            window=HistoryWindow(max_messages=4),
        )
        before = len(await stores.chats.history("demo", "main"))
        result = await runner.run(request(profile, "At dawn we leave the tavern."))
        print(f"  this process found {before} messages in {db.name}")
        print(f"  turn 5 -> {summarize(result)}\n")
        await show_state(stores, profile)


def main() -> int:
    """Validate the shipped profile and a broken copy, run it, then resume in a new process."""
    if sys.argv[1:2] == ["--resume"]:
        anyio.run(resume, Path(sys.argv[2]))
        return 0
    profile = load_profile()
    classifier = Classifier()
    catalog = build_catalog(load_catalog(), classifier)
    show_validation("RP basic as shipped", profile, catalog)
    show_validation("RP basic with four mistakes", broken_variant(profile), catalog)
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "quickstart.db"
        anyio.run(play, db, profile, catalog, classifier)
        print(f"\n== a second process continues chat 'demo' from {db.name}")
        sys.stdout.flush()
        subprocess.run([sys.executable, __file__, "--resume", str(db)], check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
