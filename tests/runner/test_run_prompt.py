"""The runner's effective prompt: history window, artifact inclusions and the recorded snapshot."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from _support import A, B, generate, make_runner, op, use_profile
from opsrun.errors import ConfigError
from opsrun.model import (
    AfterLastUser,
    AppendAfterLastUser,
    ArchivedVersion,
    ArtifactRef,
    ArtifactUsage,
    AugmentationStorage,
    DomainRole,
    OperationProfileSessionKey,
    OperationResult,
    OperationStatus,
    PromptInclusion,
    RelativeToEnd,
    RunStatus,
    SystemUpdate,
    TrimmedRange,
    WindowRetention,
)
from opsrun.operations import OperationCatalog, OperationContext
from opsrun.ports import MainLlmRequest
from opsrun.prompt import HistoryWindow, SnapshotPolicy, prompt_hash
from opsrun.report import render_markdown
from opsrun.stores import InMemoryStores
from opsrun.testing import ScriptedMainLlm

pytestmark = pytest.mark.anyio

KEY = OperationProfileSessionKey(
    chat_id="c", branch_id="main", profile_ref="p", operation_profile_session_id="s1"
)


def world_writer(catalog: OperationCatalog, inclusion: PromptInclusion | None = None) -> None:
    """``world`` writes art.world = {"turn": n} after the main LLM, included in the system."""
    include = inclusion or PromptInclusion(mode="prepend_system")

    @catalog.function("world", name="World", write_tag="world")
    async def _world(ctx: OperationContext) -> OperationResult:
        current = ctx.art_value("world", {"turn": 0})
        assert isinstance(current, dict)
        value = {"turn": current["turn"] + 1}
        return OperationResult.done(
            artifact=ctx.write(
                value,
                usage=ArtifactUsage.PROMPT_AND_UI,
                prompt_inclusion=include,
                retention=WindowRetention(max_versions=1),
            )
        )


def sent(request: MainLlmRequest | None) -> list[tuple[str, str]]:
    assert request is not None
    return [(m.role, m.content) for m in request.messages]


async def test_history_window_trims_and_records_why() -> None:
    stores, catalog, llm = InMemoryStores(), OperationCatalog(), ScriptedMainLlm()
    runner = make_runner(
        stores=stores, catalog=catalog, main_llm=llm, window=HistoryWindow(max_messages=3)
    )
    await use_profile(stores)
    results = [await runner.run(generate(f"turn {i}", system_prompt="S")) for i in range(3)]
    # Turn 3 sees u0 a0 u1 a1 u2; the window keeps the newest three.
    assert sent(llm.last_request) == [
        ("system", "S"),
        ("user", "turn 1"),
        ("assistant", "OK"),
        ("user", "turn 2"),
    ]
    snapshot = results[-1].run.main_llm.prompt
    assert snapshot is not None
    history = await stores.chats.history("c", "main")
    assert snapshot.trimmed == (
        TrimmedRange(
            first_message_id=history[0].message_id,
            last_message_id=history[1].message_id,
            count=2,
            reason="max_messages",
        ),
    )
    assert snapshot.history_window == {"maxMessages": 3}
    first = results[0].run.main_llm.prompt
    assert first is not None
    assert first.trimmed == ()


async def test_snapshot_matches_what_was_sent() -> None:
    stores, catalog, llm = InMemoryStores(), OperationCatalog(), ScriptedMainLlm()
    runner = make_runner(stores=stores, catalog=catalog, main_llm=llm)

    @catalog.function("note", name="Note")
    async def _note(ctx: OperationContext) -> OperationResult:
        return OperationResult.done(
            prompt=[
                AppendAfterLastUser(
                    content="be brief", role=DomainRole.DEVELOPER, source="art.style"
                )
            ]
        )

    await use_profile(stores, op("note"))
    result = await runner.run(generate("hello", system_prompt="S"))
    snapshot = result.run.main_llm.prompt
    request = llm.last_request
    assert snapshot is not None
    assert request is not None
    assert snapshot.prompt_hash == prompt_hash(request.messages) == result.run.main_llm.prompt_hash
    # History is kept by reference (id and hash): the chat store has its text.
    kept = [(m.role, m.content) for m in snapshot.messages]
    assert kept == [("system", "S"), ("user", None), ("system", "be brief")]
    assert [(m.role, m.chars, m.sha256) for m in snapshot.messages] == [
        (m.role, len(m.content), hashlib.sha256(m.content.encode()).hexdigest())
        for m in request.messages
    ]
    history = snapshot.messages[1]
    assert history.storage == AugmentationStorage.REFERENCE
    assert history.source is not None
    assert history.source.message_id == result.run.user_message_id
    assert [m.domain_role for m in snapshot.messages] == [
        DomainRole.SYSTEM,
        DomainRole.USER,
        DomainRole.DEVELOPER,
    ]
    assert snapshot.roles_mapped  # the scripted main LLM has no developer role
    kinds = [m.source.kind if m.source else None for m in snapshot.messages]
    assert kinds == ["system", "history", "effect"]
    assert snapshot.messages[2].source is not None
    assert snapshot.messages[2].source.operation_id == "note"
    assert snapshot.messages[2].source.note == "art.style"
    report = await runner.explain(result.run.run_id)
    assert report.prompt is not None
    assert report.prompt.messages[2].source == (
        "effect note (prompt.append_after_last_user) from art.style"
    )


async def test_persisted_artifact_enters_later_prompts_and_draft() -> None:
    stores, catalog, llm = InMemoryStores(), OperationCatalog(), ScriptedMainLlm()
    runner = make_runner(stores=stores, catalog=catalog, main_llm=llm)
    world_writer(catalog)
    drafts: list[str] = []

    @catalog.function("peek", name="Peek")
    async def _peek(ctx: OperationContext) -> OperationResult:
        drafts.append(ctx.prompt[0].content if ctx.prompt else "")
        return OperationResult.done()

    await use_profile(stores, op("peek", B), op("world", A, order=2))
    first = await runner.run(generate("one", system_prompt="S"))
    second = await runner.run(generate("two", system_prompt="S"))
    # Turn 1 had no artifact yet; turn 2 sees version 1, as the draft did.
    assert sent(llm.requests[0])[0] == ("system", "S")
    assert sent(llm.requests[1])[0] == ("system", '{"turn":1}\n\nS')
    assert drafts == ["S", '{"turn":1}\n\nS']
    assert first.run.artifacts_at_start == ()
    assert second.run.artifacts_at_start == (ArtifactRef(tag="world", version=1),)
    snapshot = second.run.main_llm.prompt
    assert snapshot is not None
    (record,) = snapshot.inclusions
    assert (record.tag, record.included, record.versions, record.where) == (
        "world",
        True,
        (1,),
        "system:start",
    )
    assert snapshot.messages[0].source is not None
    assert snapshot.messages[0].source.kind == "artifact"


async def test_inclusion_anchor_lost_to_the_window_is_recorded() -> None:
    stores, catalog, llm = InMemoryStores(), OperationCatalog(), ScriptedMainLlm()
    runner = make_runner(
        stores=stores, catalog=catalog, main_llm=llm, window=HistoryWindow(max_messages=1)
    )
    world_writer(
        catalog,
        PromptInclusion(
            mode="as_message",
            target="timeline",
            anchor=RelativeToEnd(offset=-3, role_filter="any"),
            place="before",
        ),
    )
    await use_profile(stores, op("world", A))
    await runner.run(generate("one"))
    await runner.run(generate("two"))
    result = await runner.run(generate("three"))
    snapshot = result.run.main_llm.prompt
    assert snapshot is not None
    (record,) = snapshot.inclusions
    assert (record.included, record.reason) == (False, "anchor_trimmed")
    assert sent(llm.last_request) == [("user", "three")]


async def test_a_system_message_an_operation_changed_follows_the_augmentation_policy() -> None:
    """The request's own system prompt is kept redacted; once an operation's system
    update is in it, it holds the operation's text and ``hash_only`` keeps that out."""
    stores, catalog = InMemoryStores(), OperationCatalog()
    policy = SnapshotPolicy(augmentation=AugmentationStorage.HASH_ONLY)
    runner = make_runner(stores=stores, catalog=catalog, snapshot=policy)

    @catalog.function("style", name="Style")
    async def _style(ctx: OperationContext) -> OperationResult:
        return OperationResult.done(prompt=[SystemUpdate(mode="append", content=" secret note")])

    await use_profile(stores, op("style"))
    changed = await runner.run(generate("one", system_prompt="Be kind."))
    snapshot = changed.run.main_llm.prompt
    assert snapshot is not None
    system = snapshot.messages[0]
    assert (system.storage, system.content) == (AugmentationStorage.HASH_ONLY, None)
    assert system.chars == len("Be kind. secret note")
    await use_profile(stores)
    plain = await runner.run(generate("two", system_prompt="Be kind."))
    assert plain.run.main_llm.prompt is not None
    system = plain.run.main_llm.prompt.messages[0]
    assert (system.storage, system.content) == (AugmentationStorage.REDACTED, "Be kind.")


