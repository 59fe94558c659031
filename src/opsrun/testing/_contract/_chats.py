"""The contract of the chat store: history, messages, deletes and the chat list."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ...errors import ConfigError, NotFound, StoreError
from ...model import (
    ChatMessage,
    ChatRole,
    ChatSummary,
    MessageVariant,
)
from ...ports import Stores
from ._support import (
    PROPERTY,
    QUICK_PROPERTY,
    T0,
    ContractBase,
    forged_cursors,
    make_message,
    make_run,
    new_id,
)

__all__ = ["ChatContract"]


class ChatContract(ContractBase):
    """Chat history, messages, deleting them and the chat list."""

    # --- chats ---------------------------------------------------------------------------

    @PROPERTY
    @given(
        saves=st.lists(
            st.tuples(st.sampled_from(["main", "alt"]), st.integers(min_value=0, max_value=6)),
            min_size=1,
            max_size=16,
        )
    )
    async def test_history_keeps_the_order_messages_were_first_saved(
        self, stores: Stores, saves: list[tuple[str, int]]
    ) -> None:
        """A branch's history is its messages oldest first; saving a known message again
        replaces it in place; branches of a chat are kept apart."""
        chat_id = new_id("chat")
        order: dict[str, list[str]] = {"main": [], "alt": []}
        texts: dict[str, str] = {}
        for step, (branch, n) in enumerate(saves):
            message_id = f"{branch}-{n}"
            if message_id not in texts:
                order[branch].append(message_id)
            texts[message_id] = f"text {step}"
            message = make_message(chat_id, message_id, branch_id=branch, text=texts[message_id])
            await stores.chats.save_message(message)
        for branch, ids in order.items():
            history = await stores.chats.history(chat_id, branch)
            assert [m.message_id for m in history] == ids
            assert [m.prompt_text for m in history] == [texts[i] for i in ids]
        assert await stores.chats.history(chat_id, "never") == []

    async def test_a_message_round_trips(self, stores: Stores) -> None:
        """A saved message comes back equal: variants, blocks, meta and times included."""
        chat_id = new_id("chat")
        message = ChatMessage(
            message_id="a1",
            chat_id=chat_id,
            branch_id="main",
            role=ChatRole.ASSISTANT,
            variants=(
                MessageVariant(variant_id="v1", content="première", source="main_llm"),
                MessageVariant(
                    variant_id="v2",
                    content='Zweite 🌍 \u0000 "q"',
                    blocks=({"type": "card", "items": [1, 2]},),
                    meta={"rating": 5, "tags": ["x"]},
                    source="operation:polish",
                    run_id="run-1",
                    created_at=T0,
                ),
            ),
            selected_variant_id="v2",
            turn_id="u1",
            created_at=T0,
        )
        await stores.chats.save_message(message)
        assert await stores.chats.get_message(chat_id, "a1") == message
        assert await stores.chats.history(chat_id, "main") == [message]

    async def test_a_missing_message_is_not_found(self, stores: Stores) -> None:
        """``get_message`` raises ``NotFound`` (code ``not_found``) for an unknown id and for
        the id of a message of another chat."""
        chat_id = new_id("chat")
        await stores.chats.save_message(make_message(chat_id, "m1"))
        for chat, message_id in ((chat_id, "m2"), (new_id("chat"), "m1")):
            with pytest.raises(NotFound) as missing:
                await stores.chats.get_message(chat, message_id)
            assert missing.value.code == "not_found"

    # --- deleting messages ----------------------------------------------------------------

    async def test_a_deleted_message_leaves_its_branch(self, stores: Stores) -> None:
        """``delete_message`` removes the message: the messages after it move up one
        place, ``get_message`` raises ``NotFound``, other branches keep theirs, and a
        message saved later goes at the end."""
        chat_id = new_id("chat")
        for message_id in ("m1", "m2", "m3"):
            await stores.chats.save_message(make_message(chat_id, message_id))
        await stores.chats.save_message(make_message(chat_id, "b1", branch_id="alt"))
        await stores.chats.delete_message(chat_id, "m2")
        assert [m.message_id for m in await stores.chats.history(chat_id, "main")] == ["m1", "m3"]
        assert [m.message_id for m in await stores.chats.history(chat_id, "alt")] == ["b1"]
        with pytest.raises(NotFound):
            await stores.chats.get_message(chat_id, "m2")
        for message_id in ("m4", "m2"):  # a deleted id can be saved again, as a new message
            await stores.chats.save_message(make_message(chat_id, message_id))
        history = await stores.chats.history(chat_id, "main")
        assert [m.message_id for m in history] == ["m1", "m3", "m4", "m2"]

    async def test_deleting_a_missing_message_is_not_found(self, stores: Stores) -> None:
        """``delete_message`` of an unknown id, of a message of another chat or of one
        already deleted raises ``NotFound`` (code ``not_found``) and changes nothing."""
        chat_id = new_id("chat")
        await stores.chats.save_message(make_message(chat_id, "m1"))
        await stores.chats.delete_message(chat_id, "m1")
        await stores.chats.save_message(make_message(chat_id, "m2"))
        for chat, message_id in ((chat_id, "m1"), (chat_id, "m3"), (new_id("chat"), "m2")):
            with pytest.raises(NotFound) as missing:
                await stores.chats.delete_message(chat, message_id)
            assert missing.value.code == "not_found"
        assert [m.message_id for m in await stores.chats.history(chat_id, "main")] == ["m2"]

    # --- the chat list ----------------------------------------------------------------------

    async def test_a_chat_summary_counts_messages_and_names_the_newest(
        self, stores: Stores
    ) -> None:
        """A chat's summary counts its messages over all branches and names the message
        added last; editing an older message keeps that name, deleting the newest names
        the one before it, and a chat whose messages are all deleted leaves the list."""
        chat_id = new_id("chat")

        async def summary() -> ChatSummary | None:
            page = await stores.chats.list_chats(limit=10)
            return next((c for c in page.items if c.chat_id == chat_id), None)

        await stores.chats.save_message(make_message(chat_id, "m1"))
        await stores.chats.save_message(make_message(chat_id, "m2", branch_id="alt"))
        await stores.chats.save_message(make_message(chat_id, "m3"))
        first = await summary()
        assert first is not None
        assert (first.message_count, first.last_message_id) == (3, "m3")
        await stores.chats.save_message(make_message(chat_id, "m1", text="edited"))
        edited = await summary()
        assert edited is not None
        assert (edited.message_count, edited.last_message_id) == (3, "m3")
        assert edited.updated_at >= first.updated_at
        await stores.chats.delete_message(chat_id, "m3")
        deleted = await summary()
        assert deleted is not None
        assert (deleted.message_count, deleted.last_message_id) == (2, "m2")
        await stores.chats.delete_message(chat_id, "m1")
        await stores.chats.delete_message(chat_id, "m2")
        assert await summary() is None

    async def test_the_chat_list_is_newest_write_first(self, stores: Stores) -> None:
        """Chats come most recently written first, a write being a new message, an edit
        or a delete; writes in quick succession keep their order; ``updated_at`` never
        increases down the list."""
        chats = [new_id("chat") for _ in range(4)]
        for chat_id in chats:
            for message_id in ("m1", "m2"):
                await stores.chats.save_message(make_message(chat_id, message_id))
        await stores.chats.save_message(make_message(chats[1], "m1", text="edited"))
        await stores.chats.delete_message(chats[0], "m2")
        await stores.chats.save_message(make_message(chats[2], "m3"))
        page = await stores.chats.list_chats(limit=50)
        mine = [c for c in page.items if c.chat_id in chats]
        assert [c.chat_id for c in mine] == [chats[2], chats[0], chats[1], chats[3]]
        times = [c.updated_at for c in page.items]
        assert times == sorted(times, reverse=True)

    @QUICK_PROPERTY
    @given(
        count=st.integers(min_value=0, max_value=7),
        limit=st.integers(min_value=1, max_value=4),
        rewrites=st.lists(st.integers(min_value=0, max_value=6), max_size=4),
    )
    async def test_chat_pages_hold_every_chat_once(
        self, stores: Stores, count: int, limit: int, rewrites: list[int]
    ) -> None:
        """Paging through the chat list with ``next_cursor`` yields every chat exactly
        once, in list order, at most ``limit`` a page; the last page has no cursor."""
        chats = [new_id("chat") for _ in range(count)]
        order = list(chats)
        for chat_id in chats:
            await stores.chats.save_message(make_message(chat_id, "m1"))
        for index in rewrites:
            if index < count:
                await stores.chats.save_message(make_message(chats[index], new_id("m")))
                order.remove(chats[index])
                order.append(chats[index])
        listed: list[str] = []
        cursor: str | None = None
        while True:  # the test's chats are the newest: stop once all of them were listed
            page = await stores.chats.list_chats(limit=limit, cursor=cursor)
            assert len(page.items) <= limit
            assert page.items or page.next_cursor is None
            listed += [c.chat_id for c in page.items]
            cursor = page.next_cursor
            if cursor is None or set(chats) <= set(listed):
                break
        assert len(listed) == len(set(listed))
        assert [c for c in listed if c in set(chats)] == order[::-1]

    async def test_a_bad_chat_list_request_is_refused(self, stores: Stores) -> None:
        """A cursor the chat list did not make raises ``StoreError`` (code
        ``bad_cursor``), a run-list cursor too; a limit below 1 raises ``ConfigError``."""
        chat_id = new_id("chat")
        for n in range(3):
            await stores.chats.save_message(make_message(chat_id, f"m{n}"))
            await stores.runs.claim(make_run(chat_id=chat_id))
        runs_cursor = (await stores.runs.list_runs(chat_id, limit=1)).next_cursor
        assert runs_cursor is not None
        for cursor in ("", "not a cursor", "eyJhIjogMX0", runs_cursor, *forged_cursors("chats")):
            with pytest.raises(StoreError) as bad:
                await stores.chats.list_chats(cursor=cursor)
            assert bad.value.code == "bad_cursor"
        with pytest.raises(ConfigError):
            await stores.chats.list_chats(limit=0)
