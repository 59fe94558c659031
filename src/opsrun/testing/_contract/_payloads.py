"""The contract of payloads: text of any kind and records of a megabyte round-trip."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import anyio
from hypothesis import given

from ...model import (
    ArtifactVersion,
    FailedDetails,
    MainLlmCall,
    MainLlmDelta,
    OperationError,
    OperationProfile,
    RunEvent,
    RunFinished,
    RunStatus,
    Trigger,
)
from ...ports import Stores
from ._support import (
    QUICK_PROPERTY,
    T0,
    UNICODE_TEXT,
    ContractBase,
    make_artifact,
    make_key,
    make_message,
    make_rich_run,
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

NUL_TEXT = "before \x00 after \x00\x00 🌍"
"""Free text with NUL (``\\x00``) in it, which some databases refuse in their text type."""

LONE_SURROGATES = "half \ud83d, split \ud83d\ude00, low \udc00"
"""Text without a UTF-8 form: lone UTF-16 surrogates and a pair split in two code points."""
MENDED_SURROGATES = "half \ufffd, split \U0001f600, low \ufffd"
""":data:`LONE_SURROGATES` as a store may keep it."""


def first_delta(
    run_id: str, chat_id: str, text: str, *, user_message_id: str = "m1"
) -> MainLlmDelta:
    """A run's first event: a delta of the main LLM's reply."""
    return MainLlmDelta(
        seq=1,
        ts=T0,
        run_id=run_id,
        chat_id=chat_id,
        user_message_id=user_message_id,
        trigger=Trigger.GENERATE,
        text=text,
    )


class PayloadContract(ContractBase):
    """Any text but NUL in ids, any text at all in data, and records of a megabyte."""

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

        run = make_run(
            new_id("run") + SAMPLES[1], chat_id=chat_id, key=new_id("key") + text, abort_reason=text
        )
        await stores.runs.claim(run)
        assert await stores.runs.get_run(run.run_id) == (run, [])
        assert (await stores.runs.list_runs(chat_id)).items == (run,)
        delta = first_delta(run.run_id, chat_id, text, user_message_id=message.message_id)
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

    async def test_free_text_with_nul_round_trips(self, stores: Stores) -> None:
        """Free text that contains NUL is stored and comes back unchanged wherever a
        record holds it: message text and meta, artifact values (first write and
        compare-and-set), archived versions, profile names, and a run's abort reason,
        texts and errors, through every write of a run (claim, lease renewal, save) and
        its events, listing and following included."""
        chat_id = new_id("chat")
        message = make_message(chat_id, "m1", text=NUL_TEXT)
        variant = message.selected.model_copy(
            update={"meta": {NUL_TEXT: [NUL_TEXT]}, "blocks": ({"text": NUL_TEXT},)}
        )
        message = message.model_copy(update={"variants": (variant,)})
        await stores.chats.save_message(message)
        assert await stores.chats.get_message(chat_id, "m1") == message
        assert await stores.chats.history(chat_id, "main") == [message]

        key = make_key(chat_id)
        first = make_artifact("notes", 1, value={NUL_TEXT: NUL_TEXT}, written_by=NUL_TEXT)
        await stores.sessions.put_artifact(key, first, expected_version=None)
        old = ArtifactVersion(version=1, value=first.value, created_at=T0)
        second = make_artifact("notes", 2, value=[NUL_TEXT], history=(old,))
        await stores.sessions.put_artifact(key, second, expected_version=1)
        assert await stores.sessions.get_artifacts(key) == {"notes": second}
        if stores.archive is not None:
            await stores.archive.archive(key, "notes", [old], run_id="run-nul")
            assert await self.archived_versions(stores, key, "notes") == [(old, "run-nul")]

        profile = OperationProfile(
            profile_id=new_id("profile"),
            name=NUL_TEXT,
            description=NUL_TEXT,
            operation_profile_session_id="s1",
        )
        await stores.profiles.save_profile(profile)
        assert await stores.profiles.get_profile(profile.profile_id) == profile

        texts: dict[str, Any] = {
            "abort_reason": NUL_TEXT,
            "failed_details": FailedDetails(error_message=NUL_TEXT),
            "main_llm": MainLlmCall(started=True, text=NUL_TEXT),
        }
        running = make_run(chat_id=chat_id, key=new_id("key"), **texts)
        assert await stores.runs.claim(running) == running
        without_key = make_run(chat_id=chat_id, started_at=T0 + timedelta(seconds=1), **texts)
        assert await stores.runs.claim(without_key) == without_key
        await stores.runs.renew_lease(running.run_id, T0 + timedelta(minutes=1))
        renewed, _ = await stores.runs.get_run(running.run_id)
        assert renewed.abort_reason == NUL_TEXT
        _, operation_runs = make_rich_run(running.run_id)
        error = OperationError(code="x", message=NUL_TEXT, details={NUL_TEXT: NUL_TEXT})
        operation_runs[0] = operation_runs[0].model_copy(
            update={"error": error, "outputs_summary": {"text": NUL_TEXT}}
        )
        aborted = running.model_copy(
            update={"status": RunStatus.ABORTED, "finished_at": T0 + timedelta(seconds=2)}
        )
        await stores.runs.save_run(aborted, operation_runs)
        assert await stores.runs.get_run(aborted.run_id) == (aborted, operation_runs)
        assert (await stores.runs.list_runs(chat_id)).items == (without_key, aborted)

        base = {
            "run_id": aborted.run_id,
            "chat_id": chat_id,
            "user_message_id": "m1",
            "trigger": Trigger.GENERATE,
        }
        events: list[RunEvent] = [
            MainLlmDelta(**base, seq=1, ts=T0, text=NUL_TEXT),
            RunFinished(
                **base,
                seq=2,
                ts=T0,
                status=RunStatus.ABORTED,
                failed_details=FailedDetails(error_message=NUL_TEXT),
            ),
        ]
        await stores.runs.append_events(aborted.run_id, events)
        assert await stores.runs.events(aborted.run_id) == events
        with anyio.fail_after(30):
            assert [e async for e in stores.runs.follow(aborted.run_id)] == events

    async def test_free_text_with_lone_surrogates_is_stored(self, stores: Stores) -> None:
        """Records built without validation (``model_copy(update=...)``) may hold text
        with lone UTF-16 surrogates, which has no UTF-8 form: every write takes them, and
        what is read back holds each text as given or with U+FFFD in place of each lone
        surrogate (a split pair joined), never an error."""
        given, mended = LONE_SURROGATES, MENDED_SURROGATES
        texts = (given, mended)
        chat_id = new_id("chat")
        message = make_message(chat_id, "m1")
        variant = message.selected.model_copy(
            update={"content": given, "meta": {"k": given}, "blocks": ({"t": given},)}
        )
        await stores.chats.save_message(message.model_copy(update={"variants": (variant,)}))
        stored = (await stores.chats.get_message(chat_id, "m1")).selected
        assert stored.content in texts
        assert stored.meta["k"] in texts
        assert stored.blocks[0]["t"] in texts

        key = make_key(chat_id)
        artifact = make_artifact("notes", 1).model_copy(
            update={"value": {"v": given}, "written_by": given}
        )
        await stores.sessions.put_artifact(key, artifact, expected_version=None)
        got = (await stores.sessions.get_artifacts(key))["notes"]
        assert got.value["v"] in texts
        assert got.written_by in texts
        if stores.archive is not None:
            old = ArtifactVersion(version=1, value="", created_at=T0).model_copy(
                update={"value": given}
            )
            await stores.archive.archive(key, "notes", [old], run_id="run-surrogate")
            ((archived, _),) = await self.archived_versions(stores, key, "notes")
            assert archived.value in texts

        run = make_run(chat_id=chat_id).model_copy(
            update={
                "abort_reason": given,
                "main_llm": MainLlmCall(started=True).model_copy(update={"text": given}),
            }
        )
        await stores.runs.claim(run)
        _, operation_runs = make_rich_run(run.run_id)
        error = OperationError(code="x", message="").model_copy(update={"message": given})
        operation_runs[0] = operation_runs[0].model_copy(
            update={"error": error, "outputs_summary": {"text": given}}
        )
        done = run.model_copy(
            update={"status": RunStatus.ABORTED, "finished_at": T0 + timedelta(seconds=2)}
        )
        await stores.runs.save_run(done, operation_runs)
        got_run, got_operations = await stores.runs.get_run(run.run_id)
        assert got_run.abort_reason in texts
        assert got_run.main_llm.text in texts
        assert got_operations[0].error is not None
        assert got_operations[0].error.message in texts
        assert got_operations[0].outputs_summary["text"] in texts
        delta = first_delta(run.run_id, chat_id, "").model_copy(update={"text": given})
        await stores.runs.append_events(run.run_id, [delta])
        (event,) = await stores.runs.events(run.run_id)
        assert isinstance(event, MainLlmDelta)
        assert event.text in texts

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
        delta = first_delta(run.run_id, chat_id, text)
        await stores.runs.append_events(run.run_id, [delta])
        assert await stores.runs.events(run.run_id) == [delta]