@pytest.mark.parametrize(
    ("storage", "first", "second"),
    [
        (AugmentationStorage.REDACTED, 'created: "home is 12 Elm Road"', None),
        (AugmentationStorage.SUMMARY, 'created: "h', None),
        (AugmentationStorage.HASH_ONLY, "created", "changed"),
    ],
)
async def test_an_artifact_change_summary_follows_the_augmentation_policy(
    storage: AugmentationStorage, first: str, second: str | None
) -> None:
    stores, catalog = InMemoryStores(), OperationCatalog()
    policy = SnapshotPolicy(augmentation=storage, summary_chars=11)
    runner = make_runner(stores=stores, catalog=catalog, snapshot=policy)

    @catalog.function("notes", name="Notes", write_tag="notes")
    async def _notes(ctx: OperationContext) -> OperationResult:
        text = "home is 12 Elm Road" if ctx.art_value("notes") is None else "moved away"
        return OperationResult.done(artifact=ctx.write(text))

    await use_profile(stores, op("notes"))
    summaries = []
    for text in ("one", "two"):
        result = await runner.run(generate(text))
        (write,) = [e for e in result.run.applied_effects if e.summary is not None]
        summaries.append(write.summary)
    assert summaries[0] == first
    if second is not None:
        assert summaries[1] == second
    if storage != AugmentationStorage.REDACTED:
        assert all("Elm Road" not in (s or "") for s in summaries)


