"""The four operations of the "RP basic" profile, written against opsrun's public API.

Each one is a small subclass of :class:`opsrun.Operation`; the runner gives them
parallelism, dependencies, timeouts, the barrier and deterministic commit for free.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from opsrun import (
    AppendAfterLastUser,
    InsertAtDepth,
    Operation,
    OperationCatalog,
    OperationContext,
    OperationDefinition,
    OperationFailed,
    OperationResult,
)
from opsrun.model import ChatRole, LlmParams

COMBAT_WORDS = re.compile(r"\b(attack|sword|fight|strike|bandit|arrow)s?\b", re.IGNORECASE)


def last_user_text(ctx: OperationContext) -> str:
    """The current user message's text."""
    for message in reversed(ctx.history):
        if message.role == ChatRole.USER:
            return message.prompt_text
    return ""


class Classifier:
    """Stands in for a remote classification service the guard calls."""

    def __init__(self) -> None:
        self.available = True

    async def is_combat(self, text: str) -> bool:
        if not self.available:
            raise OperationFailed("the combat classifier is unreachable", code="classifier_down")
        return COMBAT_WORDS.search(text) is not None


class CombatGuard(Operation):
    """Decides whether this turn is a combat scene (a run-only boolean)."""

    def __init__(self, definition: OperationDefinition, classifier: Classifier) -> None:
        self.definition = definition
        self.classifier = classifier

    async def execute(self, ctx: OperationContext) -> OperationResult:
        is_combat = await self.classifier.is_combat(last_user_text(ctx))
        return OperationResult.done(
            artifact=ctx.write(is_combat),
            outputs_summary={"isCombat": is_combat},
        )


class CombatRetrieval(Operation):
    """Looks up combat rules; skips itself unless the guard said combat."""

    def __init__(self, definition: OperationDefinition) -> None:
        self.definition = definition

    async def execute(self, ctx: OperationContext) -> OperationResult:
        if not ctx.art_value("is_combat", False):
            return OperationResult.skipped()
        rules = "Combat rules: initiative by agility; a sword deals 1d8; bandits flee at 3 HP."
        return OperationResult.done(
            artifact=ctx.write(rules),
            prompt=[InsertAtDepth(depth_from_end=-1, content=rules, source="art.combat_context")],
        )


class AugmentationNotes(Operation[LlmParams]):
    """Writes short notes for the main model, inserted after the user message.

    In production this is an ``llm`` operation calling an auxiliary model; here it
    derives the notes deterministically so the demo runs offline. Its params model is the
    ``llm`` kind's, so the catalog validates the profile's params as it would for the
    built-in kind.
    """

    params_model = LlmParams

    def __init__(self, definition: OperationDefinition) -> None:
        self.definition = definition

    async def execute(self, ctx: OperationContext[LlmParams]) -> OperationResult:
        state = ctx.art_value("world_state") or {}
        location = state.get("location", "unknown") if isinstance(state, Mapping) else "unknown"
        notes = f"- Scene location: {location}.\n- Keep the narrator's voice terse."
        return OperationResult.done(
            artifact=ctx.write(notes),
            prompt=[AppendAfterLastUser(content=notes, source="art.augmentation_notes")],
        )


class WorldStateUpdate(Operation):
    """Folds the assistant's answer into the persisted world state."""

    def __init__(self, definition: OperationDefinition) -> None:
        self.definition = definition

    async def execute(self, ctx: OperationContext) -> OperationResult:
        previous = ctx.art_value("world_state") or {}
        assert isinstance(previous, Mapping)
        user = last_user_text(ctx).lower()
        location = previous.get("location", "the road")
        for place in ("tavern", "forest", "camp", "fire"):
            if place in user:
                location = "the camp" if place == "fire" else f"the {place}"
        combat = bool(ctx.art_value("is_combat", False))
        state = {
            "updates": int(previous.get("updates", 0)) + 1,
            "location": location,
            "mood": "tense" if COMBAT_WORDS.search(user) else "calm",
            "lastReplyChars": len(ctx.main_llm.text or "") if ctx.main_llm else 0,
            "combatSeen": combat or bool(previous.get("combatSeen", False)),
        }
        return OperationResult.done(artifact=ctx.write(state))


def build_catalog(
    definitions: Mapping[str, OperationDefinition], classifier: Classifier
) -> OperationCatalog:
    """Wire the implementations to the definitions of ``rp_basic.catalog.json``."""
    return OperationCatalog(
        [
            CombatGuard(definitions["builtin:is_combat_guard"], classifier),
            CombatRetrieval(definitions["builtin:combat_rag"]),
            AugmentationNotes(definitions["builtin:augmentation_notes"]),
            WorldStateUpdate(definitions["builtin:world_state_update"]),
        ]
    )
