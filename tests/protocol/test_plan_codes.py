"""One case per validation code, for each protocol version where the code applies."""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from opsrun.errors import PlanError
from opsrun.protocol import (
    Action,
    ActionKind,
    PathPolicy,
    Plan,
    PlanLimits,
    parse_plan,
    validate_plan,
)

APP = "a = 1\nb = 2\nc = 3\n"
APP_SHA = hashlib.sha256(APP.encode()).hexdigest()
BIN_SHA = hashlib.sha256(b"\xff\xfe\x00bin").hexdigest()
# The seed's own second PATCH_FILE example carries a 65-digit hash.
SEED_BAD_SHA = "0a1b2c3d4e5f60718293a4b5c6d7e8f90123456789abcdef0123456789abcdef0"
HUNK = "--- a/app.py\n+++ b/app.py\n@@ -1,1 +1,1 @@\n-a = 1\n+a = 10\n"


def act(kind: str, path: str, **fields: Any) -> dict[str, Any]:
    return {"kind": kind, "path": path, **fields}


def doc(*actions: dict[str, Any], summary: str | None = "done", **extra: Any) -> dict[str, Any]:
    return {"actions": list(actions), "summary": summary, **extra}


def patch_action(path: str = "app.py", **fields: Any) -> dict[str, Any]:
    base = {"patch": HUNK, "base_sha256": APP_SHA}
    return act("PATCH_FILE", path, **{**base, **fields})


def rr(path: str = "app.py", **fields: Any) -> dict[str, Any]:
    base = {"start_line": 1, "end_line": 2, "content": "x = 0\n", "base_sha256": APP_SHA}
    return act("REPLACE_RANGE", path, **{**base, **fields})


