"""The plan driver end to end: PLAN, then "ok", then APPLY with a repair and a v1 fallback.

Run it with ``python examples/plan_driver.py`` (``make demo`` runs it). It works offline:
a scripted model plays an LLM that first proposes a plan, then writes a patch whose
context does not match the file (twice: the driver asks for one repair), so the driver
falls back to protocol v1, where the model sends the whole file. Every step is printed
as the log event the driver emits. Swap ``ScriptedProvider`` for
``opsrun.providers.openai.OpenAIProvider`` to drive a real model the same way.
It writes only inside a temporary directory and removes it at the end.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import anyio

from opsrun.protocol import DriverConfig, PlanDriver, PlanEvent, sha256_hex, undo
from opsrun.testing import ScriptedProvider

APP = "def parse(value):\n    return value.strip()\n"
FIXED = "def parse(value):\n    if value is None:\n        return ''\n    return value.strip()\n"


def scripted_model() -> ScriptedProvider:
    """The answers a model gives, in order: a plan, two bad v2 patches, a v1 rewrite."""
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
            json.dumps(plan),
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


async def main() -> int:
    with tempfile.TemporaryDirectory(prefix="opsrun-driver-") as tmp:
        root = Path(tmp)
        (root / "app.py").write_text(APP, encoding="utf-8")
        model = scripted_model()
        driver = PlanDriver(
            provider=model,
            model="scripted",
            root=root,
            config=DriverConfig(check=[sys.executable, "-c", "import app"]),
            events=show,
        )

        print("== you: plan: fix parse(None)")
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
        return 0 if applied.status == "applied" and fixed and restored else 1


if __name__ == "__main__":
    sys.exit(anyio.run(main))
