"""The README's code, examples in the docs and the example scripts run as documented."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from _support import generate, make_runner, use_profile
from opsrun.model import RunStatus
from opsrun.stores import InMemoryStores
from opsrun.testing import FunctionMainLlm

ROOT = Path(__file__).resolve().parent.parent


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(encoding="utf-8"), re.S)


def run_example(script: str) -> str:
    """Run ``examples/<script>``; return its output once it has exited with status 0."""
    completed = subprocess.run(
        [sys.executable, str(ROOT / "examples" / script)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    return completed.stdout


def test_readme_usage_example_runs() -> None:
    blocks = python_blocks(ROOT / "README.md")
    assert blocks, "README.md has no python example"
    completed = subprocess.run(
        [sys.executable, "-c", blocks[0]], capture_output=True, text=True, timeout=60, check=False
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.startswith("done ")


@pytest.mark.parametrize("script", ["quickstart.py"])
def test_example_runs(script: str) -> None:
    out = run_example(script)
    assert "valid: no issues" in out
    assert "run failed failedType=before_barrier" in out
    assert "combat_rag=skipped(condition_false)" in out
    assert "art.world_state v4" in out
    assert "[2 variants]" in out
    # The debug report of the regenerated turn: the window trimmed the oldest message,
    # the world state entered the system prompt, and the update is shown as a diff.
    report = out[out.index("== why this answer?") :]
    assert "Trimmed: 1 message, `msg_" in report
    assert "(max_messages)" in report
    assert "| `world_state` | yes | v3 |" in report
    assert "v3 → v4" in report
    # A second process continues the chat from the SQLite file, artifacts included.
    resumed = out[out.index("== a second process continues chat 'demo'") :]
    assert "this process found 7 messages" in resumed
    assert "turn 5 -> run done" in resumed
    assert "art.world_state v5" in resumed
    assert "history v4" in resumed


def test_plan_apply_example_runs() -> None:
    out = run_example("plan_apply.py")
    assert "apply failed with ERR_CHECK_FAILED; rolled back: True" in out
    assert "applied: app.py, NOTES.md; check exit 0" in out
    assert "undo restores the original tree: True" in out


def test_plan_driver_example_runs() -> None:
    out = run_example("plan_driver.py")
    first, second = out.split("== you: plan: fix parse(None)")
    assert "[CONTEXT_CACHE_MISS] type=read key=app.py 1 82" in first  # from the traceback
    assert "-> plan: planned in 2 rounds" in first
    assert "shown: tests/test_app.py sha256=" in first  # asked for, then shown with its hash
    assert "-> apply: applied, the patch written against the hashes of app.py" in first
    out = second
    assert "-> plan: planned" in out
    assert "[LLM_RESPONSE_REPAIR] code=ERR_PATCH_APPLY_FAILED" in out
    assert "[PROTOCOL_FALLBACK] from=v2 to=v1 reason=ERR_PATCH_APPLY_FAILED" in out
    assert "-> apply: applied" in out
    assert "protocol attempts [2, 1], repairs 1" in out
    assert "app.py fixed: True; the model was asked 5 times" in out
    assert "undo restores app.py: True" in out


def run_doc_block(doc: str, marker: str) -> str:
    """Run the one python block of ``docs/<doc>`` containing ``marker``; return its output."""
    blocks = [b for b in python_blocks(ROOT / "docs" / doc) if marker in b]
    assert len(blocks) == 1, f"{doc}: {len(blocks)} python blocks contain {marker!r}"
    completed = subprocess.run(
        [sys.executable, "-c", blocks[0]], capture_output=True, text=True, timeout=60, check=False
    )
    assert completed.returncode == 0, completed.stderr
    return completed.stdout


def test_engine_registration_example_runs() -> None:
    out = run_doc_block("engine.md", "catalog.add(ReplyLength())")
    assert out.splitlines() == [
        "done {'chars': 13}",
        r"system: 'You are a travel guide.\nAnswer in one sentence.'",
        "system: 'The user prefers metric units.'",
        "user: 'How far is Lyon from Paris?'",
    ]


def test_report_event_log_example_runs() -> None:
    out = run_doc_block("report.md", "log = EventLog()")
    assert out.splitlines() == ["False", "[3, 4]", "2", "True"]


def test_engine_artifact_example_runs() -> None:
    out = run_doc_block("engine.md", "class Mood(Operation)")
    assert out.splitlines() == ["done 1", "done 2"]


class _Gone(Exception):
    """What a web framework's ``write`` raises once the client went away."""


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("doc", "marker"),
    [
        ("README.md", "runner.stream(request) as events"),
        ("docs/report.md", "runner.stream(request) as events"),
    ],
)
async def test_the_streaming_example_survives_a_client_that_goes_away(
    doc: str, marker: str
) -> None:
    (block,) = [b for b in python_blocks(ROOT / doc) if marker in b]
    body = block.replace("result = events.result\n", "")
    stores = InMemoryStores()
    await use_profile(stores)
    never = anyio.Event()

    async def reply(request: object) -> str:
        await never.wait()  # the client leaves while the main LLM works
        return "never sent"

    runner = make_runner(stores=stores, main_llm=FunctionMainLlm(reply))
    written: list[str] = []

    class Response:
        async def write(self, chunk: str) -> None:
            written.append(chunk)
            if len(written) == 2:
                raise _Gone

    code = "async def handler(runner, request, response):\n" + "".join(
        f"    {line}\n" for line in body.splitlines()
    )
    namespace: dict[str, object] = {}
    exec(compile(code, doc, "exec"), namespace)
    with pytest.raises(_Gone):
        await namespace["handler"](runner, generate(), Response())  # type: ignore[operator]
    (run_id,) = stores.runs.run_ids()
    run, _ = await stores.runs.get_run(run_id)
    assert run.status == RunStatus.ABORTED
    assert run.abort_reason == "cancelled"
