"""The plugin's scripted doubles fail a test that called them past their queue, though the
runner records the call's ``AssertionError`` as an error of the run, not of the test."""

from __future__ import annotations

import pytest

SUITE = """
import pytest

from opsrun import OperationDefinition, OperationProfile, RunRequest

pytestmark = pytest.mark.anyio

PROFILE = OperationProfile.model_validate({
    "profileId": "p", "name": "P", "operationProfileSessionId": "s",
    "operations": [{"operationId": "notes", "config": {
        "hooks": ["before_main_llm"], "order": 1,
        "params": {"providerRef": "test", "model": "m", "prompt": "x",
                   "writeArtifact": {"tag": "notes"}}}}]})
REQUEST = RunRequest(trigger="generate", chat_id="c", profile_id="p", user_message="hi")


@pytest.fixture
def anyio_backend():
    return "asyncio"


async def test_aux(opsrun_runner, opsrun_catalog, opsrun_provider):
    opsrun_provider.default = None
    opsrun_catalog.add_definition(OperationDefinition(operation_id="notes", name="N", kind="llm"))
    await opsrun_runner.profiles.save_profile(PROFILE)
    assert (await opsrun_runner.run(REQUEST)).status == "done"  # the operation is optional


async def test_main(opsrun_runner, opsrun_main_llm):
    opsrun_main_llm.default = None
    await opsrun_runner.run(RunRequest(trigger="generate", chat_id="c", user_message="hi"))


async def test_expected(opsrun_runner, opsrun_main_llm):
    opsrun_main_llm.default = None
    opsrun_main_llm.replies.append("scripted")
    await opsrun_runner.run(RunRequest(trigger="generate", chat_id="c", user_message="hi"))
"""


def test_a_call_past_the_queue_fails_the_test_at_teardown(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_unexpected=SUITE)
    done = pytester.runpytest_inprocess("-q", "-p", "no:cacheprovider")
    out = done.stdout.str()
    done.assert_outcomes(passed=3, errors=2)
    assert "1 unexpected aux LLM call(s): the queue was empty and default is None" in out
    assert "1 unexpected main LLM call(s)" in out
