"""The contract of payloads: text of any kind and records of a megabyte round-trip."""

from __future__ import annotations

from hypothesis import given

from ...model import ArtifactVersion, MainLlmDelta, OperationProfile, RunStatus, Trigger
from ...ports import Stores
from ._support import (
    QUICK_PROPERTY,
    T0,
    UNICODE_TEXT,
    ContractBase,
    make_artifact,
    make_key,
    make_message,
    make_run,
    new_id,
)

__all__ = ["PayloadContract"]

SAMPLES = (
    "𝄞 🌍 👩‍👩‍👧‍👦 🏳️‍🌈 𠜎",  # outside the BMP, joiner sequences
    "שלום עולם \u200f(RTL)\u200e مرحبا بالعالم \u202bembedded\u202c",  # right to left, marks
    "\x01\x02\x07\x08\x0b\x0c\x1b\x1f\x7f\x85\u2028\u2029",  # control characters, no NUL
    "\ufeff\u200b\u00ad\ufffd",  # BOM, zero-width space, soft hyphen, replacement character
    "e\u0301 \u00e9",  # the same letter decomposed and composed: kept apart
    '"quoted" \\ back\\slash / {"json": [1]} \'single\' %s ? :name',  # quoting, placeholders
)
"""Text that trips up encoders, drivers and SQL."""

MEGABYTE = 1 << 20


class PayloadContract(ContractBase):
    """Any text but NUL, in ids and in data, and records of a megabyte."""

    async def test_unusual_text_round_trips_in_ids_and_data(self, stores: Stores) -> None:
        """Text in other scripts, characters outside the BMP, right-to-left text with
        direction marks, control characters (all but NUL) and quoting characters come
        back unchanged, in ids as in data: messages, the chat list, artifacts, profiles,
        runs and events."""
        text = "".join(SAMPLES)
        chat_id = new_id("chat") + SAMPLES[0]
        message = make_message(chat_id, "msg " + SAMPLES[1], branch_id=SAMPLES[2], text=text)
        variant = message.selected.model_copy(
            update={"meta": {s: [s, {s: s}] for s in SAMPLES}, "blocks": ({"text": text},)}
        )
        message = message.model_copy(update={"variants": (variant,)})
        await stores.chats.save_message(message)
        assert await stores.chats.get_message(chat_id, message.message_id) == message
        assert await stores.chats.history(chat_id, SAMPLES[2]) == [message]
        listed = {c.chat_id: c for c in (await stores.chats.list_chats(limit=100)).items}
        assert listed[chat_id].last_message_id == message.message_id

        key = make_key(chat_id, profile_ref=SAMPLES[3], operation_profile_session_id=SAMPLES[4])
        old = ArtifactVersion(version=1, value=text, created_at=T0)
        artifact = make_artifact(
            "notes", 2, value={s: [s, {s: s}] for s in SAMPLES}, history=(old,), written_by=text
        )
        await stores.sessions.put_artifact(key, artifact, expected_version=None)
        assert await stores.sessions.get_artifacts(key) == {"notes": artifact}

        profile = OperationProfile(
            profile_id=new_id("profile") + SAMPLES[5],
            name=text,
            description=text,
            operation_profile_session_id=SAMPLES[0],
        )
        await stores.profiles.save_profile(profile)
        assert await stores.profiles.get_profile(profile.profile_id) == profile

        run = make_run(new_id("run") + SAMPLES[1], chat_id=chat_id, key=text, abort_reason=text)
        await stores.runs.claim(run)
        assert await stores.runs.get_run(run.run_id) == (run, [])
        assert (await stores.runs.list_runs(chat_id)).items == (run,)
        delta = MainLlmDelta(
            seq=1,
            ts=T0,
            run_id=run.run_id,
            chat_id=chat_id,
            user_message_id=message.message_id,
            trigger=Trigger.GENERATE,
            text=text,
        )
        await stores.runs.append_events(run.run_id, [delta])
        assert await stores.runs.events(run.run_id) == [delta]

    @QUICK_PROPERTY
    @given(text=UNICODE_TEXT)
    async def test_any_text_but_nul_round_trips(self, stores: Stores, text: str) -> None:
        """Any text without NUL round-trips as message text, as a meta key and value, as
        an artifact value and inside a chat id."""
        chat_id = new_id("chat") + text
        message = make_message(chat_id, "m1", text=text)
        variant = message.selected.model_copy(update={"meta": {text: text}})
        message = message.model_copy(update={"variants": (variant,)})
        await stores.chats.save_message(message)
        assert await stores.chats.get_message(chat_id, "m1") == message
        key = make_key(chat_id)
        artifact = make_artifact("notes", 1, value=[text, {text: text}])
        await stores.sessions.put_artifact(key, artifact, expected_version=None)
        assert (await stores.sessions.get_artifacts(key))["notes"] == artifact

    async def test_a_megabyte_artifact_round_trips(self, stores: Stores) -> None:
        """An artifact value of more than a megabyte (a long text, a long list) is stored,
        read back equal and replaced by compare-and-set, its old value in ``history``."""
        key = make_key()
        value = {"text": ("ab𝄞é" * MEGABYTE)[:MEGABYTE], "items": list(range(100_000))}
        first = make_artifact("notes", 1, value=value)
        await stores.sessions.put_artifact(key, first, expected_version=None)
        assert await stores.sessions.get_artifacts(key) == {"notes": first}
        old = ArtifactVersion(version=1, value=value, created_at=T0)
        second = make_artifact("notes", 2, value={"text": "short"}, history=(old,))
        await stores.sessions.put_artifact(key, second, expected_version=1)
        assert await stores.sessions.get_artifacts(key) == {"notes": second}

    async def test_a_megabyte_message_round_trips(self, stores: Stores) -> None:
        """A message of more than a megabyte of text is stored, read back equal (alone, in
        the history, in a run's events) and replaced by saving it again."""
        chat_id = new_id("chat")
        text = ("Ωmega 🌍 " * MEGABYTE)[:MEGABYTE]
        message = make_message(chat_id, "m1", text=text)
        await stores.chats.save_message(message)
        assert await stores.chats.get_message(chat_id, "m1") == message
        assert await stores.chats.history(chat_id, "main") == [message]
        edited = make_message(chat_id, "m1", text=text[::-1])
        await stores.chats.save_message(edited)
        assert await stores.chats.history(chat_id, "main") == [edited]
        run = make_run(chat_id=chat_id, status=RunStatus.DONE)
        await stores.runs.claim(run)
        delta = MainLlmDelta(
            seq=1,
            ts=T0,
            run_id=run.run_id,
            chat_id=chat_id,
            user_message_id="m1",
            trigger=Trigger.GENERATE,
            text=text,
        )
        await stores.runs.append_events(run.run_id, [delta])
        assert await stores.runs.events(run.run_id) == [delta]
