"""Files the model saw only in part, and the v1 fallback: no whole-file UPDATE_FILE may
replace lines the model never saw; a v1 answer asking for context gets another round."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest

from opsrun.ports import LlmRequest
from opsrun.protocol import (
    ContextLimits,
    DriverConfig,
    FileBlock,
    InMemoryMemory,
    PlanDriver,
    PlanEvent,
    validate_plan,
)
from opsrun.protocol._content import elision_line
from opsrun.protocol._diet import cut_middle
from opsrun.protocol._parse import parse_plan
from opsrun.testing import FunctionProvider, ScriptedProvider

pytestmark = pytest.mark.anyio

APP = "def parse(value):\n    return value.strip()\n"
FIXED = "def parse(value):\n    if value is None:\n        return ''\n    return value.strip()\n"
BAD_PATCH = (
    "--- a/app.py\n+++ b/app.py\n@@ -1,2 +1,3 @@\n def parse(other):\n"
    "+    pass\n     return other\n"
)


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def functions(count: int) -> str:
    return "".join(f"def f{i}(x):\n    return x + {i}\n\n" for i in range(count))


def bad_patch(path: str, base: str) -> str:
    patch = (
        f"--- a/{path}\n+++ b/{path}\n@@ -1,2 +1,2 @@\n def nope():\n-    return 0\n+    return 1\n"
    )
    action = {"kind": "PATCH_FILE", "path": path, "base_sha256": base, "patch": patch}
    return json.dumps({"actions": [action], "summary": "patch"})


def update(path: str, content: str) -> str:
    action = {"kind": "UPDATE_FILE", "path": path, "content": content}
    return json.dumps({"actions": [action], "summary": "rewrote"})


def shown_text(request: LlmRequest, path: str) -> tuple[str, str]:
    """The header notes and the text of ``path``'s FILE block in the last user message."""
    user = request.messages[1].content
    header, rest = user.split(f"FILE[{path}] (", 1)[1].split("\n", 1)
    return header, rest.split("\n\nFORMAT:", 1)[0]


def is_v1(request: LlmRequest) -> bool:
    return "Protocol v1" in request.messages[0].content


def make(
    root: Path, provider: Any, events: list[PlanEvent] | None = None, **config: Any
) -> PlanDriver:
    return PlanDriver(
        provider=provider,
        model="m",
        root=root,
        config=DriverConfig(**config),
        events=(events if events is not None else []).append,
        memory=InMemoryMemory(),
    )


def test_file_block_whole() -> None:
    text = "a\nb\nc\n"
    assert FileBlock("f", "0" * 64, 6, text).whole
    assert FileBlock("f", "0" * 64, 6, text, 1, 3).whole  # a range covering every line
    assert not FileBlock("f", "0" * 64, 6, "a\nb\n", 1, 2).whole
    assert not FileBlock("f", "0" * 64, 6, text, truncated=3).whole
    assert FileBlock("f", "0" * 64, 6, None).whole  # not UTF-8: replaced whole or not at all


async def test_v1_update_of_a_file_the_diet_cut_is_refused(tmp_path: Path) -> None:
    big = functions(100)  # about 2,500 characters, cut to 1,000 by the diet
    (tmp_path / "big.py").write_text(big)

    def model(request: LlmRequest) -> str:
        if "FILE[big.py]" not in request.messages[1].content:
            return json.dumps(
                {"actions": [], "context_requests": [{"type": "read_file", "path": "big.py"}]}
            )
        if not is_v1(request):
            return bad_patch("big.py", sha(big))
        _, text = shown_text(request, "big.py")
        return update("big.py", text.replace("return x + 0", "return x - 0", 1))

    provider = FunctionProvider(model)
    result = await make(tmp_path, provider, context=ContextLimits(max_file_chars=1000)).turn(
        "apply: make f0 subtract"
    )

    assert result.status == "failed"
    assert result.error_code == "ERR_FILE_SHOWN_IN_PART"
    assert result.trace["protocol_fallback_attempted"] is True
    assert (tmp_path / "big.py").read_text() == big
    codes = {v.code for v in result.violations}
    assert "ERR_FILE_SHOWN_IN_PART" in codes
    assert "ERR_ELIDED_CONTENT" in codes  # the diet's marker was copied into the content
    v1_prompts = [r for r in provider.requests if is_v1(r)]
    assert len(v1_prompts) == 2  # propose and one repair
    assert "REPAIR_ERR_FILE_SHOWN_IN_PART" in v1_prompts[1].messages[-1].content


