"""The driver's parts on their own: routing, the whitelist file, metrics, events, prompts."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from opsrun.errors import ApplyError, ConfigError
from opsrun.protocol import (
    REPAIR_HINTS,
    DriverConfig,
    PathPolicy,
    PlanEvent,
    apply_plan,
    fallback_metrics,
    parse_plan,
    preview_plan,
    schema_hash,
    system_prompt,
    validate_plan,
)
from opsrun.protocol._mode import route
from opsrun.protocol._prompts import repair_hint

CONFIG = DriverConfig()


# -- routing ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "saved", "expected"),
    [
        ("plan: fix the import", False, ("plan", "fix the import", "prefix", False)),
        ("PLAN:fix it", True, ("plan", "fix it", "prefix", False)),
        ("apply: add a README", False, ("apply", "add a README", "prefix", False)),
        ("apply: go", True, ("apply", "go", "prefix", True)),
        ("ok", True, ("apply", "", "trigger", True)),
        ("OK!", True, ("apply", "", "trigger", True)),
        ("Ок.", True, ("apply", "", "trigger", True)),
        ("применяй", True, ("apply", "", "trigger", True)),
        ("да", True, ("apply", "", "trigger", True)),
        ("ok", False, ("plan", "ok", "default", False)),
        (
            "please fix the failing test",
            False,
            ("plan", "please fix the failing test", "keyword", False),
        ),
        ("исправь импорт", True, ("plan", "исправь импорт", "keyword", False)),
        ("почини сборку", False, ("plan", "почини сборку", "keyword", False)),
        ("create a Makefile", False, ("apply", "create a Makefile", "keyword", False)),
        ("создай README", False, ("apply", "создай README", "keyword", False)),
        ("what is wrong here?", False, ("plan", "what is wrong here?", "default", False)),
    ],
)
def test_route(message: str, saved: bool, expected: tuple[str, str, str, bool]) -> None:
    r = route(message, has_saved_plan=saved, config=CONFIG)
    assert (r.mode, r.goal, r.reason, r.use_saved_plan) == expected


def test_the_default_mode_is_configurable() -> None:
    config = DriverConfig(default_mode="apply")
    r = route("tidy the docs", has_saved_plan=True, config=config)
    assert (r.mode, r.reason, r.use_saved_plan) == ("apply", "default", True)


@given(st.text(max_size=60), st.booleans(), st.sampled_from(["plan", "apply"]))
def test_a_prefix_always_decides(rest: str, saved: bool, mode: str) -> None:
    r = route(f"{mode}: {rest}", has_saved_plan=saved, config=CONFIG)
    assert r.mode == mode
    assert r.reason == "prefix"
    assert r.goal == rest.strip()


@given(st.text(max_size=60), st.booleans())
def test_routing_is_total(message: str, saved: bool) -> None:
    r = route(message, has_saved_plan=saved, config=CONFIG)
    assert r.mode in ("plan", "apply")
    assert not r.use_saved_plan or saved  # only a saved plan can be carried on


# -- the whitelist file ----------------------------------------------------------------------

SEED_WHITELIST = {
    "allowed_extensions": [".py", ".ts", ".tsx", ".js", ".jsx", ".json", ".md", ".yaml"],
    "allowed_no_extension": ["README", "Makefile", ".gitignore", "Dockerfile", "LICENSE"],
    "forbidden_paths": [".env", "*.key", "*.pem", "node_modules", ".git", "__pycache__"],
    "forbidden_prefixes": ["..", "/"],
}


def _codes(path: str, policy: PathPolicy) -> set[str]:
    text = json.dumps([{"kind": "CREATE_FILE", "path": path, "content": "x\n"}])
    return {v.code for v in validate_plan(parse_plan(text, version=1), policy=policy)}


def test_the_whitelist_file_loads_as_written() -> None:
    policy = PathPolicy.from_whitelist(SEED_WHITELIST)
    assert policy.use_whitelist
    assert policy.whitelist_forbidden == tuple(SEED_WHITELIST["forbidden_paths"])
    assert _codes("src/app.py", policy) == set()
    assert _codes("Makefile", policy) == set()
    assert "ERR_FORBIDDEN_PATH" in _codes("node_modules/x/index.js", policy)
    assert "ERR_FORBIDDEN_PATH" in _codes("src/app.exe", policy)
    assert "ERR_FORBIDDEN_PATH" in _codes("config/.env", policy)


def test_forbidden_prefixes_refuse_paths() -> None:
    policy = PathPolicy.from_whitelist({"forbidden_prefixes": ["build/", "Vendor"]})
    assert "ERR_FORBIDDEN_PATH" in _codes("build/out.py", policy)
    assert "ERR_FORBIDDEN_PATH" in _codes("vendor/lib.py", policy)
    assert _codes("src/build.py", policy) == set()


def test_a_whitelist_with_unknown_keys_or_bad_values_is_refused() -> None:
    with pytest.raises(ConfigError) as unknown:
        PathPolicy.from_whitelist({"allowed_extensions": [".py"], "allow_everything": True})
    assert unknown.value.details["field"] == "allow_everything"
    with pytest.raises(ConfigError):
        PathPolicy.from_whitelist({"forbidden_paths": ".env"})
    with pytest.raises(ConfigError):
        PathPolicy.from_whitelist(["not", "an", "object"])  # type: ignore[arg-type]


# -- events of apply_plan and preview_plan used alone ---------------------------------------


def test_apply_and_preview_report_to_the_same_sink(tmp_path: Path) -> None:
    events: list[PlanEvent] = []
    plan = parse_plan(
        json.dumps({"actions": [{"kind": "CREATE_FILE", "path": "a.md", "content": "a\n"}]})
    )
    items = preview_plan(plan, tmp_path, events=events.append)
    assert [i.path for i in items] == ["a.md"]
    apply_plan(plan, tmp_path, events=events.append)
    assert [e.name for e in events] == ["PREVIEW_READY", "APPLY_SUCCESS"]
    assert events[0].fields["paths"] == 1
    assert events[1].fields["changed"] == 1

    again = parse_plan(
        json.dumps({"actions": [{"kind": "CREATE_FILE", "path": "b.md", "content": "b\n"}]})
    )
    with pytest.raises(ApplyError):
        apply_plan(again, tmp_path, check=lambda root: False, events=events.append)
    assert events[-1].name == "APPLY_ROLLBACK"
    assert not (tmp_path / "b.md").exists()
    with pytest.raises(ApplyError):
        apply_plan(plan, tmp_path, events=events.append)  # a.md exists: refused up front
    assert events[-1].name == "APPLY_FAILED"
    assert events[-1].fields["code"] == "ERR_CREATE_EXISTS"


def test_the_default_sink_logs_one_record_per_event(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    plan = parse_plan(
        json.dumps({"actions": [{"kind": "CREATE_DIR", "path": "docs"}], "summary": "d"})
    )
    with caplog.at_level(logging.INFO, logger="opsrun.protocol"):
        apply_plan(plan, tmp_path)
    records = [r for r in caplog.records if r.name == "opsrun.protocol"]
    assert [r.getMessage().split()[0] for r in records] == ["APPLY_SUCCESS"]
    assert records[0].__dict__["opsrun_event"] == "APPLY_SUCCESS"


def test_a_failing_sink_does_not_break_an_apply(tmp_path: Path) -> None:
    def broken(event: PlanEvent) -> None:
        raise RuntimeError("sink down")

    plan = parse_plan(json.dumps({"actions": [{"kind": "CREATE_DIR", "path": "d"}]}))
    assert apply_plan(plan, tmp_path, events=broken).changed == ("d",)


# -- prompts ---------------------------------------------------------------------------------


def test_system_prompts_carry_the_schema_version_and_hash() -> None:
    v1, v2 = system_prompt(1), system_prompt(2)
    assert f"schema_version=1, schema_hash={schema_hash(1)}" in v1
    assert f"schema_version=2, schema_hash={schema_hash(2)}" in v2
    assert "PATCH_FILE" in v2
    assert "base_sha256" in v2
    assert "1-3 unchanged" in v2
    assert "NO_CHANGES:" in v2
    assert "PATCH_FILE" not in v1


def test_every_hint_names_its_code() -> None:
    for code, hint in REPAIR_HINTS.items():
        assert hint.startswith("REPAIR_" + code + ":")
    assert repair_hint("ERR_PATH_TRAVERSAL").startswith("REPAIR_ERR_PATH:")
    assert repair_hint("ERR_SOMETHING_NEW").startswith("REPAIR_ERR_OTHER:")


# -- metrics ---------------------------------------------------------------------------------


def _trace(
    n: int,
    *,
    mode: str = "apply",
    fallback: str | None = None,
    stage: str = "preview",
    errors: tuple[str, ...] = (),
    status: str = "applied",
) -> dict[str, Any]:
    return {
        "trace_id": f"t{n}",
        "created_at": f"2026-01-01T00:{n // 60:02d}:{n % 60:02d}+00:00",
        "mode": mode,
        "status": status,
        "protocol_fallback_attempted": fallback is not None,
        "protocol_fallback_reason": fallback,
        "protocol_fallback_stage": stage if fallback else None,
        "errors": [{"stage": stage, "code": c} for c in errors],
    }


def test_metrics_against_hand_computed_rates() -> None:
    traces = [_trace(i) for i in range(12)]
    traces += [
        _trace(100, fallback="ERR_NON_UTF8_FILE", stage="validate", errors=("ERR_NON_UTF8_FILE",))
    ]
    traces += [
        _trace(101, fallback="ERR_PATCH_APPLY_FAILED", errors=("ERR_PATCH_APPLY_FAILED",) * 2)
    ]
    traces += [_trace(102, errors=("ERR_PATCH_APPLY_FAILED",))]  # repaired in v2
    traces += [_trace(103, errors=("ERR_V2_UPDATE_EXISTING_FORBIDDEN",))]
    traces += [_trace(104, mode="plan", fallback="ERR_PATCH_APPLY_FAILED")]  # not an APPLY
    m = fallback_metrics(traces, window=100)

    assert m.apply_count == 16
    assert m.fallback_count == 2
    assert m.fallback_rate == pytest.approx(2 / 16)
    assert m.non_utf8_fallbacks == 1
    assert m.fallback_rate_excluding_non_utf8 == pytest.approx(1 / 15)
    assert m.by_reason == {"ERR_NON_UTF8_FILE": 1, "ERR_PATCH_APPLY_FAILED": 1}
    assert m.by_stage == {"validate": 1, "preview": 1}
    assert (m.patch_apply_failed, m.patch_apply_repaired, m.patch_apply_fallbacks) == (2, 1, 1)
    assert m.update_existing_forbidden == 1
    assert not m.ready_for_v2_only
    assert any("only 16 APPLY turns" in u for u in m.unmet)
    assert m.to_dict()["fallback_count"] == 2


def test_graduation_over_a_clean_window() -> None:
    traces = [_trace(i) for i in range(150)]
    traces.append(_trace(-1, fallback="ERR_PATCH_APPLY_FAILED"))  # older than the window
    m = fallback_metrics(traces, window=100)
    assert m.apply_count == 100
    assert m.fallback_count == 0
    assert m.ready_for_v2_only
    assert m.unmet == ()


def test_one_fallback_in_a_hundred_blocks_graduation() -> None:
    traces = [_trace(i) for i in range(99)]
    traces.append(_trace(99, fallback="ERR_PATCH_APPLY_FAILED", errors=("ERR_PATCH_APPLY_FAILED",)))
    m = fallback_metrics(traces)
    assert m.fallback_rate == pytest.approx(0.01)
    assert not m.ready_for_v2_only


def test_metrics_of_nothing() -> None:
    m = fallback_metrics([])
    assert (m.apply_count, m.fallback_rate, m.fallback_rate_excluding_non_utf8) == (0, 0.0, 0.0)


def test_every_emitted_event_name_is_declared() -> None:
    import re
    from pathlib import Path

    from opsrun.protocol import EVENT_NAMES

    source = Path(__file__).resolve().parents[2] / "src" / "opsrun" / "protocol"
    emitted = set()
    for module in source.glob("*.py"):
        text = module.read_text(encoding="utf-8")
        emitted |= set(re.findall(r'emit\(\s*(?:[\w.]+,\s*)?"([A-Z_]+)"', text))
    assert emitted
    assert emitted <= EVENT_NAMES
    docs = (source.parents[2] / "docs" / "driver.md").read_text(encoding="utf-8")
    assert {name for name in EVENT_NAMES if f"`{name}`" not in docs} == set()


def test_event_fields_are_masked(tmp_path: Path) -> None:
    key = "sk-proj-" + "Zx9Qw8Er7Ty6Ui5Op4As3Df2" * 2
    events: list[PlanEvent] = []
    plan = parse_plan(
        json.dumps({"actions": [{"kind": "CREATE_DIR", "path": "d"}], "summary": "s"})
    )
    check = [sys.executable, "-c", f"print('token={key}'); raise SystemExit(2)"]
    with pytest.raises(ApplyError):
        apply_plan(plan, tmp_path, check=check, events=events.append)
    (rollback,) = [e for e in events if e.name == "APPLY_ROLLBACK"]
    assert key not in str(rollback.fields)
    assert len(str(rollback.fields["reason"])) <= 200