async def test_snapshot_is_bounded_and_augmentation_follows_the_policy() -> None:
    stores, catalog, llm = InMemoryStores(), OperationCatalog(), ScriptedMainLlm()
    policy = SnapshotPolicy(
        max_message_chars=10, max_total_chars=25, augmentation=AugmentationStorage.HASH_ONLY
    )
    runner = make_runner(stores=stores, catalog=catalog, main_llm=llm, snapshot=policy)

    @catalog.function("notes", name="Notes")
    async def _notes(ctx: OperationContext) -> OperationResult:
        return OperationResult.done(prompt=[AppendAfterLastUser(content="private working notes")])

    await use_profile(stores, op("notes"))
    result = await runner.run(generate("u" * 40, system_prompt="system prompt"))
    snapshot = result.run.main_llm.prompt
    assert snapshot is not None
    system, user, notes = snapshot.messages
    assert (system.content, system.truncated, system.chars) == ("system pr…", True, 13)
    assert (user.content, user.storage, user.chars) == (None, AugmentationStorage.REFERENCE, 40)
    assert notes.content is None
    assert notes.storage == AugmentationStorage.HASH_ONLY
    assert notes.chars == len("private working notes")
    # A total budget smaller than the messages omits the rest.
    tight_stores = InMemoryStores()
    tight = make_runner(stores=tight_stores, snapshot=SnapshotPolicy(max_total_chars=4))
    await use_profile(tight_stores)
    tight_result = await tight.run(generate("hello", system_prompt="system"))
    tight_snapshot = tight_result.run.main_llm.prompt
    assert tight_snapshot is not None
    # The system message is served first; history costs nothing (kept by reference).
    assert [m.content for m in tight_snapshot.messages] == ["sys…", None]
    assert [m.chars for m in tight_snapshot.messages] == [6, 5]
    assert tight_snapshot.omitted_messages == 0
    # Once the budget is spent, later text keeps only its length and hash.
    spent_stores, spent_catalog = InMemoryStores(), OperationCatalog()
    spent = make_runner(
        stores=spent_stores, catalog=spent_catalog, snapshot=SnapshotPolicy(max_total_chars=4)
    )

    @spent_catalog.function("notes", name="Notes")
    async def _more(ctx: OperationContext) -> OperationResult:
        return OperationResult.done(prompt=[AppendAfterLastUser(content="notes")])

    await use_profile(spent_stores, op("notes"))
    spent_result = await spent.run(generate("hello", system_prompt="system"))
    spent_snapshot = spent_result.run.main_llm.prompt
    assert spent_snapshot is not None
    # Newest first after the system message: the notes take the budget, the system
    # message is served first and gets it all.
    assert [m.content for m in spent_snapshot.messages] == ["sys…", None, None]
    assert spent_snapshot.omitted_messages == 1


