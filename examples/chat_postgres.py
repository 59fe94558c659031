"""A chat kept in PostgreSQL: two store objects, as two processes would have, share it.

Run it with ``OPSRUN_POSTGRES_DSN=postgresql://user@host/db python examples/chat_postgres.py
[schema]`` (offline: the main LLM is a scripted double). The tables live in ``schema``
(``opsrun_example`` unless given), created on first use. A worker runs two turns on one
``PostgresStores``; a web front end, with a ``PostgresStores`` and a ``Runner`` of its
own, streams the second turn's events live as the worker stores them (``Runner.follow``,
over ``LISTEN``/``NOTIFY``), then reads the chat's history. Without
``OPSRUN_POSTGRES_DSN`` it says so and exits.
"""

from __future__ import annotations

import os
import sys
import uuid
from contextlib import aclosing

import anyio

from opsrun import OperationCatalog, Runner, RunRequest
from opsrun.model import MainLlmDelta
from opsrun.ports import MainLlmRequest
from opsrun.stores.postgres import PostgresStores
from opsrun.testing import FunctionMainLlm


async def main(dsn: str, schema: str) -> None:
    chat_id = f"demo-{uuid.uuid4().hex[:8]}"  # a new chat on every run of the example
    run_ids: list[str] = []
    second_turn_started = anyio.Event()

    async def answer(request: MainLlmRequest) -> str:
        run_ids.append(request.run_id)
        if len(run_ids) == 2:
            second_turn_started.set()
            await anyio.sleep(0.05)  # a model takes its time: the deltas come live
            return "You asked me to remember 'teal'."
        return "Noted: teal."

    async with (
        PostgresStores(dsn, schema=schema) as worker_stores,
        PostgresStores(dsn, schema=schema) as web_stores,  # as another process would open it
    ):
        main_llm = FunctionMainLlm(answer, chunk_size=8)
        worker = Runner(catalog=OperationCatalog(), stores=worker_stores, main_llm=main_llm)
        web = Runner(catalog=OperationCatalog(), stores=web_stores, main_llm=main_llm)
        first = RunRequest(trigger="generate", chat_id=chat_id, user_message="Remember 'teal'.")
        print(f"turn 1: run {(await worker.run(first)).status.value}")

        second = RunRequest(trigger="generate", chat_id=chat_id, user_message="Which word?")
        async with anyio.create_task_group() as tg:
            tg.start_soon(worker.run, second)
            await second_turn_started.wait()
            print("turn 2, followed from the other store object:")
            async with aclosing(web.follow(run_ids[1])) as events:
                async for event in events:
                    text = f" {event.text!r}" if isinstance(event, MainLlmDelta) else ""
                    print(f"  {event.seq:>2} {event.type}{text}")

        print(f"history of chat {chat_id!r} in schema {schema!r}:")
        for message in await web_stores.chats.history(chat_id, "main"):
            print(f"  {message.role.value:>9}: {message.prompt_text}")


if __name__ == "__main__":
    dsn = os.environ.get("OPSRUN_POSTGRES_DSN")
    if not dsn:
        print(
            "Set OPSRUN_POSTGRES_DSN to a PostgreSQL connection string to run this example,\n"
            "e.g. OPSRUN_POSTGRES_DSN=postgresql://postgres@127.0.0.1:5432/test"
        )
        sys.exit(0)
    anyio.run(main, dsn, sys.argv[1] if len(sys.argv) > 1 else "opsrun_example")
