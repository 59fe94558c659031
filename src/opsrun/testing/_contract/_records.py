"""The contract of profiles, profile sessions with their artifacts, and the archive."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ...errors import ArtifactConflict, NotFound
from ...model import (
    ArtifactVersion,
    Hook,
    OperationConfig,
    OperationProfile,
    ProfileOperation,
    PromptInclusion,
    Trigger,
    UiPresentation,
    WindowRetention,
)
from ...ports import Stores
from ._support import (
    JSON_VALUES,
    PROPERTY,
    T0,
    ContractBase,
    make_artifact,
    make_key,
    make_message,
    new_id,
)

__all__ = ["RecordContract"]


def _change(action: Callable[[], object]) -> None:
    """Change a record the store handed out; a store may refuse (``TypeError``)."""
    with contextlib.suppress(TypeError):
        action()


class RecordContract(ContractBase):
    """Profiles, sessions and compare-and-set artifacts, the archive, snapshots and payloads."""

    # --- profiles ---------------------------------------------------------------------

    async def test_a_profile_round_trips(self, stores: Stores) -> None:
        """A saved profile comes back equal, every field and nested config included."""
        profile = OperationProfile(
            profile_id=new_id("profile"),
            name="Profil « été »",
            description="notes",
            operation_profile_session_id="session-1",
            version=3,
            operations=(
                ProfileOperation(
                    operation_id="notes",
                    config=OperationConfig(
                        hooks=(Hook.BEFORE_MAIN_LLM, Hook.AFTER_MAIN_LLM),
                        triggers=(Trigger.GENERATE,),
                        order=1.5,
                        required=True,
                        depends_on=("other",),
                        timeout_ms=1000,
                        params={"prompt": "{{ x }}", "nested": [1, {"a": None}]},
                    ),
                ),
            ),
        )
        await stores.profiles.save_profile(profile)
        assert await stores.profiles.get_profile(profile.profile_id) == profile

    async def test_saving_a_profile_again_replaces_it(self, stores: Stores) -> None:
        """``save_profile`` with a known id replaces the stored profile."""
        first = OperationProfile(
            profile_id=new_id("profile"), name="One", operation_profile_session_id="s1"
        )
        second = first.model_copy(update={"name": "Two", "operation_profile_session_id": "s2"})
        await stores.profiles.save_profile(first)
        await stores.profiles.save_profile(second)
        assert await stores.profiles.get_profile(first.profile_id) == second

    async def test_a_missing_profile_is_not_found(self, stores: Stores) -> None:
        """``get_profile`` of an unknown id raises ``NotFound`` (code ``not_found``)."""
        with pytest.raises(NotFound) as missing:
            await stores.profiles.get_profile(new_id("profile"))
        assert missing.value.code == "not_found"

    # --- sessions and artifacts ---------------------------------------------------------

    async def test_a_session_is_created_once(self, stores: Stores) -> None:
        """``get_or_create_session`` creates a session once and then returns it unchanged."""
        key = make_key()
        created = await stores.sessions.get_or_create_session(key, T0)
        again = await stores.sessions.get_or_create_session(key, T0 + timedelta(days=1))
        assert created.key == key
        assert created.created_at == T0
        assert again == created

    async def test_every_field_of_a_session_key_selects_another_session(
        self, stores: Stores
    ) -> None:
        """Artifacts live under the whole key: chat, branch, profile ref and session id."""
        base = make_key()
        keys = [
            base,
            make_key(),
            make_key(base.chat_id, branch_id="other"),
            make_key(base.chat_id, profile_ref="profile@2"),
            make_key(base.chat_id, operation_profile_session_id="session-2"),
        ]
        for index, key in enumerate(keys):
            await stores.sessions.get_or_create_session(key, T0)
            await stores.sessions.put_artifact(
                key, make_artifact("notes", 1, value=index), expected_version=None
            )
        for index, key in enumerate(keys):
            assert (await stores.sessions.get_artifacts(key))["notes"].value == index
        assert await stores.sessions.get_artifacts(make_key()) == {}

    @PROPERTY
    @given(value=JSON_VALUES, text=st.text(max_size=40))
    async def test_an_artifact_round_trips(self, stores: Stores, value: Any, text: str) -> None:
        """A stored artifact comes back equal: any JSON value, history, rules and times."""
        key = make_key()
        artifact = make_artifact(
            "notes",
            3,
            value=value,
            semantics="log/feed",
            history=(
                ArtifactVersion(version=2, value=text, created_at=T0 + timedelta(seconds=1)),
                ArtifactVersion(version=1, value={"v": [value]}, created_at=T0),
            ),
            retention=WindowRetention(max_versions=2, ttl_ms=60_000),
            prompt_inclusion=PromptInclusion(mode="append_after_last_user", priority=-1),
            ui_presentation=UiPresentation(mode="timeline", max_items=5),
            written_by="op",
            run_id="run-1",
            created_at=T0,
            updated_at=T0 + timedelta(seconds=2),
        )
        await stores.sessions.put_artifact(key, artifact, expected_version=None)
        assert await stores.sessions.get_artifacts(key) == {"notes": artifact}

    async def test_get_artifacts_returns_the_latest_of_every_tag(self, stores: Stores) -> None:
        """``get_artifacts`` maps every tag of the session to its latest artifact."""
        key = make_key()
        await stores.sessions.put_artifact(key, make_artifact("a", 1, "a1"), expected_version=None)
        await stores.sessions.put_artifact(key, make_artifact("b", 1, "b1"), expected_version=None)
        await stores.sessions.put_artifact(key, make_artifact("a", 2, "a2"), expected_version=1)
        latest = await stores.sessions.get_artifacts(key)
        assert {tag: a.value for tag, a in latest.items()} == {"a": "a2", "b": "b1"}

    async def test_stored_records_are_snapshots(self, stores: Stores) -> None:
        """Changing an object after storing it, or one the store returned, changes nothing
        stored: only store calls change records, so nothing bypasses compare-and-set. (A
        store may hand out records whose dicts and lists refuse changes with
        ``TypeError``.)"""
        key, chat_id = make_key(), new_id("chat")
        old = ArtifactVersion(version=1, value={"log": ["start"]}, created_at=T0)
        artifact = make_artifact("notes", 2, value={"hp": 10, "items": ["sword"]}, history=(old,))
        await stores.sessions.put_artifact(key, artifact, expected_version=None)
        artifact.value["hp"] = 0
        artifact.history[0].value["log"].append("changed")
        returned = (await stores.sessions.get_artifacts(key))["notes"]
        _change(lambda: returned.value["items"].append("stolen"))
        _change(lambda: returned.history[0].value.clear())
        stored = (await stores.sessions.get_artifacts(key))["notes"]
        assert stored.value == {"hp": 10, "items": ["sword"]}
        assert stored.history[0].value == {"log": ["start"]}

        message = make_message(chat_id, "m1")
        variant = message.selected.model_copy(update={"blocks": ({"type": "card", "n": [1]},)})
        message = message.model_copy(update={"variants": (variant,)})
        await stores.chats.save_message(message)
        message.selected.meta["edited"] = True
        message.selected.blocks[0]["n"].append(2)
        got = await stores.chats.get_message(chat_id, "m1")
        _change(lambda: got.selected.meta.update(edited=True))
        _change(lambda: got.selected.blocks[0]["n"].append(3))
        listed = (await stores.chats.history(chat_id, "main"))[0]
        _change(lambda: listed.selected.meta.update(listed=True))
        stored_message = await stores.chats.get_message(chat_id, "m1")
        assert stored_message.selected.meta == {}
        assert stored_message.selected.blocks == ({"type": "card", "n": [1]},)

        config = OperationConfig(hooks=(Hook.BEFORE_MAIN_LLM,), order=1, params={"tags": ["a"]})
        profile = OperationProfile(
            profile_id=new_id("profile"),
            name="P",
            operation_profile_session_id="s1",
            operations=(ProfileOperation(operation_id="op", config=config),),
        )
        await stores.profiles.save_profile(profile)
        profile.operations[0].config.params["tags"].append("b")
        saved = await stores.profiles.get_profile(profile.profile_id)
        _change(lambda: saved.operations[0].config.params.clear())
        again = await stores.profiles.get_profile(profile.profile_id)
        assert again.operations[0].config.params == {"tags": ["a"]}

    async def test_a_stale_write_is_refused_and_changes_nothing(self, stores: Stores) -> None:
        """A write based on a version that is not the latest raises ``ArtifactConflict``
        (code ``artifact_conflict``) and never overwrites the stored value."""
        key = make_key()
        sessions = stores.sessions
        await sessions.put_artifact(key, make_artifact("notes", 1, "first"), expected_version=None)
        for expected in (None, 2, 7):
            with pytest.raises(ArtifactConflict) as conflict:
                await sessions.put_artifact(
                    key, make_artifact("notes", 2, "stale"), expected_version=expected
                )
            assert conflict.value.code == "artifact_conflict"
        with pytest.raises(ArtifactConflict):
            await sessions.put_artifact(key, make_artifact("fresh", 1), expected_version=1)
        stored = await sessions.get_artifacts(key)
        assert list(stored) == ["notes"]
        assert (stored["notes"].version, stored["notes"].value) == (1, "first")

    async def test_racing_writers_on_one_version_have_one_winner(self, stores: Stores) -> None:
        """Concurrent writes based on the same version: one applies, the others conflict."""
        key = make_key()
        await stores.sessions.put_artifact(key, make_artifact("notes", 1), expected_version=None)
        outcomes: dict[int, str] = {}

        async def write(writer: int) -> None:
            artifact = make_artifact("notes", 2, value=writer)
            try:
                await stores.sessions.put_artifact(key, artifact, expected_version=1)
            except ArtifactConflict as conflict:
                outcomes[writer] = conflict.code
            else:
                outcomes[writer] = "applied"

        async with anyio.create_task_group() as tg:
            for writer in range(8):
                tg.start_soon(write, writer)
        winners = [w for w, outcome in outcomes.items() if outcome == "applied"]
        assert len(winners) == 1
        assert sorted(outcomes.values()) == ["applied"] + ["artifact_conflict"] * 7
        assert (await stores.sessions.get_artifacts(key))["notes"].value == winners[0]

    @PROPERTY
    @given(bases=st.lists(st.none() | st.integers(min_value=1, max_value=5), max_size=10))
    async def test_compare_and_set_applies_exactly_the_writes_on_the_latest_version(
        self, stores: Stores, bases: list[int | None]
    ) -> None:
        """A sequence of writes: each applies if and only if its base is the latest version."""
        key = make_key()
        latest: int | None = None
        for base in bases:
            version = (base or 0) + 1
            write = stores.sessions.put_artifact(
                key, make_artifact("notes", version, value=version), expected_version=base
            )
            if base == latest:
                await write
                latest = version
            else:
                with pytest.raises(ArtifactConflict):
                    await write
        stored = (await stores.sessions.get_artifacts(key)).get("notes")
        assert (stored.version if stored else None) == latest

    # --- archive ------------------------------------------------------------------------

    async def test_the_archive_keeps_pruned_versions(self, stores: Stores) -> None:
        """Archived versions come back newest first with the run that pruned them, kept
        apart per session and tag."""
        archive = stores.archive
        if archive is None:
            pytest.skip("this store bundle has no archive")
        key, other = make_key(), make_key()
        old = [ArtifactVersion(version=v, value={"v": v}, created_at=T0) for v in (1, 2, 3)]
        await archive.archive(key, "notes", [old[1], old[0]], run_id="run-a")
        await archive.archive(key, "notes", [old[2]], run_id="run-b")
        await archive.archive(key, "other", [old[0]], run_id="run-c")
        await archive.archive(other, "notes", [old[0]], run_id="run-d")
        kept = await self.archived_versions(stores, key, "notes")
        assert kept == [(old[2], "run-b"), (old[1], "run-a"), (old[0], "run-a")]
        assert await self.archived_versions(stores, key, "other") == [(old[0], "run-c")]
        assert await self.archived_versions(stores, make_key(), "notes") == []

    async def test_archiving_a_version_twice_keeps_it_once(self, stores: Stores) -> None:
        """A version archived again (a retried write) is kept once."""
        archive = stores.archive
        if archive is None:
            pytest.skip("this store bundle has no archive")
        key = make_key()
        version = ArtifactVersion(version=1, value="v1", created_at=T0)
        await archive.archive(key, "notes", [version], run_id="run-a")
        await archive.archive(key, "notes", [version], run_id="run-b")
        kept = await self.archived_versions(stores, key, "notes")
        assert [v for v, _ in kept] == [version]
