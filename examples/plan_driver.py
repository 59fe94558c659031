"""The plan driver end to end, offline: context with hashes, then a repair and a v1 fallback.

Run it with ``python examples/plan_driver.py`` (``make demo`` runs it). A scripted model
plays the LLM; every step is printed as the log event the driver emits.

1. ``plan:`` with a traceback attached: the driver reads the file the traceback names
   before the first call; the model asks for the test file too; the next round shows it
   with its sha256; the plan is saved. ``ok``: the model writes a v2 PATCH_FILE against
   the hash it was shown, and the driver applies it (and runs the check).
2. Another plan, another ``ok``: this time the model's patch does not match the file,
   twice (the driver asks for one repair), so the driver falls back to protocol v1, where
   the model sends the whole file.

Swap the scripted model for ``opsrun.providers.openai.OpenAIProvider`` to drive a real
model the same way. It writes only inside a temporary directory and removes it at the end.
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
from pathlib import Path

import anyio

from opsrun.ports import LlmRequest
from opsrun.protocol import DriverConfig, InMemoryMemory, PlanDriver, PlanEvent, sha256_hex, undo
from opsrun.testing import FunctionProvider, ScriptedProvider

APP = "def parse(value):\n    return value.strip()\n"
FIXED = "def parse(value):\n    if value is None:\n        return ''\n    return value.strip()\n"
TEST = "from app import parse\n\n\ndef test_none():\n    assert parse(None) == ''\n"
TRACEBACK = """Traceback (most recent call last):
  File "app.py", line 2, in parse
    return value.strip()
AttributeError: 'NoneType' object has no attribute 'strip'
"""
PATCH = (
    "--- a/app.py\n+++ b/app.py\n@@ -1,2 +1,4 @@\n def parse(value):\n"
    "+    if value is None:\n+        return ''\n     return value.strip()\n"
)


def reading_model(request: LlmRequest) -> str:
    """A model that asks for what it lacks and patches against the hash it was shown."""
    prompt = request.messages[-1].content
    shown = dict(re.findall(r"FILE\[([^\]]+)\] \(sha256=([0-9a-f]{64})", prompt))
    if "MODE: PLAN" in prompt:
        if "tests/test_app.py" not in shown:
            ask = [{"type": "read_file", "path": "tests/test_app.py"}]
            return json.dumps({"actions": [], "summary": "Need the test.", "context_requests": ask})
        summary = "Diagnosis: parse(None) calls None.strip().\nPlan: return '' for None."
        return json.dumps({"actions": [], "summary": summary})
    action = {
        "kind": "PATCH_FILE",
        "path": "app.py",
        "base_sha256": shown["app.py"],
        "patch": PATCH,
    }
    return json.dumps({"actions": [action], "summary": "parse(None) returns ''"})


def scripted_model() -> ScriptedProvider:
    """The answers a model gives, in order: two plan rounds, two bad v2 patches, a rewrite."""
    plan = {
        "actions": [],
        "summary": "Diagnosis: parse(None) calls None.strip().\n"
        "Plan: 1) return '' for None.\nCheck: python -c 'import app'",
        "context_requests": [{"type": "read_file", "path": "app.py"}],
    }
    stale_patch = {
        "kind": "PATCH_FILE",
        "path": "app.py",
        "base_sha256": sha256_hex(APP.encode()),
        # The context lines do not match the file: the patch cannot apply.
        "patch": "--- a/app.py\n+++ b/app.py\n@@ -1,2 +1,4 @@\n def parse(text):\n"
        "+    if text is None:\n+        return ''\n     return text.strip()\n",
    }
    rewrite = {"kind": "UPDATE_FILE", "path": "app.py", "content": FIXED}
    return ScriptedProvider(
        [
            json.dumps(plan),  # asks to read app.py: the driver shows it in a second round
            json.dumps(plan | {"context_requests": []}),
            json.dumps({"actions": [stale_patch], "summary": "guard None"}),
            json.dumps({"actions": [stale_patch], "summary": "guard None, take two"}),
            json.dumps({"actions": [rewrite], "summary": "parse(None) now returns ''"}),
        ],
        default=None,
    )


def show(event: PlanEvent) -> None:
    """The event sink: one line per step (the default sink logs them instead)."""
    fields = " ".join(f"{k}={v}" for k, v in event.fields.items() if k != "model")
    print(f"  [{event.name}] {fields}")


def new_driver(root: Path, model: FunctionProvider | ScriptedProvider) -> PlanDriver:
    return PlanDriver(
        provider=model,
        model="scripted",
        root=root,
        config=DriverConfig(check=[sys.executable, "-c", "import app"]),
        events=show,
        memory=InMemoryMemory(),  # the default keeps preferences in files
    )


async def with_context(root: Path) -> bool:
    """Part 1: context requested, fed with hashes, and a patch applied against them."""
    model = FunctionProvider(reading_model)
    driver = new_driver(root, model)
    print("== you: plan: fix the failing test   (+ the traceback as a report)")
    planned = await driver.turn("plan: fix the failing test", report=TRACEBACK)
    print(f"-> {planned.mode}: {planned.status} in {planned.trace['context_rounds'] + 1} rounds")
    for block in planned.trace["context"]:
        print(f"   shown: {block['path']} sha256={block['sha256'][:12]}…")
    print("\n== you: ok")
    applied = await driver.turn("ok")
    paths = ", ".join(applied.trace["read_paths"])
    print(f"-> {applied.mode}: {applied.status}, the patch written against the hashes of {paths}")
    return applied.status == "applied" and (root / "app.py").read_text(encoding="utf-8") == FIXED


async def with_fallback(root: Path) -> bool:
    """Part 2: a patch that does not apply, one repair, then the v1 fallback."""
    (root / "app.py").write_text(APP, encoding="utf-8")
    model = scripted_model()
    driver = new_driver(root, model)
    print("\n== you: plan: fix parse(None)")
    planned = await driver.turn("plan: fix parse(None)")
    assert planned.plan is not None
    print(f"-> {planned.mode}: {planned.status}")
    print("   " + (planned.plan.summary or "").replace("\n", "\n   "))

    print("\n== you: ok")
    applied = await driver.turn("ok")
    print(f"-> {applied.mode}: {applied.status}")
    trace = applied.trace
    print(
        f"   protocol attempts {trace['protocol_attempts']}, repairs {trace['repair_count']}, "
        f"fallback {trace['protocol_fallback_reason']} at {trace['protocol_fallback_stage']}"
    )
    for item in applied.preview:
        print("   " + item.diff.rstrip("\n").replace("\n", "\n   "))
    fixed = (root / "app.py").read_text(encoding="utf-8") == FIXED
    print(f"   app.py fixed: {fixed}; the model was asked {model.calls} times")
    undo(root)
    restored = (root / "app.py").read_text(encoding="utf-8") == APP
    print(f"\nundo restores app.py: {restored}")
    return applied.status == "applied" and fixed and restored


async def main() -> int:
    with tempfile.TemporaryDirectory(prefix="opsrun-driver-") as tmp:
        root = Path(tmp)
        (root / "app.py").write_text(APP, encoding="utf-8")
        (root / "tests").mkdir()
        (root / "tests" / "test_app.py").write_text(TEST, encoding="utf-8")
        first = await with_context(root)
        second = await with_fallback(root)
        return 0 if first and second else 1


if __name__ == "__main__":
    sys.exit(anyio.run(main))