async def test_summary_storage_keeps_a_short_opening() -> None:
    stores, catalog, llm = InMemoryStores(), OperationCatalog(), ScriptedMainLlm()
    policy = SnapshotPolicy(summary_chars=8, augmentation=AugmentationStorage.SUMMARY)
    runner = make_runner(stores=stores, catalog=catalog, main_llm=llm, snapshot=policy)

    @catalog.function("notes", name="Notes")
    async def _notes(ctx: OperationContext) -> OperationResult:
        return OperationResult.done(prompt=[AppendAfterLastUser(content="abcdefghijkl")])

    await use_profile(stores, op("notes"))
    result = await runner.run(generate("question"))
    snapshot = result.run.main_llm.prompt
    assert snapshot is not None
    user, notes = snapshot.messages
    assert (user.content, user.storage) == (None, AugmentationStorage.REFERENCE)
    assert (notes.content, notes.storage, notes.truncated) == (
        "abcdefg…",
        AugmentationStorage.SUMMARY,
        True,
    )


async def test_generation_params_reach_the_main_llm_and_are_recorded_redacted() -> None:
    stores, catalog, llm = InMemoryStores(), OperationCatalog(), ScriptedMainLlm()
    runner = make_runner(stores=stores, catalog=catalog, main_llm=llm)
    await use_profile(stores)
    key = "sk-proj-" + "Ab3" * 16
    params = {"model": "local-7b", "temperature": 0.2, "apiKey": key}
    result = await runner.run(generate("hi", main_llm_params=params))
    request = llm.last_request
    assert request is not None
    assert dict(request.params) == params
    recorded = result.run.main_llm.params
    assert (recorded["model"], recorded["temperature"]) == ("local-7b", 0.2)
    assert key not in str(recorded)


async def test_artifact_writes_record_a_short_diff_and_pruned_versions() -> None:
    stores, catalog, llm = InMemoryStores(), OperationCatalog(), ScriptedMainLlm()
    runner = make_runner(stores=stores, catalog=catalog, main_llm=llm)  # the bundle's archive
    world_writer(catalog)
    await use_profile(stores, op("world", A))
    results = [await runner.run(generate(f"t{i}")) for i in range(3)]
    writes = [r.run.applied_effects[0] for r in results]
    assert [w.summary for w in writes] == [
        'created: {"turn":1}',
        "turn: 1 → 2",
        "turn: 2 → 3",
    ]
    # maxVersions=1 keeps one history item: the third write prunes version 1.
    assert [w.pruned_versions for w in writes] == [(), (), (1,)]
    archived = await stores.archive.versions(KEY, "world")
    assert [(a.version.version, a.version.value, a.run_id) for a in archived] == [
        (1, {"turn": 1}, results[2].run.run_id)
    ]
    current = (await stores.sessions.get_artifacts(KEY))["world"]
    assert (current.version, [h.version for h in current.history]) == (3, [2])


