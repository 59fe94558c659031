"""PlanDriver scenarios, each driven by a scripted model against a real directory."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from opsrun.errors import ConfigError, RateLimited, ResponseFormatRejected
from opsrun.ports import LlmRequest, ProviderCapabilities
from opsrun.protocol import (
    DriverConfig,
    FilePlanState,
    InMemoryMemory,
    PlanDriver,
    PlanEvent,
    load_traces,
)
from opsrun.testing import Delayed, FunctionProvider, ScriptedProvider

pytestmark = pytest.mark.anyio

APP = "def parse(value):\n    return value.strip()\n"
FIXED = "def parse(value):\n    if value is None:\n        return ''\n    return value.strip()\n"
PATCH = (
    "--- a/app.py\n+++ b/app.py\n@@ -1,2 +1,4 @@\n def parse(value):\n"
    "+    if value is None:\n+        return ''\n     return value.strip()\n"
)
BAD_PATCH = (
    "--- a/app.py\n+++ b/app.py\n@@ -1,2 +1,3 @@\n def parse(other):\n"
    "+    pass\n     return other\n"
)


def sha(data: str | bytes) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


def answer(**fields: Any) -> str:
    return json.dumps({"actions": [], **fields})


def plan_answer(*paths: str) -> str:
    return answer(
        summary="Diagnosis: parse(None) crashes.\nPlan: guard None.\nCheck: pytest -q",
        context_requests=[{"type": "read_file", "path": p} for p in paths],
    )


def patch_answer(base: str, patch: str = PATCH) -> str:
    action = {"kind": "PATCH_FILE", "path": "app.py", "base_sha256": base, "patch": patch}
    return json.dumps({"actions": [action], "summary": "parse(None) returns ''"})


def v1_update(content: str = FIXED) -> str:
    action = {"kind": "UPDATE_FILE", "path": "app.py", "content": content}
    return json.dumps({"actions": [action], "summary": "rewrote app.py"})


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "app.py").write_text(APP)
    return tmp_path


class Events(list[PlanEvent]):
    def names(self) -> list[str]:
        return [e.name for e in self]

    def named(self, name: str) -> list[PlanEvent]:
        return [e for e in self if e.name == name]


def driver(project: Path, provider: Any, events: Events | None = None, **config: Any) -> PlanDriver:
    """A driver whose PLAN turns take one round (context is fetched for APPLY)."""
    return PlanDriver(
        provider=provider,
        model="test-model",
        root=project,
        config=DriverConfig(**({"max_context_rounds": 0} | config)),
        events=(events if events is not None else Events()).append,
        memory=InMemoryMemory(),
    )


async def test_valid_first_time(project: Path) -> None:
    create = {"kind": "CREATE_FILE", "path": "README.md", "content": "# App\n"}
    provider = ScriptedProvider([json.dumps({"actions": [create], "summary": "added"})])
    events = Events()
    result = await driver(project, provider, events).turn("apply: add a README")

    assert (result.mode, result.status, result.error_code) == ("apply", "applied", None)
    assert (project / "README.md").read_text() == "# App\n"
    assert result.applied is not None
    assert result.applied.changed == ("README.md",)
    assert [p.path for p in result.preview] == ["README.md"]
    assert events.names() == [
        "LLM_REQUEST_SENT",
        "PREVIEW_READY",
        "LLM_RESPONSE_OK",
        "APPLY_SUCCESS",
    ]
    assert all(e.trace_id == result.trace_id for e in events)
    sent = events.named("LLM_REQUEST_SENT")[0].fields
    assert sent["model"] == "test-model"
    assert sent["schema_version"] == 2
    assert sent["token_budget"] == 16384
    assert sent["input_chars"] > 0
    trace = result.trace
    assert trace["trace_id"] == result.trace_id
    assert trace["event"] == "LLM_PLAN_OK"
    assert trace["protocol_default"] == 2
    assert trace["protocol_attempts"] == [2]
    assert trace["protocol_fallback_attempted"] is False
    assert trace["protocol_repair_attempt"] == 0
    assert trace["validated_json"]["actions"][0]["path"] == "README.md"
    assert trace["config_snapshot"]["temperature"] == 0.0
    assert trace["schema_hash"] == trace["config_snapshot"]["schema_hash"]


async def test_generation_defaults_and_the_large_input_cap(project: Path) -> None:
    provider = ScriptedProvider([plan_answer(), plan_answer()])
    d = driver(project, provider)
    await d.turn("plan: look around")
    await d.turn("plan: " + "x" * 80_001)
    small, large = provider.requests
    assert small.samplers.temperature == 0
    assert small.samplers.top_p == 1
    assert small.samplers.presence_penalty == 0
    assert small.samplers.frequency_penalty == 0
    assert small.timeout == 90.0
    assert (small.max_output_tokens, large.max_output_tokens) == (16384, 4096)


async def test_invalid_json_is_repaired_once(project: Path) -> None:
    provider = ScriptedProvider(["Sure! here it is", plan_answer("app.py")], default=None)
    events = Events()
    result = await driver(project, provider, events).turn("plan: fix parse")

    assert result.status == "planned"
    assert provider.calls == 2
    repair = provider.requests[1].messages
    assert [m.role for m in repair] == ["system", "user", "assistant", "user"]
    assert repair[2].content == "Sure! here it is"
    assert "ERR_INVALID_JSON" in repair[3].content
    assert "REPAIR_ERR_INVALID_JSON" in repair[3].content
    assert "VALIDATION_FAILED" in events.names()
    assert "LLM_RESPONSE_REPAIR" in events.names()
    assert result.trace["repair_count"] == 1
    assert result.trace["protocol_repair_attempt"] == 1
    assert [c["purpose"] for c in result.trace["calls"]] == ["propose", "repair"]


async def test_invalid_twice_fails_with_the_code(project: Path) -> None:
    provider = ScriptedProvider(["nope", "still nope"], default=None)
    result = await driver(project, provider).turn("plan: fix parse")
    assert (result.status, result.error_code) == ("failed", "ERR_INVALID_JSON")
    assert provider.calls == 2
    assert result.plan is None
    assert result.trace["event"] == "LLM_PLAN_FAILED"


async def test_plan_mode_rejects_actions_and_repairs(project: Path) -> None:
    create = {"kind": "CREATE_FILE", "path": "x.py", "content": "x = 1\n"}
    provider = ScriptedProvider(
        [json.dumps({"actions": [create], "summary": "did it"}), plan_answer()], default=None
    )
    result = await driver(project, provider).turn("plan: fix parse")
    assert result.status == "planned"
    assert "REPAIR_ERR_PLAN_HAS_ACTIONS" in provider.requests[1].messages[-1].content
    assert not (project / "x.py").exists()


async def test_rejected_response_format_steps_down_once(project: Path) -> None:
    caps = ProviderCapabilities(structured_output="json_schema_strict")
    provider = ScriptedProvider(
        [ResponseFormatRejected("json_schema unsupported"), plan_answer(), plan_answer()],
        default=None,
        capabilities=caps,
    )
    events = Events()
    d = driver(project, provider, events)
    result = await d.turn("plan: fix parse")

    assert result.status == "planned"
    first, second = provider.requests
    assert first.response_format is not None
    assert first.response_format.strict
    assert first.response_format.type == "json_schema"
    assert first.response_format.schema is not None
    assert second.response_format is None
    fallback = events.named("LLM_RESPONSE_FORMAT_FALLBACK")
    assert len(fallback) == 1
    assert fallback[0].fields["from"] == "json_schema_strict"
    assert result.trace["response_format_fallback"] is True
    await d.turn("plan: again")  # the driver remembers: no format, no second fallback
    assert provider.requests[2].response_format is None
    assert len(events.named("LLM_RESPONSE_FORMAT_FALLBACK")) == 1


async def test_plan_then_ok_applies_with_the_saved_context(project: Path) -> None:
    provider = ScriptedProvider([plan_answer("app.py"), patch_answer(sha(APP))], default=None)
    d = driver(project, provider)
    planned = await d.turn("plan: fix parse(None)")
    assert planned.status == "planned"
    assert planned.mode == "plan"
    assert planned.plan is not None
    assert planned.plan.actions == ()
    saved = await d.state.load()
    assert saved is not None
    assert saved.goal == "fix parse(None)"

    applied = await d.turn("ok")
    assert (applied.mode, applied.status) == ("apply", "applied")
    assert (project / "app.py").read_text() == FIXED
    prompt = provider.requests[1].messages[1].content
    assert "GOAL:\nfix parse(None)" in prompt
    assert "SAVED_PLAN" in prompt
    assert "Diagnosis: parse(None) crashes." in prompt
    assert f"FILE[app.py] (sha256={sha(APP)}):\n{APP}" in prompt
    assert applied.trace["read_paths"] == ["app.py"]
    assert await d.state.load() is None  # applied: the plan is done


async def test_update_of_a_file_never_shown_is_refused(project: Path) -> None:
    """read_paths are the files sent to the model: ERR_UPDATE_WITHOUT_BASE is on."""
    provider = ScriptedProvider(
        [plan_answer(), patch_answer(sha(APP)), patch_answer(sha(APP))], default=None
    )
    d = driver(project, provider)
    await d.turn("plan: fix parse")
    result = await d.turn("ok")
    assert (result.status, result.error_code) == ("failed", "ERR_UPDATE_WITHOUT_BASE")
    assert (project / "app.py").read_text() == APP


async def test_v2_patch_fails_repair_then_v1_fallback(project: Path) -> None:
    provider = ScriptedProvider(
        [
            plan_answer("app.py"),
            patch_answer(sha(APP), BAD_PATCH),
            patch_answer(sha(APP), BAD_PATCH),
            v1_update(),
        ],
        default=None,
    )
    events = Events()
    d = driver(project, provider, events)
    await d.turn("plan: fix parse")
    result = await d.turn("ok")

    assert result.status == "applied"
    assert (project / "app.py").read_text() == FIXED
    assert provider.calls == 4
    assert "REPAIR_ERR_PATCH_APPLY_FAILED" in provider.requests[2].messages[-1].content
    assert "Protocol v1" in provider.requests[3].messages[0].content
    trace = result.trace
    assert trace["protocol_attempts"] == [2, 1]
    assert trace["protocol_fallback_attempted"] is True
    assert trace["protocol_fallback_reason"] == "ERR_PATCH_APPLY_FAILED"
    assert trace["protocol_fallback_stage"] == "preview"
    assert trace["protocol_repair_attempt"] == 1
    assert trace["protocol_version_used"] == 1
    fallback = events.named("PROTOCOL_FALLBACK")
    assert len(fallback) == 1
    assert fallback[0].fields == {
        "from": "v2",
        "to": "v1",
        "reason": "ERR_PATCH_APPLY_FAILED",
        "stage": "preview",
    }


async def test_fallback_happens_at_most_once(project: Path) -> None:
    provider = ScriptedProvider(
        [plan_answer("app.py")] + [patch_answer(sha(APP), BAD_PATCH)] * 2 + ["[]", "[]"],
        default=None,
    )
    d = driver(project, provider)
    await d.turn("plan: fix parse")
    result = await d.turn("ok")
    assert result.status == "failed"
    assert result.error_code == "ERR_NO_CHANGES_MARKER"
    assert result.trace["protocol_attempts"] == [2, 1]
    assert provider.calls == 5  # plan, v2 + repair, v1 + repair; never a second fallback


async def test_no_fallback_when_disabled(project: Path) -> None:
    provider = ScriptedProvider(
        [plan_answer("app.py")] + [patch_answer(sha(APP), BAD_PATCH)] * 2, default=None
    )
    d = driver(project, provider, fallback_to_v1=False)
    await d.turn("plan: fix parse")
    result = await d.turn("ok")
    assert (result.status, result.error_code) == ("failed", "ERR_PATCH_APPLY_FAILED")
    assert result.trace["protocol_fallback_attempted"] is False


async def test_non_utf8_target_falls_back_at_once(project: Path) -> None:
    latin = "caf\xe9 = 1\n".encode("latin-1")
    (project / "legacy.py").write_bytes(latin)
    patch = "--- a/legacy.py\n+++ b/legacy.py\n@@ -1 +1 @@\n-x\n+y\n"
    v2 = {"kind": "PATCH_FILE", "path": "legacy.py", "base_sha256": sha(latin), "patch": patch}
    v1 = {"kind": "UPDATE_FILE", "path": "legacy.py", "content": "cafe = 1\n"}
    provider = ScriptedProvider(
        [
            plan_answer("legacy.py"),
            json.dumps({"actions": [v2], "summary": "patched"}),
            json.dumps({"actions": [v1], "summary": "rewrote"}),
        ],
        default=None,
    )
    d = driver(project, provider)
    await d.turn("plan: rename the variable")
    result = await d.turn("ok")

    assert result.status == "applied"
    assert (project / "legacy.py").read_text() == "cafe = 1\n"
    assert provider.calls == 3  # no v2 repair
    assert "not UTF-8" in provider.requests[1].messages[1].content
    assert result.trace["protocol_fallback_reason"] == "ERR_NON_UTF8_FILE"
    assert result.trace["protocol_fallback_stage"] == "validate"
    assert result.trace["protocol_repair_attempt"] == 0


async def test_update_existing_forbidden_gets_a_v2_repair_first(project: Path) -> None:
    provider = ScriptedProvider(
        [plan_answer("app.py"), v1_update(), patch_answer(sha(APP))], default=None
    )
    d = driver(project, provider)
    await d.turn("plan: fix parse")
    result = await d.turn("ok")
    assert result.status == "applied"
    assert (project / "app.py").read_text() == FIXED
    assert "REPAIR_ERR_V2_UPDATE_EXISTING_FORBIDDEN" in provider.requests[2].messages[-1].content
    assert result.trace["protocol_fallback_attempted"] is False
    assert result.trace["errors"] == [
        {"stage": "validate", "code": "ERR_V2_UPDATE_EXISTING_FORBIDDEN"}
    ]


async def test_a_v1_shaped_answer_is_accepted_as_a_schema_fallback(project: Path) -> None:
    create = [{"kind": "CREATE_FILE", "path": "notes.md", "content": "hi\n"}]
    provider = ScriptedProvider([json.dumps(create)], default=None)
    result = await driver(project, provider).turn("apply: add notes")
    assert result.status == "applied"
    assert (project / "notes.md").read_text() == "hi\n"
    assert result.trace["protocol_fallback_stage"] == "schema"
    assert result.trace["protocol_attempts"] == [2, 1]


async def test_a_file_changed_since_it_was_read_goes_back_to_plan(project: Path) -> None:
    def model(request: LlmRequest) -> str:
        if "MODE: PLAN" in request.messages[1].content:
            return plan_answer("app.py")
        (project / "app.py").write_text(APP + "# edited meanwhile\n")
        return patch_answer(sha(APP))

    provider = FunctionProvider(model)
    d = driver(project, provider)
    await d.turn("plan: fix parse")
    result = await d.turn("ok")

    assert (result.status, result.error_code, result.next_mode) == (
        "failed",
        "ERR_BASE_MISMATCH",
        "plan",
    )
    assert provider.calls == 2  # no repair: the model was right, the file moved
    assert await d.state.load() is not None  # the plan waits; "ok" re-reads the file
    assert (project / "app.py").read_text().endswith("# edited meanwhile\n")


async def test_a_miscopied_base_hash_is_repaired(project: Path) -> None:
    provider = ScriptedProvider(
        [plan_answer("app.py"), patch_answer("0" * 64), patch_answer(sha(APP))], default=None
    )
    d = driver(project, provider)
    await d.turn("plan: fix parse")
    result = await d.turn("ok")
    assert result.status == "applied"
    assert "REPAIR_ERR_BASE_MISMATCH" in provider.requests[2].messages[-1].content


async def test_no_changes_accepted(project: Path) -> None:
    provider = ScriptedProvider([answer(summary="NO_CHANGES: parse already copes.")])
    result = await driver(project, provider).turn("apply: make parse cope with None")
    assert (result.status, result.error_code) == ("no_changes", None)
    assert (project / "app.py").read_text() == APP


async def test_no_changes_without_the_marker_is_rejected(project: Path) -> None:
    provider = ScriptedProvider(
        [answer(summary="nothing to do"), answer(summary="still nothing")], default=None
    )
    result = await driver(project, provider).turn("apply: make parse cope with None")
    assert (result.status, result.error_code) == ("failed", "ERR_NO_CHANGES_MARKER")
    assert "REPAIR_ERR_NO_CHANGES_MARKER" in provider.requests[1].messages[-1].content


async def test_a_failing_check_rolls_back(project: Path) -> None:
    provider = ScriptedProvider([plan_answer("app.py"), patch_answer(sha(APP))], default=None)
    events = Events()
    d = driver(project, provider, events, check=lambda root: False)
    await d.turn("plan: fix parse")
    result = await d.turn("ok")

    assert (result.status, result.error_code) == ("failed", "ERR_CHECK_FAILED")
    assert (project / "app.py").read_text() == APP
    rollback = events.named("APPLY_ROLLBACK")
    assert len(rollback) == 1
    assert rollback[0].fields["code"] == "ERR_CHECK_FAILED"
    assert "APPLY_SUCCESS" not in events.names()
    assert await d.state.load() is not None  # nothing applied: the plan is kept


async def test_deletes_need_the_users_confirmation(project: Path) -> None:
    delete = json.dumps({"actions": [{"kind": "DELETE_FILE", "path": "app.py"}], "summary": "rm"})
    refused = await driver(project, ScriptedProvider([delete])).turn("apply: remove app.py")
    assert refused.error_code == "ERR_DELETE_NOT_CONFIRMED"
    assert (project / "app.py").exists()
    allowed = driver(project, ScriptedProvider([delete]), allow_delete=True)
    assert (await allowed.turn("apply: remove app.py")).status == "applied"
    assert not (project / "app.py").exists()


async def test_timeouts_and_provider_errors_fail_the_turn(project: Path) -> None:
    events = Events()
    slow = ScriptedProvider([Delayed(30, plan_answer())], default=None)
    result = await driver(project, slow, events, timeout=0.05).turn("plan: fix")
    assert (result.status, result.error_code) == ("failed", "ERR_LLM_TIMEOUT")
    assert events.named("LLM_REQUEST_TIMEOUT")[0].fields == {"timeout": 0.05}

    broken = ScriptedProvider([RateLimited("slow down")] * 3, default=None)
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    d = PlanDriver(provider=broken, model="m", root=project, events=events.append, sleep=sleep)
    result = await d.turn("plan: fix")
    assert (result.status, result.error_code) == ("failed", "ERR_LLM_REQUEST_FAILED")
    assert broken.calls == 3
    assert len(waits) == 2
    assert "rate_limited" in (result.error_message or "")


async def test_a_rate_limit_is_retried(project: Path) -> None:
    provider = ScriptedProvider([RateLimited("wait", retry_after=2.0), plan_answer()])
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    d = PlanDriver(provider=provider, model="m", root=project, sleep=sleep)
    assert (await d.turn("plan: fix")).status == "planned"
    assert waits
    assert waits[0] >= 2.0


async def test_the_file_state_carries_a_plan_across_drivers(project: Path) -> None:
    state_file = project / ".opsrun" / "driver" / "plan.json"
    first = PlanDriver(
        provider=ScriptedProvider([plan_answer("app.py")]),
        model="m",
        root=project,
        state=FilePlanState(state_file),
        config=DriverConfig(max_context_rounds=0),
        memory=InMemoryMemory(),
    )
    await first.turn("plan: fix parse")
    assert state_file.is_file()
    second_provider = ScriptedProvider([patch_answer(sha(APP))])
    second = PlanDriver(
        provider=second_provider,
        model="m",
        root=project,
        state=FilePlanState(state_file),
        memory=InMemoryMemory(),
    )
    assert (await second.turn("да")).status == "applied"
    assert not state_file.exists()


async def test_traces_are_written_masked_and_without_file_contents(project: Path) -> None:
    secret = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0" * 2
    provider = ScriptedProvider(
        [plan_answer("app.py"), patch_answer(sha(APP)).replace("parse(None)", secret)]
    )
    d = driver(project, provider, write_traces=True, trace_raw=True)
    await d.turn("plan: fix parse")
    result = await d.turn("ok")
    assert result.status == "applied"
    traces, unreadable = load_traces(project)
    assert unreadable == 0
    assert len(traces) == 2
    path = project / ".opsrun" / "traces" / f"{result.trace_id}.json"
    text = path.read_text()
    assert text.count("\n") == 1  # one line per trace
    assert secret not in text
    assert "[REDACTED]" in text
    assert "FILE[app.py]" not in text  # the context appears as paths and hashes only
    assert {"type": "file", "path": "app.py", "sha256": sha(APP)}.items() <= json.loads(text)[
        "context"
    ][0].items()
    assert secret not in json.dumps(result.trace)
    written = json.loads(text)
    assert written["status"] == "applied"
    assert written["raw_answers"]


async def test_bad_configuration_raises(project: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        PlanDriver(provider=ScriptedProvider(), model="m", root=project / "missing")
    assert caught.value.code == "root_invalid"
    with pytest.raises(ConfigError):
        PlanDriver(provider=ScriptedProvider(), model="m", root=project / "app.py")
    with pytest.raises(ConfigError) as bad:
        DriverConfig(protocol_version=3)  # type: ignore[arg-type]
    assert bad.value.details["field"] == "protocol_version"
    with pytest.raises(ConfigError):
        DriverConfig(timeout=0)
    with pytest.raises(ConfigError):
        DriverConfig(apply_triggers=("ok", ""))


async def test_a_request_with_nothing_in_it_fails_cleanly(project: Path) -> None:
    provider = ScriptedProvider(default=None)
    result = await driver(project, provider).turn("plan:   ")
    assert (result.status, result.error_code) == ("failed", "ERR_EMPTY_REQUEST")
    assert provider.calls == 0


async def test_context_reads_refuse_escapes_and_protected_files(project: Path) -> None:
    (project / ".env").write_text("TOKEN=hunter2\n")
    asks = answer(
        summary="need to look",
        context_requests=[
            {"type": "read_file", "path": "../../etc/passwd"},
            {"type": "read_file", "path": ".env"},
            {"type": "read_file", "path": "app.py", "start_line": 2, "end_line": 2},
        ],
    )
    provider = ScriptedProvider([asks, plan_answer()], default=None)
    result = await driver(project, provider, max_context_rounds=1).turn("plan: look")
    assert result.status == "planned"  # a bad request is refused, not repaired
    prompt = provider.requests[1].messages[1].content
    assert "REFUSED[read_file ../../etc/passwd]: unsafe path" in prompt
    assert "REFUSED[read_file .env]: protected path" in prompt
    assert "hunter2" not in prompt
    assert f"FILE[app.py] (sha256={sha(APP)}, lines 2-2):\n    return value.strip()\n" in prompt


async def test_a_patch_that_is_not_a_diff_is_repaired_not_fallen_back(project: Path) -> None:
    provider = ScriptedProvider(
        [plan_answer("app.py"), patch_answer(sha(APP), "replace strip with a guard"),
         patch_answer(sha(APP))],
        default=None,
    )  # fmt: skip
    d = driver(project, provider)
    await d.turn("plan: fix parse")
    result = await d.turn("ok")
    assert result.status == "applied"
    assert "REPAIR_ERR_PATCH_NOT_UNIFIED" in provider.requests[2].messages[-1].content
    assert result.trace["protocol_fallback_attempted"] is False
    assert result.trace["errors"][0]["code"] == "ERR_PATCH_NOT_UNIFIED"
