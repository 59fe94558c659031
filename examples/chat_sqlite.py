"""A chat kept in SQLite: two runners, one after the other, continue the same chat.

Run it with ``python examples/chat_sqlite.py [chat.db]`` (offline: the main LLM is a
scripted double). Without a path the chat lives in a temporary file. Each turn opens the
file with a new ``SqliteStores`` and a new ``Runner``, as a new process would, and the
second turn's prompt holds the first turn.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import anyio

from opsrun import OperationCatalog, Runner, RunRequest
from opsrun.stores.sqlite import SqliteStores
from opsrun.testing import ScriptedMainLlm


async def turn(db: Path, text: str, reply: str) -> None:
    """Open the chat file, run one turn with a fresh runner, close the file."""
    main_llm = ScriptedMainLlm([reply])
    with SqliteStores(db) as stores:
        runner = Runner(catalog=OperationCatalog(), stores=stores, main_llm=main_llm)
        request = RunRequest(trigger="generate", chat_id="demo", user_message=text)
        result = await runner.run(request)
    assert main_llm.last_request is not None
    seen = len(main_llm.last_request.messages)
    print(f"run {result.status.value}: the model saw {seen} message(s)")


async def main(db: Path) -> None:
    await turn(db, "Hello! Please remember the word 'teal'.", "Noted: teal.")
    await turn(db, "Which word did I ask you to remember?", "You asked me to remember 'teal'.")
    with SqliteStores(db) as stores:
        print(f"history of chat 'demo' in {db.name}:")
        for message in await stores.chats.history("demo", "main"):
            print(f"  {message.role.value:>9}: {message.prompt_text}")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        anyio.run(main, Path(sys.argv[1]))
    else:
        with tempfile.TemporaryDirectory() as tmp:
            anyio.run(main, Path(tmp) / "chat.db")
