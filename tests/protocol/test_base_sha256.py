"""A base_sha256 is exactly 64 hex digits wherever it is checked: no trailing newline."""

from __future__ import annotations

from pathlib import Path

import pytest

from opsrun.errors import ApplyError, PatchError, PlanError
from opsrun.protocol import (
    Action,
    ActionKind,
    Plan,
    apply_plan,
    check_base_sha256,
    preview_plan,
    sha256_hex,
    validate_plan,
)

TEXT = b"a = 1\n"
PATCH = "@@ -1 +1 @@\n-a = 1\n+a = 2\n"
DIGEST = sha256_hex(TEXT)
NOT_QUITE = [DIGEST + "\n", "a" * 64 + "\n", DIGEST + " ", DIGEST[:-1], DIGEST + "0", ""]


def plan_with(base_sha256: str) -> Plan:
    action = Action(kind=ActionKind.PATCH_FILE, path="a.py", patch=PATCH, base_sha256=base_sha256)
    return Plan(version=2, summary="bump a", actions=(action,))


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "a.py").write_bytes(TEXT)
    return tmp_path


@pytest.mark.parametrize("value", [DIGEST, DIGEST.upper()])
def test_a_real_digest_is_accepted_everywhere(root: Path, value: str) -> None:
    check_base_sha256(TEXT, value)
    assert validate_plan(plan_with(value), root=root) == []
    assert [item.path for item in preview_plan(plan_with(value), root)] == ["a.py"]


@pytest.mark.parametrize("value", NOT_QUITE)
def test_check_base_sha256_refuses(value: str) -> None:
    with pytest.raises(PatchError) as info:
        check_base_sha256(TEXT, value, path="a.py")
    assert info.value.code == "ERR_BASE_SHA256_INVALID"


@pytest.mark.parametrize("value", NOT_QUITE)
@pytest.mark.parametrize("with_root", [False, True], ids=["lexical", "on-disk"])
def test_validate_plan_refuses(root: Path, value: str, with_root: bool) -> None:
    found = validate_plan(plan_with(value), root=root if with_root else None)
    assert [v.code for v in found] == ["ERR_BASE_SHA256_INVALID"]


@pytest.mark.parametrize("value", NOT_QUITE)
def test_preview_and_apply_refuse_and_write_nothing(root: Path, value: str) -> None:
    with pytest.raises(PlanError) as previewed:
        preview_plan(plan_with(value), root)
    assert previewed.value.code == "ERR_BASE_SHA256_INVALID"
    with pytest.raises(ApplyError) as applied:
        apply_plan(plan_with(value), root)
    assert applied.value.code == "ERR_BASE_SHA256_INVALID"
    assert (root / "a.py").read_bytes() == TEXT
