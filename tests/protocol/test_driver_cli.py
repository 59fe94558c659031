"""``opsrun plan turn`` against a local OpenAI-compatible server, and ``opsrun plan report``."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from opsrun.cli import main
from opsrun.testing import FakeOpenAIServer

APP = "def parse(value):\n    return value.strip()\n"
PATCH = (
    "--- a/app.py\n+++ b/app.py\n@@ -1,2 +1,4 @@\n def parse(value):\n"
    "+    if value is None:\n+        return ''\n     return value.strip()\n"
)
PLAN = json.dumps(
    {
        "actions": [],
        "summary": "Diagnosis: parse(None) crashes.",
        "context_requests": [{"type": "read_file", "path": "app.py"}],
    }
)


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key-for-the-fake")
    monkeypatch.delenv("OPSRUN_OPENAI_MODEL", raising=False)
    (tmp_path / "app.py").write_text(APP)
    return tmp_path


def turn(project: Path, server: FakeOpenAIServer, *args: str) -> list[str]:
    return ["plan", "turn", "--root", str(project), "--model", "m", "--base-url",
            server.base_url, *args]  # fmt: skip


def test_plan_then_ok_through_a_real_http_server(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = hashlib.sha256(APP.encode()).hexdigest()
    action = {"kind": "PATCH_FILE", "path": "app.py", "base_sha256": base, "patch": PATCH}
    apply = json.dumps({"actions": [action], "summary": "parse(None) returns ''"})
    seen = json.dumps({"actions": [], "summary": "Diagnosis: parse(None) crashes. Guard it."})
    with FakeOpenAIServer([PLAN, seen, apply], default=None) as server:
        assert main(turn(project, server, "--trace", "plan: fix parse(None)")) == 0
        planned = capsys.readouterr().out
        assert "plan: planned" in planned
        assert "reply 'ok' to apply this plan" in planned
        assert (project / ".opsrun" / "driver" / "plan.json").is_file()

        assert main(turn(project, server, "--trace", "ok")) == 0
        applied = capsys.readouterr().out
        second_round = server.requests[1].body
        body = server.requests[2].body

    assert "apply: applied" in applied
    assert "+    if value is None:" in applied  # the preview diff
    assert "undo with: opsrun plan undo --root" in applied
    assert (project / "app.py").read_text().startswith("def parse(value):\n    if value is None")
    assert f"FILE[app.py] (sha256={base})" in second_round["messages"][1]["content"]
    assert body["model"] == "m"
    assert body["temperature"] == 0
    assert f"FILE[app.py] (sha256={base})" in body["messages"][1]["content"]
    assert not (project / ".opsrun" / "driver" / "plan.json").exists()

    assert main(["plan", "report", "--root", str(project), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["traces"] == 2
    assert report["apply_count"] == 1
    assert report["fallback_count"] == 0
    assert report["ready_for_v2_only"] is False  # one APPLY is not a window of 100


def test_a_failed_turn_exits_1_with_the_code(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with FakeOpenAIServer(["not json", "still not json"], default=None) as server:
        assert main(turn(project, server, "--json", "plan: fix")) == 1
    result = json.loads(capsys.readouterr().out)
    assert result["status"] == "failed"
    assert result["error_code"] == "ERR_INVALID_JSON"


def test_user_errors_exit_2_without_a_traceback(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = str(project / "nope")
    assert main(["plan", "turn", "--root", missing, "--model", "m", "plan: x"]) == 2
    err = capsys.readouterr().err
    assert "--root" in err
    assert "does not exist" in err
    assert "Traceback" not in err
    assert main(["plan", "turn", "--root", str(project), "plan: x"]) == 2
    assert "--model" in capsys.readouterr().err
    assert main(["plan", "report", "--root", str(project / "app.py")]) == 2
    assert "is not a directory" in capsys.readouterr().err


def test_report_on_written_traces(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    traces = project / ".opsrun" / "traces"
    traces.mkdir(parents=True)
    for n in range(4):
        doc = {
            "trace_id": f"t{n}",
            "created_at": f"2026-01-01T00:00:0{n}+00:00",
            "mode": "apply",
            "status": "applied",
            "protocol_fallback_attempted": n == 0,
            "protocol_fallback_reason": "ERR_PATCH_APPLY_FAILED" if n == 0 else None,
            "protocol_fallback_stage": "preview" if n == 0 else None,
            "errors": [],
        }
        (traces / f"t{n}.json").write_text(json.dumps(doc))
    (traces / "broken.json").write_text("{not json")
    assert main(["plan", "report", "--root", str(project)]) == 0
    out = capsys.readouterr().out
    assert "traces: 4 (1 unreadable)" in out
    assert "fallback_rate: 25.00%" in out
    assert "reason ERR_PATCH_APPLY_FAILED: 1" in out
    assert "v2 only: not yet" in out


@pytest.mark.parametrize(
    ("name", "text", "code"),
    [
        ("driver/plan.json", '{"goal": "x", "plan": {', "plan_state_invalid"),
        (
            "project.json",
            '{"default_test_command": "pytest -q", "test_cmd": "x"}',
            "memory_invalid",
        ),
    ],
)
def test_a_damaged_state_file_is_named_without_a_traceback(
    project: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    text: str,
    code: str,
) -> None:
    monkeypatch.setenv("OPSRUN_USER_PREFS", str(project / "user-prefs.json"))
    damaged = project / ".opsrun" / name
    damaged.parent.mkdir(parents=True)
    damaged.write_text(text)
    with FakeOpenAIServer([PLAN], default=None) as server:
        assert main(turn(project, server, "ok")) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"opsrun: [{code}] {damaged}: ")
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
