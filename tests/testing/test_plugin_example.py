"""The example of docs/testing.md, verbatim: a user's profile tested with the plugin fixtures."""

from __future__ import annotations

import pytest

from opsrun import OperationCatalog, OperationDefinition, OperationProfile, Runner, RunRequest
from opsrun.errors import RateLimited
from opsrun.testing import ScriptedMainLlm, ScriptedProvider

pytestmark = pytest.mark.anyio

PROFILE = OperationProfile.model_validate(
    {
        "profileId": "story",
        "name": "Story helper",
        "operationProfileSessionId": "session-1",
        "operations": [
            {
                "operationId": "notes",
                "config": {
                    "hooks": ["before_main_llm"],
                    "order": 1,
                    "required": True,
                    "params": {
                        "providerRef": "test",
                        "model": "small",
                        "prompt": "Notes for: {{ chatHistory | last: 1 | map: 'content' | join }}",
                        "writeArtifact": {"tag": "notes"},
                        "promptEffect": {"type": "prompt.append_after_last_user"},
                    },
                },
            }
        ],
    }
)


async def test_notes_reach_the_main_llm(
    opsrun_runner: Runner,
    opsrun_catalog: OperationCatalog,
    opsrun_provider: ScriptedProvider,
    opsrun_main_llm: ScriptedMainLlm,
) -> None:
    opsrun_catalog.add_definition(
        OperationDefinition(operation_id="notes", name="Notes", kind="llm")
    )
    await opsrun_runner.profiles.save_profile(PROFILE)
    opsrun_provider.push("- the dragon is asleep")

    result = await opsrun_runner.run(
        RunRequest(trigger="generate", chat_id="c1", profile_id="story", user_message="I sneak in")
    )

    assert result.operation("notes").status == "done"
    assert opsrun_provider.last_request is not None
    assert opsrun_provider.last_request.messages[-1].content == "Notes for: I sneak in"
    assert opsrun_main_llm.last_request is not None
    sent = [(m.role, m.content) for m in opsrun_main_llm.last_request.messages]
    assert sent[-1] == ("system", "- the dragon is asleep")


async def test_a_failing_provider_stops_the_run(
    opsrun_runner: Runner,
    opsrun_catalog: OperationCatalog,
    opsrun_provider: ScriptedProvider,
) -> None:
    opsrun_catalog.add_definition(
        OperationDefinition(operation_id="notes", name="Notes", kind="llm")
    )
    await opsrun_runner.profiles.save_profile(PROFILE)
    opsrun_provider.push(RateLimited("slow down"))

    result = await opsrun_runner.run(
        RunRequest(trigger="generate", chat_id="c1", profile_id="story", user_message="hi")
    )

    assert result.status == "failed"
    assert result.failed_type == "before_barrier"
    error = result.operation("notes").error
    assert error is not None
    assert error.code == "rate_limited"
