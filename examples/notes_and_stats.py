"""Working notes before the main LLM, a world state and a stats panel after it, offline.

The profile (``notes_and_stats.profile.json``) has three operations:

- ``notes:working_notes`` (kind ``llm``, before the main LLM): an aux model writes short
  notes, inserted right after the user's message as a ``developer`` message;
- ``stats:world_state`` (a compute operation written below, after the main LLM):
  counts turns and words into ``art.world_state``;
- ``stats:panel`` (kind ``template``, after, ``dependsOn`` the world state): renders a
  markdown panel from ``art.world_state`` into ``art.stats_panel``.

The aux model is a :class:`~opsrun.testing.FunctionProvider` and the main model an
:class:`~opsrun.testing.OfflineMainLlm`, so this runs without network or keys::

    python examples/notes_and_stats.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio

from opsrun import (
    InMemoryStores,
    OperationCatalog,
    OperationContext,
    OperationDefinition,
    OperationProfile,
    OperationResult,
    Runner,
    RunRequest,
    RunResult,
    builtin_kinds,
)
from opsrun.model import Artifact
from opsrun.providers import LlmRequest, ProviderRegistry
from opsrun.testing import FunctionProvider, OfflineMainLlm

PROFILE_PATH = Path(__file__).resolve().parent / "notes_and_stats.profile.json"


def offline_notes(request: LlmRequest) -> str:
    """The aux model: notes derived from the last user line of the prompt it was sent."""
    prompt = request.messages[-1].content
    users = [line[len("user: ") :] for line in prompt.splitlines() if line.startswith("user: ")]
    last = users[-1] if users else ""
    return f"- The user now says: {last!r}\n- Stay consistent with the {len(users)} turn(s) so far."


def build_catalog(registry: ProviderRegistry) -> OperationCatalog:
    """The built-in kinds, the two declarative operations and the world-state compute."""
    catalog = OperationCatalog(kinds=builtin_kinds(providers=registry))
    catalog.add_definition(
        OperationDefinition(operation_id="notes:working_notes", name="Working notes", kind="llm")
    )
    catalog.add_definition(
        OperationDefinition(operation_id="stats:panel", name="Stats panel", kind="template")
    )

    @catalog.function("stats:world_state", name="World state", write_tag="world_state")
    async def world_state(ctx: OperationContext) -> OperationResult:
        state = ctx.art_value("world_state") or {"turns": 0, "userWords": 0, "assistantWords": 0}
        users = [m.prompt_text for m in ctx.history if m.role == "user"]
        user = users[-1] if users else ""
        reply = (ctx.main_llm.text if ctx.main_llm is not None else None) or ""
        value = {
            "turns": state["turns"] + 1,
            "userWords": state["userWords"] + len(user.split()),
            "assistantWords": state["assistantWords"] + len(reply.split()),
            "lastUserMessage": user,
        }
        return OperationResult.done(
            artifact=ctx.write(value, persisted=True, usage="internal", semantics="state")
        )

    return catalog


async def artifacts_of(stores: InMemoryStores, result: RunResult) -> dict[str, Artifact]:
    """The persisted artifacts of the run's profile session."""
    key = result.run.session_key
    assert key is not None
    return await stores.sessions.get_artifacts(key)


async def main() -> int:
    """Run two turns and print what each operation did, then the panel."""
    stores = InMemoryStores()
    profile = OperationProfile.model_validate_json(PROFILE_PATH.read_text(encoding="utf-8"))
    await stores.profiles.save_profile(profile)
    provider = FunctionProvider(offline_notes)
    main_llm = OfflineMainLlm()
    runner = Runner(
        catalog=build_catalog(ProviderRegistry({"offline": provider})),
        stores=stores,
        main_llm=main_llm,
    )
    panel: Artifact | None = None
    for text in ("We reach the old lighthouse at dusk.", "I climb the stairs, lantern raised."):
        result = await runner.run(
            RunRequest(
                trigger="generate",
                chat_id="demo",
                profile_id=profile.profile_id,
                user_message=text,
                system_prompt="You are the narrator of a short mystery.",
            )
        )
        print(f"== turn: {text}")
        print(f"run {result.status.value}")
        for op in result.operation_runs:
            extra = f" ({op.error.code}: {op.error.message})" if op.error else ""
            print(f"  {op.hook.value:<16} {op.operation_id:<22} {op.status.value}{extra}")
        request = main_llm.last_request
        assert request is not None
        print("  main LLM prompt:")
        for message in request.messages:
            print(f"    {message.role:>9}: {message.content.splitlines()[0][:70]}")
        panel = (await artifacts_of(stores, result)).get("stats_panel")
        print()
    print("== art.stats_panel")
    print(panel.value if panel is not None else "(missing)")
    return 0 if panel is not None else 1


if __name__ == "__main__":
    sys.exit(anyio.run(main))
