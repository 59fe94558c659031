"""The code of docs/observability.md and docs/postgres.md runs as pasted: every name it
uses is imported or defined, no ``await`` outside a function, and the parts that need no
server or collector run."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from opsrun import InMemoryStores, OperationCatalog, Runner, RunRequest
from opsrun.model import RunEvent
from opsrun.testing import OfflineMainLlm

pytestmark = pytest.mark.anyio

DOCS = Path(__file__).resolve().parent.parent / "docs"


def python_blocks(doc: str) -> list[str]:
    """The ```python blocks of ``docs/<doc>``."""
    return re.findall(r"```python\n(.*?)```", (DOCS / doc).read_text(encoding="utf-8"), re.S)


def the_block(doc: str, marker: str) -> str:
    """The one python block of ``docs/<doc>`` that contains ``marker``."""
    blocks = [b for b in python_blocks(doc) if marker in b]
    assert len(blocks) == 1, f"{doc}: {len(blocks)} python blocks contain {marker!r}"
    return blocks[0]


BLOCKS = [
    pytest.param(block, id=f"{doc}[{index}]")
    for doc in ("observability.md", "postgres.md")
    for index, block in enumerate(python_blocks(doc))
]


@pytest.mark.parametrize("block", BLOCKS)
def test_a_block_uses_only_names_it_imports_or_defines(block: str) -> None:
    # F821: undefined name; F704: await (or yield) outside a function.
    ruff = [sys.executable, "-m", "ruff", "check", "--isolated", "--no-cache", "--quiet"]
    checked = subprocess.run(
        [*ruff, "--select", "F821,F704", "--stdin-filename", "block.py", "-"],
        input=block,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_in_memory_exporter_example_runs() -> None:
    block = the_block("observability.md", "InMemorySpanExporter()")
    completed = subprocess.run(
        [sys.executable, "-c", block], capture_output=True, text=True, timeout=60, check=False
    )
    assert completed.returncode == 0, completed.stderr
    names = [line.split(" ", 1)[0] for line in completed.stdout.splitlines()]
    assert names == ["chat", "opsrun.run"]
    assert "'opsrun.run.status': 'done'" in completed.stdout


async def test_the_follow_example_streams_a_run_and_resumes() -> None:
    namespace: dict[str, Any] = {"__name__": "docs_example"}
    exec(compile(the_block("postgres.md", "runner.follow("), "postgres.md", "exec"), namespace)
    stream_run = namespace["stream_run"]
    runner = Runner(catalog=OperationCatalog(), stores=InMemoryStores(), main_llm=OfflineMainLlm())
    result = await runner.run(RunRequest(trigger="generate", chat_id="c1", user_message="Hi"))
    sent: list[RunEvent] = []

    async def send_to_client(event: RunEvent) -> None:
        sent.append(event)

    last = await stream_run(runner, result.run.run_id, send_to_client)
    assert [sent[0].type, sent[-1].type] == ["run.started", "run.finished"]
    assert [e.seq for e in sent] == list(range(1, last + 1))
    sent.clear()
    assert await stream_run(runner, result.run.run_id, send_to_client, 2) == last
    assert [e.seq for e in sent] == list(range(3, last + 1))