async def test_v1_update_of_a_line_range_reads_the_file_whole_first(tmp_path: Path) -> None:
    source = functions(200)  # 600 lines; a traceback shows lines 1-92
    (tmp_path / "mod.py").write_text(source)
    headers: list[str] = []

    def model(request: LlmRequest) -> str:
        header, text = shown_text(request, "mod.py")
        if not is_v1(request):
            assert "lines 1-92" in header
            return bad_patch("mod.py", sha(source))
        headers.append(header)
        return update("mod.py", text.replace("return x + 3", "return int(x) + 3"))

    report = 'Traceback (most recent call last):\n  File "mod.py", line 12, in f3\n'
    result = await make(tmp_path, FunctionProvider(model)).turn(
        "apply: fix the TypeError", report=report
    )

    assert (result.status, result.error_code) == ("applied", None)
    assert headers  # v1 was asked
    assert all("lines" not in h for h in headers)  # and saw the whole file
    after = (tmp_path / "mod.py").read_text()
    assert after == source.replace("return x + 3", "return int(x) + 3")


async def test_v1_update_of_a_line_range_too_big_to_show_whole_is_refused(
    tmp_path: Path,
) -> None:
    source = functions(200)  # about 5,800 characters: more than one file's budget
    (tmp_path / "mod.py").write_text(source)

    def model(request: LlmRequest) -> str:
        if not is_v1(request):
            return bad_patch("mod.py", sha(source))
        _, text = shown_text(request, "mod.py")
        return update("mod.py", text)

    report = 'Traceback (most recent call last):\n  File "mod.py", line 12, in f3\n'
    result = await make(
        tmp_path, FunctionProvider(model), context=ContextLimits(max_file_chars=5000)
    ).turn("apply: fix the TypeError", report=report)

    assert (result.status, result.error_code) == ("failed", "ERR_FILE_SHOWN_IN_PART")
    assert (tmp_path / "mod.py").read_text() == source


def test_the_diets_truncation_marker_is_elided_content() -> None:
    text, removed = cut_middle("x = 1\n" * 1000, 500)
    assert removed > 0
    marker = elision_line(text)
    assert marker is not None
    assert marker.startswith("...[TRUNCATED ")
    patch = (
        "--- a/app.py\n+++ b/app.py\n@@ -1,2 +1,3 @@\n def parse(value):\n"
        f"+{marker}\n     return value.strip()\n"
    )
    action = {"kind": "PATCH_FILE", "path": "app.py", "base_sha256": sha(APP), "patch": patch}
    plan = parse_plan(json.dumps({"actions": [action], "summary": "s"}), version=2)
    assert "ERR_ELIDED_CONTENT" in {v.code for v in validate_plan(plan)}


