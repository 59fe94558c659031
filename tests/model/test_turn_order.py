"""``turn_order``: a stored history shown as turns, each answer after its user message."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from _support import generate, make_runner, use_profile
from opsrun.errors import ProviderError
from opsrun.model import (
    ChatMessage,
    ChatRole,
    MessageVariant,
    RunRequest,
    RunStatus,
    Trigger,
    turn_order,
)
from opsrun.stores import InMemoryStores
from opsrun.testing import FunctionMainLlm


def message(message_id: str, role: ChatRole, turn_id: str | None = None) -> ChatMessage:
    return ChatMessage(
        message_id=message_id,
        chat_id="c",
        branch_id="main",
        role=role,
        variants=(MessageVariant(variant_id=f"v-{message_id}", content=message_id),),
        selected_variant_id=f"v-{message_id}",
        turn_id=turn_id,
    )


def user(message_id: str) -> ChatMessage:
    return message(message_id, ChatRole.USER)


def answer(message_id: str, turn_id: str | None) -> ChatMessage:
    return message(message_id, ChatRole.ASSISTANT, turn_id)


def ids(history: list[ChatMessage]) -> list[str]:
    return [m.message_id for m in history]


def test_a_late_answer_moves_after_its_user_message() -> None:
    stored = [user("u1"), user("u2"), answer("a2", "u2"), answer("a1", "u1")]
    assert ids(turn_order(stored)) == ["u1", "a1", "u2", "a2"]


def test_unanswered_turns_and_host_written_answers_stay_in_place() -> None:
    stored = [
        message("s", ChatRole.SYSTEM),
        user("u1"),
        answer("h1", None),  # written by the host, naming no turn
        user("u2"),  # failed, never answered
        user("u3"),
        answer("a3", "u3"),
        answer("x", "gone"),  # its user message is not in this history
    ]
    assert ids(turn_order(stored)) == ids(stored)


@given(
    st.lists(st.integers(0, 5), max_size=6, unique=True).flatmap(
        lambda answered: st.permutations(
            [user(f"u{i}") for i in range(6)] + [answer(f"a{i}", f"u{i}") for i in answered]
        )
    )
)
def test_every_message_is_kept_once_and_answers_follow_their_turn(
    stored: list[ChatMessage],
) -> None:
    ordered = turn_order(stored)
    assert sorted(ids(ordered)) == sorted(ids(stored))
    users = [m for m in ordered if m.role is ChatRole.USER]
    assert users == [m for m in stored if m.role is ChatRole.USER]  # their order kept
    for i, m in enumerate(ordered):
        if m.role is ChatRole.ASSISTANT:
            assert ordered[i - 1].message_id == m.turn_id


@pytest.mark.anyio
async def test_a_failed_turn_answered_later_reads_as_turns() -> None:
    stores = InMemoryStores()
    await use_profile(stores)
    failing = True

    def reply(request: object) -> str:
        if failing:
            raise ProviderError("the model is down", code="provider_error")
        return "ok"

    runner = make_runner(stores=stores, main_llm=FunctionMainLlm(reply))
    first = await runner.run(generate("first", user_message_id="u1"))
    assert first.status == RunStatus.FAILED
    failing = False
    second = await runner.run(generate("second", user_message_id="u2"))
    assert second.status == RunStatus.DONE
    late = await runner.run(
        RunRequest(trigger=Trigger.REGENERATE, chat_id="c", profile_id="p", user_message_id="u1")
    )
    assert late.status == RunStatus.DONE

    stored = await stores.chats.history("c", "main")
    users_then_answers = [ChatRole.USER, ChatRole.USER, ChatRole.ASSISTANT, ChatRole.ASSISTANT]
    assert [m.role for m in stored] == users_then_answers  # as stored
    shown = turn_order(stored)
    assert [(m.role, m.turn_id or m.message_id) for m in shown] == [
        (ChatRole.USER, "u1"),
        (ChatRole.ASSISTANT, "u1"),
        (ChatRole.USER, "u2"),
        (ChatRole.ASSISTANT, "u2"),
    ]
