"""What deleting a chat message does to the runs and turns that used it (docs/stores.md)."""

from __future__ import annotations

import pytest

from _support import make_runner
from opsrun.errors import RunError
from opsrun.model import RunRequest, RunStatus
from opsrun.stores import InMemoryStores

pytestmark = pytest.mark.anyio


async def test_a_deleted_message_leaves_runs_as_they_were_and_is_no_turn() -> None:
    stores = InMemoryStores()
    runner = make_runner(stores=stores)
    first = await runner.run(RunRequest(trigger="generate", chat_id="c", user_message="one"))
    second = await runner.run(RunRequest(trigger="generate", chat_id="c", user_message="two"))
    before = await runner.explain(second.run.run_id)
    assert before.prompt is not None
    assert [m.content for m in before.prompt.messages] == ["one", "OK", "two"]

    await stores.chats.delete_message("c", first.run.user_message_id)

    assert await runner.result(first.run.run_id) == first.model_copy(update={"deduplicated": False})
    after = await runner.explain(second.run.run_id)
    assert after.prompt is not None
    assert after.prompt.prompt_hash == before.prompt.prompt_hash
    assert [m.content for m in after.prompt.messages] == [None, "OK", "two"]
    assert (await runner.explain(first.run.run_id)).inputs.user_message is None
    with pytest.raises(RunError) as gone:
        await runner.run(
            RunRequest(trigger="regenerate", chat_id="c", user_message_id=first.run.user_message_id)
        )
    assert gone.value.code == "turn_not_found"
    again = await runner.run(RunRequest(trigger="generate", chat_id="c", user_message="three"))
    assert again.status == RunStatus.DONE


@pytest.mark.anyio
async def test_deleting_a_turns_own_message_hides_only_that_text() -> None:
    stores = InMemoryStores()
    runner = make_runner(stores=stores)
    await runner.run(RunRequest(trigger="generate", chat_id="c", user_message="one"))
    second = await runner.run(RunRequest(trigger="generate", chat_id="c", user_message="two"))

    await stores.chats.delete_message("c", second.run.user_message_id)

    report = await runner.explain(second.run.run_id)
    assert report.inputs.user_message is None
    assert report.prompt is not None
    assert [m.content for m in report.prompt.messages] == ["one", "OK", None]