BOTH = (1, 2)
V2 = (2,)
# (code, versions, answer, validate_plan keyword arguments; "root" means the project fixture)
CASES: list[tuple[str, tuple[int, ...], dict[str, Any], dict[str, Any]]] = [
    ("ERR_PATH_EMPTY", BOTH, doc(act("CREATE_DIR", "")), {}),
    ("ERR_PATH_ABSOLUTE", BOTH, doc(act("DELETE_FILE", "/etc/passwd")), {}),
    ("ERR_PATH_ABSOLUTE", BOTH, doc(act("CREATE_DIR", "//")), {}),
    ("ERR_PATH_DRIVE", BOTH, doc(act("CREATE_FILE", "C:\\x.py", content="")), {}),
    ("ERR_PATH_DRIVE", BOTH, doc(act("CREATE_FILE", "C:foo.py", content="")), {}),
    ("ERR_PATH_UNC", BOTH, doc(act("DELETE_FILE", "//server/share/x")), {}),
    ("ERR_PATH_UNC", BOTH, doc(act("DELETE_FILE", "\\\\server\\x")), {}),
    ("ERR_PATH_HOME", BOTH, doc(act("CREATE_DIR", "~/bin")), {}),
    ("ERR_PATH_TRAVERSAL", BOTH, doc(act("CREATE_FILE", "src/../../x", content="")), {}),
    ("ERR_PATH_DOT_SEGMENT", BOTH, doc(act("CREATE_DIR", ".")), {}),
    ("ERR_PATH_DOT_SEGMENT", BOTH, doc(act("CREATE_DIR", "a/./b")), {}),
    ("ERR_PATH_EMPTY_SEGMENT", BOTH, doc(act("CREATE_DIR", "a//b")), {}),
    ("ERR_PATH_TOO_LONG", BOTH, doc(act("CREATE_DIR", "a" * 241)), {}),
    ("ERR_PATH_INVALID_CHAR", BOTH, doc(act("CREATE_DIR", "a\x01b")), {}),
    ("ERR_PATH_INVALID_CHAR", BOTH, doc(act("CREATE_DIR", "a\u202eb")), {}),
    ("ERR_PATH_NOT_PORTABLE", BOTH, doc(act("CREATE_FILE", "aux.txt", content="")), {}),
    ("ERR_PATH_NOT_PORTABLE", BOTH, doc(act("CREATE_DIR", "a/b. ")), {}),
    ("ERR_PATH_NOT_PORTABLE", BOTH, doc(act("CREATE_FILE", "a.py:stream", content="")), {}),
    ("ERR_PATH_NOT_PORTABLE", BOTH, doc(act("CREATE_DIR", "a／b")), {}),
    ("ERR_PATH_TRAVERSAL", BOTH, doc(act("CREATE_DIR", "‥/x")), {}),
    ("ERR_FORBIDDEN_PATH", BOTH, doc(act("CREATE_FILE", "sub/.GiT/config", content="")), {}),
    ("ERR_FORBIDDEN_PATH", BOTH, doc(act("DELETE_DIR", ".opsrun")), {}),
    ("ERR_PATH_COLLISION", BOTH, doc(act("CREATE_DIR", "Docs"), act("CREATE_DIR", "docs")), {}),
    (
        "ERR_PATH_COLLISION",
        BOTH,
        doc(act("CREATE_DIR", "caf\u00e9"), act("CREATE_DIR", "cafe\u0301")),
        {},
    ),
    ("ERR_PROTECTED_PATH", BOTH, doc(act("UPDATE_FILE", ".env", content="A=1\n")), {}),
    ("ERR_PROTECTED_PATH", BOTH, doc(act("DELETE_FILE", "keys/ID_RSA.pub")), {}),
    ("ERR_PROTECTED_PATH", BOTH, doc(act("DELETE_DIR", "config/Secrets")), {}),
    ("ERR_PROTECTED_PATH", V2, doc(patch_action("certs/server.PEM")), {}),
    ("ERR_PROTECTED_PATH", BOTH, doc(act("CREATE_FILE", ".env", content="A=1\n")), {"root": 1}),
    ("ERR_PROTECTED_PATH", BOTH, doc(act("DELETE_DIR", "cfg")), {"root": 1}),
    (
        "ERR_CONTENT_TOO_LARGE",
        BOTH,
        doc(*[act("CREATE_FILE", f"f{i}.txt", content="x" * 900_000) for i in range(6)]),
        {},
    ),
    ("ERR_FILE_TOO_LARGE", BOTH, doc(act("CREATE_FILE", "f.txt", content="x" * (2**20 + 1))), {}),
    ("ERR_CONTENT_REQUIRED", BOTH, doc(act("CREATE_FILE", "a.py")), {}),
    ("ERR_CONTENT_REQUIRED", V2, doc(act("PATCH_FILE", "a.py", base_sha256=APP_SHA)), {}),
    ("ERR_CONTENT_NUL", BOTH, doc(act("CREATE_FILE", "a.py", content="a\u0000b")), {}),
    ("ERR_PSEUDO_BINARY", BOTH, doc(act("CREATE_FILE", "a.py", content="\u0001" * 20 + "ab")), {}),
    (
        "ERR_ACTION_CONFLICT",
        BOTH,
        doc(act("CREATE_FILE", "a.py", content=""), act("UPDATE_FILE", "a.py", content="")),
        {},
    ),
    (
        "ERR_ACTION_CONFLICT",
        BOTH,
        doc(act("DELETE_FILE", "a.py"), act("CREATE_FILE", "a.py", content="")),
        {},
    ),
    (
        "ERR_ACTION_CONFLICT",
        BOTH,
        doc(act("CREATE_FILE", "a", content=""), act("CREATE_FILE", "a/b", content="")),
        {},
    ),
    (
        "ERR_ACTION_CONFLICT",
        BOTH,
        doc(act("DELETE_DIR", "old"), act("CREATE_FILE", "old/new.py", content="")),
        {},
    ),
    (
        "ERR_UPDATE_WITHOUT_BASE",
        BOTH,
        doc(act("UPDATE_FILE", "app.py", content="a = 2\n")),
        {"read_paths": ["other.py"]},
    ),
    ("ERR_UPDATE_WITHOUT_BASE", V2, doc(patch_action()), {"read_paths": []}),
    ("ERR_NO_CHANGES_MARKER", BOTH, doc(summary="nothing to do"), {}),
    ("ERR_NO_CHANGES_MARKER", BOTH, doc(summary=" NO_CHANGES: leading space"), {}),
    ("ERR_PLAN_HAS_ACTIONS", BOTH, doc(act("CREATE_DIR", "src")), {"mode": "plan"}),
    ("ERR_PLAN_SUMMARY_REQUIRED", BOTH, doc(summary=None), {"mode": "plan"}),
    ("ERR_BASE_SHA256_INVALID", V2, doc(patch_action(base_sha256=SEED_BAD_SHA)), {}),
    ("ERR_BASE_SHA256_INVALID", V2, doc(rr(base_sha256="xyz")), {}),
    ("ERR_BASE_SHA256_REQUIRED", V2, doc(patch_action(base_sha256=None)), {}),
    ("ERR_PATCH_NOT_UNIFIED", V2, doc(patch_action(patch="replace a with b")), {}),
    ("ERR_RANGE_INVALID", V2, doc(rr(start_line=5, end_line=2)), {}),
    ("ERR_RANGE_INVALID", V2, doc(rr(start_line=0, end_line=2)), {}),
    ("ERR_RANGE_INVALID", V2, doc(rr(end_line=None)), {}),
    ("ERR_RANGE_INVALID", V2, doc(rr(start_line=2, end_line=9)), {"root": 1}),
    (
        "ERR_V2_UPDATE_EXISTING_FORBIDDEN",
        V2,
        doc(act("UPDATE_FILE", "app.py", content="a = 2\n")),
        {"root": 1},
    ),
    ("ERR_CREATE_EXISTS", BOTH, doc(act("CREATE_FILE", "app.py", content="")), {"root": 1}),
    ("ERR_CREATE_EXISTS", BOTH, doc(act("CREATE_DIR", "app.py")), {"root": 1}),
    ("ERR_BASE_MISMATCH", V2, doc(patch_action(base_sha256="0" * 64)), {"root": 1}),
    ("ERR_BASE_MISMATCH", V2, doc(rr(base_sha256="f" * 64)), {"root": 1}),
    ("ERR_TARGET_MISSING", BOTH, doc(act("DELETE_FILE", "missing.py")), {"root": 1}),
    ("ERR_TARGET_MISSING", V2, doc(patch_action("missing.py")), {"root": 1}),
    ("ERR_TARGET_TYPE", BOTH, doc(act("DELETE_FILE", "docs")), {"root": 1}),
    ("ERR_TARGET_TYPE", BOTH, doc(act("DELETE_DIR", "app.py")), {"root": 1}),
    ("ERR_NON_UTF8_FILE", V2, doc(patch_action("data.bin", base_sha256=BIN_SHA)), {"root": 1}),
    # A link on the path, inside the root or out of it, is refused as apply refuses it.
    ("ERR_PATH_SYMLINK", BOTH, doc(act("CREATE_FILE", "out/x.py", content="")), {"root": 1}),
    ("ERR_PATH_SYMLINK", BOTH, doc(act("DELETE_FILE", "loop")), {"root": 1}),
    ("ERR_PATH_SYMLINK", BOTH, doc(act("DELETE_DIR", "linked")), {"root": 1}),
    ("ERR_PATH_PROTECTED", BOTH, doc(act("DELETE_DIR", "vendored")), {"root": 1}),
    ("ERR_TARGET_TYPE", BOTH, doc(act("DELETE_DIR", "pipes")), {"root": 1}),
    (
        "ERR_FS_UNREADABLE",
        V2,
        doc(patch_action("huge.txt", base_sha256="0" * 64)),
        {"root": 1},
    ),
    (
        "ERR_CONTEXT_REQUEST_INVALID",
        BOTH,
        doc(context_requests=[{"type": "read_file"}], summary="NO_CHANGES: x"),
        {},
    ),
    (
        "ERR_CONTEXT_REQUEST_INVALID",
        BOTH,
        doc(context_requests=[{"type": "read_file", "path": "../etc/passwd"}], summary="p"),
        {"mode": "plan"},
    ),
    (
        "ERR_CONTEXT_REQUEST_INVALID",
        BOTH,
        doc(context_requests=[{"type": "read_file", "path": "deploy/.ENV"}], summary="p"),
        {"mode": "plan"},
    ),
    (
        "ERR_CONTEXT_REQUEST_INVALID",
        BOTH,
        doc(context_requests=[{"type": "telepathy"}], summary="p"),
        {"mode": "plan"},
    ),
    (
        "ERR_CONTEXT_REQUEST_INVALID",
        BOTH,
        doc(context_requests=[{"type": "search", "query": " "}], summary="p"),
        {"mode": "plan"},
    ),
    (
        "ERR_CONTEXT_REQUEST_INVALID",
        BOTH,
        doc(context_requests=[{"type": "logs", "source": "app", "last_n": 0}], summary="p"),
        {"mode": "plan"},
    ),
    (
        "ERR_ELIDED_CONTENT",
        BOTH,
        doc(act("UPDATE_FILE", "a.py", content="def f():\n    # ... existing code ...\n")),
        {},
    ),
    (
        "ERR_ELIDED_CONTENT",
        V2,
        doc(patch_action(patch=HUNK + "+// rest of file unchanged\n")),
        {},
    ),
    ("ERR_ELIDED_CONTENT", V2, doc(rr(content="x = 0\n<!-- ...remaining content -->\n")), {}),
    (
        "ERR_MEMORY_PATCH_UNKNOWN_KEY",
        BOTH,
        doc(summary="NO_CHANGES: x", memory_patch={"user.shell": "zsh"}),
        {},
    ),
    (
        "ERR_MEMORY_PATCH_TYPE",
        BOTH,
        doc(summary="NO_CHANGES: x", memory_patch={"user.ask_budget": "2"}),
        {},
    ),
    (
        "ERR_MEMORY_PATCH_TYPE",
        BOTH,
        doc(summary="NO_CHANGES: x", memory_patch={"project.src_roots": "src"}),
        {},
    ),
]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "app.py").write_text(APP)
    (root / "data.bin").write_bytes(b"\xff\xfe\x00bin")
    (root / "docs").mkdir()
    (root / ".env").write_text("TOKEN=1\n")
    (root / "cfg" / "deep" / "secrets").mkdir(parents=True)
    (root / "cfg" / "deep" / "secrets" / "db.txt").write_text("pw\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, root / "out")
    os.symlink(root / "loop", root / "loop")
    (root / "linked").mkdir()
    os.symlink(root / "app.py", root / "linked" / "to_app.py")  # a link inside the root
    (root / "vendored" / ".git").mkdir(parents=True)
    (root / "pipes").mkdir()
    os.mkfifo(root / "pipes" / "fifo")
    with open(root / "huge.txt", "wb") as huge:  # sparse: no disk space used
        huge.truncate(65 * 1024 * 1024)
    return root


PARAMS = [
    pytest.param(code, version, answer, kwargs, id=f"{code}-v{version}-{n}")
    for n, (code, versions, answer, kwargs) in enumerate(CASES)
    for version in versions
]


@pytest.mark.parametrize(("code", "version", "answer", "kwargs"), PARAMS)
def test_code_is_reported(
    code: str, version: int, answer: dict[str, Any], kwargs: dict[str, Any], project: Path
) -> None:
    plan = parse_plan(json.dumps(answer), version=version, strict=True)
    options = dict(kwargs)
    if options.pop("root", None):
        options["root"] = project
    violations = validate_plan(plan, **options)
    codes = [v.code for v in violations]
    assert code in codes
    assert "ERR_VALIDATION_INTERNAL" not in codes
    hit = next(v for v in violations if v.code == code)
    assert hit.message


def test_whitelist_policy_refuses_names_outside_it() -> None:
    policy = PathPolicy(use_whitelist=True)
    plan = Plan(
        version=2,
        actions=(
            Action(kind=ActionKind.CREATE_FILE, path="tool.exe", content=""),
            Action(kind=ActionKind.CREATE_FILE, path="node_modules/a.js", content=""),
            Action(kind=ActionKind.CREATE_FILE, path="src/ok.py", content=""),
            Action(kind=ActionKind.CREATE_FILE, path="Makefile", content=""),
            Action(kind=ActionKind.CREATE_FILE, path=".env.example", content=""),
        ),
        summary="s",
    )
    found = {(v.action_index, v.code) for v in validate_plan(plan, policy=policy)}
    assert found == {(0, "ERR_FORBIDDEN_PATH"), (1, "ERR_FORBIDDEN_PATH")}
    assert validate_plan(plan) == []


def test_v1_plan_with_v2_kind_and_v2_field_rules() -> None:
    v1 = Plan(version=1, actions=(Action(kind=ActionKind.PATCH_FILE, path="a.py", patch=HUNK),))
    assert "ERR_KIND_NOT_IN_VERSION" in {v.code for v in validate_plan(v1)}
    v2 = Plan(
        version=2,
        actions=(Action(kind=ActionKind.CREATE_FILE, path="a.py", content="", patch=HUNK),),
    )
    assert "ERR_FIELD_NOT_ALLOWED" in {v.code for v in validate_plan(v2)}


def test_mode_invalid_and_never_raises() -> None:
    plan = Plan(version=2, summary="NO_CHANGES: x")
    assert [v.code for v in validate_plan(plan, mode="bogus")] == ["ERR_MODE_INVALID"]  # type: ignore[arg-type]
    internal = validate_plan(None)  # type: ignore[arg-type]
    assert [v.code for v in internal] == ["ERR_VALIDATION_INTERNAL"]


def test_limits_are_values_passed_in() -> None:
    plan = Plan(
        version=2, actions=(Action(kind=ActionKind.CREATE_DIR, path="abcdef"),), summary="s"
    )
    assert validate_plan(plan) == []
    short = PlanLimits(max_path_len=3, max_actions=0)
    assert {v.code for v in validate_plan(plan, limits=short)} == {
        "ERR_PATH_TOO_LONG",
        "ERR_TOO_MANY_ACTIONS",
    }


def test_unknown_memory_key_is_a_warning_unless_policy_blocks() -> None:
    plan = Plan(version=2, summary="NO_CHANGES: x", memory_patch={"user.shell": "zsh"})
    (warning,) = validate_plan(plan)
    assert warning.severity == "warning"
    assert not warning.blocking
    (error,) = validate_plan(plan, policy=PathPolicy(block_unknown_memory_keys=True))
    assert error.blocking


def test_elision_check_is_configurable_and_ignores_plain_code() -> None:
    text = "def f():\n    # ... existing code ...\n    return 1\n"
    plan = Plan(
        version=1, actions=(Action(kind=ActionKind.UPDATE_FILE, path="a.py", content=text),)
    )
    assert [v.code for v in validate_plan(plan)] == ["ERR_ELIDED_CONTENT"]
    assert validate_plan(plan, policy=PathPolicy(check_elided_content=False)) == []
    plain = "class A:\n    def f(self) -> None: ...\n\n# Existing behaviour is kept.\n"
    ok = Plan(version=1, actions=(Action(kind=ActionKind.UPDATE_FILE, path="a.py", content=plain),))
    assert validate_plan(ok) == []
    create = Plan(
        version=1, actions=(Action(kind=ActionKind.CREATE_FILE, path="a.py", content=text),)
    )
    assert validate_plan(create) == []
    strict = PathPolicy(check_elided_in_creates=True)
    assert [v.code for v in validate_plan(create, policy=strict)] == ["ERR_ELIDED_CONTENT"]


def test_all_violations_are_reported_together() -> None:
    plan = Plan(
        version=2,
        actions=(
            Action(kind=ActionKind.CREATE_FILE, path="../a", content="x"),
            Action(kind=ActionKind.DELETE_FILE, path=".env"),
            Action(kind=ActionKind.CREATE_FILE, path="b.py"),
        ),
        context_requests=(),
    )
    found = [(v.action_index, v.code) for v in validate_plan(plan)]
    assert found == [
        (0, "ERR_PATH_TRAVERSAL"),
        (1, "ERR_PROTECTED_PATH"),
        (2, "ERR_CONTENT_REQUIRED"),
    ]


def test_valid_plans_against_a_real_root(project: Path) -> None:
    plan = parse_plan(
        json.dumps(
            doc(
                patch_action(),
                act("CREATE_FILE", "docs/new.md", content="# New\n"),
                act("DELETE_FILE", "data.bin"),
                act("CREATE_DIR", "docs"),
            )
        ),
        version=2,
    )
    assert validate_plan(plan, root=project, read_paths=["app.py", "data.bin"]) == []


def test_error_codes_documented() -> None:
    """Every ERR_* code the protocol modules can produce is listed in docs/error-codes.md."""
    repo = Path(__file__).resolve().parents[2]
    modules = [
        "_validate.py",
        "_paths.py",
        "_fscheck.py",
        "_memory.py",
        "_parse.py",
        "_jsonsafe.py",
        "_schemas.py",
    ]
    source = "".join((repo / "src/opsrun/protocol" / m).read_text() for m in modules)
    used = set(re.findall(r'"(ERR_[A-Z0-9_]+)"', source))
    documented = set(
        re.findall(r"^\| `(ERR_[A-Z0-9_]+)`", (repo / "docs/error-codes.md").read_text(), re.M)
    )
    assert used <= documented
    tested = {c for c, *_ in CASES} | {
        "ERR_KIND_NOT_IN_VERSION",
        "ERR_FIELD_NOT_ALLOWED",
        "ERR_MODE_INVALID",
        "ERR_VALIDATION_INTERNAL",
        # test_oversized_plans_are_refused_while_parsing
        "ERR_TOO_MANY_ACTIONS",
        "ERR_TOO_MANY_CONTEXT_REQUESTS",
    }
    parse_codes = {"ERR_INVALID_JSON", "ERR_SCHEMA", "ERR_INPUT_TOO_LARGE", "ERR_UNKNOWN_VERSION"}
    assert used - parse_codes <= tested


@pytest.mark.parametrize("version", [1, 2])
def test_oversized_plans_are_refused_while_parsing(version: int) -> None:
    many = doc(*[act("CREATE_DIR", f"d{i}") for i in range(201)])
    with pytest.raises(PlanError) as actions:
        parse_plan(json.dumps(many), version=version, strict=True)
    assert actions.value.code == "ERR_TOO_MANY_ACTIONS"
    assert actions.value.details == {"count": 201, "limit": 200}
    asks = doc(context_requests=[{"type": "env"}] * 201, summary="NO_CHANGES: x")
    with pytest.raises(PlanError) as requests:
        parse_plan(json.dumps(asks), version=version)
    assert requests.value.code == "ERR_TOO_MANY_CONTEXT_REQUESTS"
    # a plan built in code is still checked by validation
    plan = Plan(
        version=2,
        actions=tuple(Action(kind=ActionKind.CREATE_DIR, path=f"d{i}") for i in range(201)),
        summary="s",
    )
    assert "ERR_TOO_MANY_ACTIONS" in {v.code for v in validate_plan(plan)}
