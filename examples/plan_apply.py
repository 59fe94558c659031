"""Apply an LLM's v2 edit plan to a throwaway project: preview, a failing check, success.

Run it with ``python examples/plan_apply.py`` (``make demo`` runs it after the quickstart).
It writes only inside a temporary directory and removes it at the end.
"""

from __future__ import annotations

import difflib
import json
import sys
import tempfile
from pathlib import Path

from opsrun.errors import ApplyError
from opsrun.protocol import apply_plan, parse_plan, preview_plan, sha256_hex, undo

GREETING = 'def greet(name):\n    return "Hello, " + name\n\n\nprint(greet("world"))\n'


def llm_answer(base: str, new_line: str) -> str:
    """What a model answers in protocol v2: a fenced JSON plan with a PATCH_FILE action."""
    edited = base.replace('    return "Hello, " + name', new_line)
    patch = "".join(
        difflib.unified_diff(
            base.splitlines(keepends=True),
            edited.splitlines(keepends=True),
            "a/app.py",
            "b/app.py",
            n=2,
        )
    )
    plan = {
        "actions": [
            {
                "kind": "PATCH_FILE",
                "path": "app.py",
                "patch": patch,
                "base_sha256": sha256_hex(base.encode()),
            },
            {"kind": "CREATE_FILE", "path": "NOTES.md", "content": "Greeting uses f-strings.\n"},
        ],
        "summary": "Use an f-string in greet().",
    }
    return "Here is the plan:\n```json\n" + json.dumps(plan, indent=2) + "\n```\n"


def tree(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): p.read_text(encoding="utf-8")
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".opsrun" not in p.parts
    }


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="opsrun-demo-") as tmp:
        root = Path(tmp)
        (root / "app.py").write_text(GREETING, encoding="utf-8")
        before = tree(root)
        check = [sys.executable, "-c", "import app"]  # the project's "test suite"

        print("== a plan whose change breaks the project")
        broken = parse_plan(llm_answer(GREETING, '    return f"Hello, {name"'), version=2)
        for item in preview_plan(broken, root):
            print(item.diff or f"(directory {item.path})")
        try:
            apply_plan(broken, root, check=check)
        except ApplyError as exc:
            print(f"apply failed with {exc.code}; rolled back: {tree(root) == before}\n")

        print("== the repaired plan")
        fixed = parse_plan(llm_answer(GREETING, '    return f"Hello, {name}"'), version=2)
        result = apply_plan(fixed, root, check=check)
        print(f"applied: {', '.join(result.changed)}; check exit {result.check_returncode}")
        print((root / "app.py").read_text(encoding="utf-8"))

        undo(root)
        print(f"== undo restores the original tree: {tree(root) == before}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