async def test_v1_answer_asking_for_context_gets_another_round(tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text(APP)
    (tmp_path / "util.py").write_text("X = 1\n")
    plan = json.dumps(
        {
            "actions": [],
            "summary": "Diagnosis: guard None",
            "context_requests": [{"type": "read_file", "path": "app.py"}],
        }
    )
    ask_more = json.dumps(
        {
            "actions": [],
            "summary": "I need util.py first",
            "context_requests": [{"type": "read_file", "path": "util.py"}],
        }
    )
    patch = json.dumps(
        {
            "actions": [
                {
                    "kind": "PATCH_FILE",
                    "path": "app.py",
                    "base_sha256": sha(APP),
                    "patch": BAD_PATCH,
                }
            ],
            "summary": "fix",
        }
    )
    provider = ScriptedProvider([plan, plan, patch, patch, ask_more, update("app.py", FIXED)])
    driver = make(tmp_path, provider)
    assert (await driver.turn("plan: fix parse(None)")).status == "planned"

    result = await driver.turn("ok")

    assert (result.status, result.error_code) == ("applied", None)
    assert (tmp_path / "app.py").read_text() == FIXED
    last = provider.requests[-1]
    assert is_v1(last)
    assert "FILE[util.py]" in last.messages[1].content  # the round v1 asked for
    assert await driver.state.load() is None


async def test_a_first_answer_in_v1_that_asks_for_context_keeps_its_rounds_on_v1(
    tmp_path: Path,
) -> None:
    """The model answered the v2 prompt in v1 form, asking to read a file: the next round
    asks for v1, and its v1 answer applies."""
    (tmp_path / "f1.py").write_text("x1 = 1\n")
    ask = json.dumps(
        {
            "proposed_changes": {"actions": []},
            "summary": "need f1",
            "context_requests": [{"type": "read_file", "path": "f1.py"}],
        }
    )
    edit = json.dumps(
        {
            "proposed_changes": {
                "actions": [{"kind": "UPDATE_FILE", "path": "f1.py", "content": "x1 = 2\n"}]
            },
            "summary": "set x1",
        }
    )
    provider = ScriptedProvider([ask, edit], default=None)
    result = await make(tmp_path, provider).turn("apply: change x1")
    assert (result.status, result.error_code) == ("applied", None)
    assert (tmp_path / "f1.py").read_text() == "x1 = 2\n"
    assert [is_v1(r) for r in provider.requests] == [False, True]
    assert "FILE[f1.py]" in provider.requests[-1].messages[1].content


async def test_v1_answer_asking_for_context_with_no_rounds_left_is_not_no_changes(
    tmp_path: Path,
) -> None:
    (tmp_path / "app.py").write_text(APP)
    (tmp_path / "util.py").write_text("X = 1\n")
    ask_more = json.dumps(
        {
            "actions": [],
            "summary": "I need util.py first",
            "context_requests": [{"type": "read_file", "path": "util.py"}],
        }
    )
    patch = json.dumps(
        {
            "actions": [
                {
                    "kind": "PATCH_FILE",
                    "path": "app.py",
                    "base_sha256": sha(APP),
                    "patch": BAD_PATCH,
                }
            ],
            "summary": "fix",
        }
    )
    ask_again = ask_more.replace("util.py", "other.py")
    provider = ScriptedProvider([patch, patch, ask_more, ask_again, ask_again])
    report = 'File "app.py", line 1'
    result = await make(tmp_path, provider, max_context_rounds=1).turn(
        "apply: fix parse(None)", report=report
    )

    assert result.status == "failed"
    assert result.error_code == "ERR_NO_CHANGES_MARKER"
    assert provider.calls == 5


async def test_the_turn_falls_back_to_v1_at_most_once(tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text(APP)
    events: list[PlanEvent] = []
    bare_v1 = json.dumps([{"kind": "CREATE_FILE", "path": "app.py", "content": "x\n"}])
    patch = json.dumps(
        {
            "actions": [
                {
                    "kind": "PATCH_FILE",
                    "path": "app.py",
                    "base_sha256": sha(APP),
                    "patch": BAD_PATCH,
                }
            ],
            "summary": "fix",
        }
    )
    provider = ScriptedProvider([bare_v1, patch, update("app.py", FIXED)])
    result = await make(tmp_path, provider, events).turn(
        "apply: fix parse", report='File "app.py", line 1'
    )

    assert [e.fields["stage"] for e in events if e.name == "PROTOCOL_FALLBACK"] == ["schema"]
    assert result.trace["protocol_attempts"] == [2, 1]
    assert (result.status, result.error_code) == ("failed", "ERR_PATCH_APPLY_FAILED")
    assert (tmp_path / "app.py").read_text() == APP
    assert provider.calls == 2


def test_shown_in_part_ignores_other_kinds() -> None:
    from opsrun.protocol._driver_check import shown_in_part
    from opsrun.protocol._driver_parts import Round

    action = {"kind": "CREATE_FILE", "path": "a.py", "content": "x\n"}
    plan = parse_plan(json.dumps({"actions": [action], "summary": "s"}), version=1)
    assert shown_in_part(plan, Round("apply", "g", partial={"a.py": 10})) == []
    action = {"kind": "UPDATE_FILE", "path": "a.py", "content": "x\n"}
    plan = parse_plan(json.dumps({"actions": [action], "summary": "s"}), version=1)
    found = shown_in_part(plan, Round("apply", "g", partial={"a.py": 10}))
    assert [(v.code, v.path, v.action_index) for v in found] == [
        ("ERR_FILE_SHOWN_IN_PART", "a.py", 0)
    ]
    assert re.search("shown only in part", found[0].message)


async def test_every_provider_attempt_is_one_call_in_the_trace(tmp_path: Path) -> None:
    from opsrun.errors import ProviderUnavailable, RateLimited

    async def no_wait(seconds: float) -> None:
        return None

    create = json.dumps(
        {"actions": [{"kind": "CREATE_FILE", "path": "R.md", "content": "x\n"}], "summary": "s"}
    )
    provider = ScriptedProvider(
        [RateLimited("slow", retry_after=2.0), ProviderUnavailable("503"), create]
    )
    events: list[PlanEvent] = []
    driver = PlanDriver(
        provider=provider,
        model="m",
        root=tmp_path,
        events=events.append,
        memory=InMemoryMemory(),
        sleep=no_wait,
    )
    result = await driver.turn("apply: add R.md")

    assert result.status == "applied"
    assert provider.calls == 3
    assert [c["outcome"] for c in result.trace["calls"]] == [
        "rate_limited",
        "provider_unavailable",
        "ok",
    ]
    assert len([e for e in events if e.name == "LLM_REQUEST_SENT"]) == 3