class BrokenArchive:
    def __init__(self) -> None:
        self.calls = 0

    async def archive(self, *args: Any, **kwargs: Any) -> None:
        self.calls += 1
        raise OSError("disk full")

    async def versions(self, key: OperationProfileSessionKey, tag: str) -> list[ArchivedVersion]:
        return []


async def test_a_failing_archive_keeps_the_previous_state() -> None:
    stores, catalog, llm = InMemoryStores(), OperationCatalog(), ScriptedMainLlm()
    archive = BrokenArchive()
    runner = make_runner(stores=stores, catalog=catalog, main_llm=llm, archive=archive)
    world_writer(catalog)
    await use_profile(stores, op("world", A))
    for i in range(2):
        assert (await runner.run(generate(f"t{i}"))).status == RunStatus.DONE
    result = await runner.run(generate("t2"))
    assert archive.calls == 1
    world = result.operation("world")
    assert world.status == OperationStatus.ERROR
    assert world.error is not None
    assert world.error.code == "archive_failed"
    assert "disk full" in world.error.message
    current = (await stores.sessions.get_artifacts(KEY))["world"]
    assert (current.version, current.value, [h.version for h in current.history]) == (
        2,
        {"turn": 2},
        [1],
    )


async def test_a_new_session_id_starts_fresh_and_keeps_the_old_session() -> None:
    stores, catalog, llm = InMemoryStores(), OperationCatalog(), ScriptedMainLlm()
    runner = make_runner(stores=stores, catalog=catalog, main_llm=llm)
    world_writer(catalog)
    await use_profile(stores, op("world", A))
    await runner.run(generate("one"))
    await runner.run(generate("two"))
    profile = await stores.profiles.get_profile("p")
    await stores.profiles.save_profile(
        profile.model_copy(update={"operation_profile_session_id": "s2"})
    )
    result = await runner.run(generate("three"))
    assert result.run.operation_profile_session_id == "s2"
    assert result.run.artifacts_at_start == ()
    new_key = KEY.model_copy(update={"operation_profile_session_id": "s2"})
    assert (await stores.sessions.get_artifacts(new_key))["world"].value == {"turn": 1}
    assert (await stores.sessions.get_artifacts(KEY))["world"].value == {"turn": 2}
    assert len(stores.sessions.sessions()) == 2


async def test_a_spent_snapshot_budget_keeps_system_and_newest_messages() -> None:
    stores, catalog, llm = InMemoryStores(), OperationCatalog(), ScriptedMainLlm()
    runner = make_runner(
        stores=stores, catalog=catalog, main_llm=llm, snapshot=SnapshotPolicy(max_total_chars=5)
    )

    @catalog.function("notes", name="Notes")
    async def _notes(ctx: OperationContext) -> OperationResult:
        notes = ("aaaa", "OK", "cccc")
        return OperationResult.done(prompt=[AppendAfterLastUser(content=n) for n in notes])

    await use_profile(stores, op("notes"))
    await runner.run(generate("first", system_prompt="S"))
    result = await runner.run(generate("second", system_prompt="S"))
    snapshot = result.run.main_llm.prompt
    assert snapshot is not None
    # System first, then from the newest back; history is kept by reference.
    assert [m.content for m in snapshot.messages] == ["S", None, None, None, None, None, "cccc"]
    assert [m.chars for m in snapshot.messages] == [1, 5, 2, 6, 4, 2, 4]
    kinds = [m.source.kind if m.source else None for m in snapshot.messages]
    assert kinds == ["system", "history", "history", "history", "effect", "effect", "effect"]
    assert snapshot.omitted_messages == 2
    assert snapshot.messages[2].sha256 == snapshot.messages[5].sha256  # "OK" both times


