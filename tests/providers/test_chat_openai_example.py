"""examples/chat_openai.py runs offline against the bundled fake server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_openai_chat_example_runs_offline() -> None:
    env = {
        name: value
        for name, value in os.environ.items()
        if name not in ("OPENAI_API_KEY", "OPSRUN_OPENAI_BASE_URL", "OPSRUN_OPENAI_MODEL")
    }
    completed = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "chat_openai.py")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    assert completed.returncode == 0, completed.stderr
    out = completed.stdout
    assert "offline: FakeOpenAIServer at http://127.0.0.1:" in out
    assert "model: (offline model) The wind answers you: 'We reach the old lighthouse" in out
    assert out.count("run done; main LLM completed") == 2
    assert out.count("notes:working_notes    done") == 2
    assert "| 2 | 13 | 25 |" in out
    assert "offline: the fake server answered 4 requests (2 streamed)" in out
