"""Run requests and profiles refuse ids that no store could keep, and keep any free text."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from opsrun.model import OperationProfile, RunRequest, Trigger

IDS = (
    "chat_id",
    "branch_id",
    "profile_id",
    "user_message_id",
    "assistant_variant_id",
    "client_request_id",
)


def _request(**fields: Any) -> RunRequest:
    values: dict[str, Any] = {"trigger": Trigger.GENERATE, "chat_id": "c", "user_message": "hi"}
    return RunRequest(**{**values, **fields})


@pytest.mark.parametrize("field", IDS)
def test_an_id_with_nul_is_refused_with_a_stable_type(field: str) -> None:
    with pytest.raises(ValidationError) as refused:
        _request(**{field: "a\x00b"})
    (error,) = refused.value.errors()
    assert error["type"] == "nul_character"
    assert error["loc"] == (field,)


@pytest.mark.parametrize("field", ["chatId", "clientRequestId"])
def test_an_id_with_nul_is_refused_by_its_json_name_too(field: str) -> None:
    data = {"trigger": "generate", "chatId": "c", "userMessage": "hi", field: "\x00"}
    with pytest.raises(ValidationError) as refused:
        RunRequest.model_validate(data)
    assert [e["type"] for e in refused.value.errors()] == ["nul_character"]


def test_free_text_with_nul_is_kept() -> None:
    request = _request(user_message="a\x00b", system_prompt="\x00", initiator="user")
    assert request.user_message == "a\x00b"
    assert request.system_prompt == "\x00"
    assert RunRequest.model_validate_json(request.model_dump_json()) == request


def test_ids_without_nul_are_kept() -> None:
    values = {field: f"{field} \x01 é 🌍" for field in IDS}
    request = _request(**values)
    assert {field: getattr(request, field) for field in IDS} == values


@pytest.mark.parametrize("field", ["profile_id", "operation_profile_session_id"])
def test_a_profile_id_with_nul_is_refused_with_a_stable_type(field: str) -> None:
    values = {"profile_id": "p", "name": "P", "operation_profile_session_id": "s1"}
    with pytest.raises(ValidationError) as refused:
        OperationProfile(**{**values, field: "s\x00"})
    (error,) = refused.value.errors()
    assert error["type"] == "nul_character"
    assert error["loc"] == (field,)


def test_an_id_with_a_lone_surrogate_is_refused_with_a_stable_type() -> None:
    with pytest.raises(ValidationError) as refused:
        _request(chat_id="c\ud83d")
    (error,) = refused.value.errors()
    assert error["type"] == "surrogate_character"


def test_free_text_with_lone_surrogates_is_made_encodable() -> None:
    request = _request(
        user_message="half an emoji \ud83d, a whole one \ud83d\ude00",
        system_prompt="\udc00",
        host={"card": ["x\ud800"], "\ud800": 1},
        main_llm_params={"stop": "\udfff"},
    )
    assert request.user_message == "half an emoji \ufffd, a whole one \U0001f600"
    assert request.system_prompt == "\ufffd"
    assert request.host == {"card": ["x\ufffd"], "\ufffd": 1}
    assert request.main_llm_params == {"stop": "\ufffd"}
    request.model_dump_json().encode("utf-8")  # encodes