async def test_explain_shows_history_kept_by_reference_while_its_text_is_unchanged() -> None:
    stores = InMemoryStores()
    runner = make_runner(stores=stores)
    await use_profile(stores)
    key = "sk-proj-" + "Ab3" * 16
    result = await runner.run(generate(f"my key is {key}"))
    first = await runner.explain(result.run.run_id)
    assert first.prompt is not None
    (message,) = first.prompt.messages
    assert message.storage == AugmentationStorage.REFERENCE
    assert message.content is not None
    assert message.content.startswith("my key is sk-proj-")
    assert key not in message.content  # shown redacted
    # Edited since the run: the hash no longer matches, so no text is shown.
    stored = await stores.chats.get_message("c", result.run.user_message_id)
    variant = stored.variants[0].model_copy(update={"content": "something else"})
    await stores.chats.save_message(stored.model_copy(update={"variants": (variant,)}))
    report = await runner.explain(result.run.run_id)
    assert report.prompt is not None
    (edited,) = report.prompt.messages
    assert (edited.content, edited.storage) == (None, AugmentationStorage.REFERENCE)
    assert "no text with the hash sent was found" in render_markdown(report)


async def test_explain_shows_the_text_sent_after_the_host_selects_an_edited_variant() -> None:
    """Input and prompt show the variant the run sent, not the one selected since; a
    message whose sent text is gone shows none, rather than the new text."""
    stores = InMemoryStores()
    runner = make_runner(stores=stores)
    await use_profile(stores)
    result = await runner.run(generate("Delete the staging database."))
    stored = await stores.chats.get_message("c", result.run.user_message_id)
    edit = stored.selected.model_copy(update={"variant_id": "v-edit", "content": "Say hello."})
    await stores.chats.save_message(
        stored.model_copy(
            update={"variants": (*stored.variants, edit), "selected_variant_id": "v-edit"}
        )
    )
    report = await runner.explain(result.run.run_id)
    assert report.inputs.user_message is not None
    assert report.inputs.user_message.text == "Delete the staging database."
    assert report.prompt is not None
    assert report.prompt.messages[-1].content == "Delete the staging database."
    assert "Say hello." not in render_markdown(report)
    # Only the edit is left: no variant has the text sent.
    await stores.chats.save_message(
        stored.model_copy(update={"variants": (edit,), "selected_variant_id": "v-edit"})
    )
    gone = await runner.explain(result.run.run_id)
    assert gone.inputs.user_message is None
    assert "Say hello." not in render_markdown(gone)


async def test_explain_shows_the_user_message_an_artifact_wrapped() -> None:
    """The prompt sent the message wrapped (its hash is not of any variant's text): the
    input still shows the message the turn stored."""
    catalog = OperationCatalog()

    @catalog.function("wrap", name="Wrap", write_tag="wrap")
    async def _wrap(ctx: OperationContext) -> OperationResult:
        inclusion = PromptInclusion(mode="as_message", operation="wrap", anchor=AfterLastUser())
        value = {"pre": "[[", "post": "]]"}
        usage = ArtifactUsage.PROMPT_ONLY
        return OperationResult.done(
            artifact=ctx.write(value, usage=usage, prompt_inclusion=inclusion)
        )

    stores = InMemoryStores()
    main_llm = ScriptedMainLlm()
    runner = make_runner(stores=stores, catalog=catalog, main_llm=main_llm)
    await use_profile(stores, op("wrap", A))
    await runner.run(generate("first"))
    result = await runner.run(generate("second"))
    assert main_llm.requests[-1].messages[-1].content == "[[second]]"
    report = await runner.explain(result.run.run_id)
    assert report.inputs.user_message is not None
    assert report.inputs.user_message.text == "second"


def test_a_snapshot_policy_cannot_keep_augmentation_by_reference() -> None:
    with pytest.raises(ConfigError) as caught:
        SnapshotPolicy(augmentation=AugmentationStorage.REFERENCE)
    assert caught.value.code == "config_error"
