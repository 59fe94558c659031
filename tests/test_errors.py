"""The error tree: codes, messages and bounded details."""

from __future__ import annotations

import json
from typing import Any

import pytest

from opsrun import errors
from opsrun.errors import (
    ArtifactConflict,
    NotFound,
    OpsrunError,
    PatchError,
    PlanError,
    ProviderError,
    ProviderTimeout,
    RateLimited,
    StoreError,
    bound_details,
)


def test_default_code_and_override() -> None:
    assert OpsrunError("boom").code == "opsrun_error"
    assert ArtifactConflict("stale").code == "artifact_conflict"
    assert PlanError("bad", code="ERR_SCHEMA").code == "ERR_SCHEMA"


def test_str_includes_the_code() -> None:
    err = NotFound("no run 'r1'", details={"runId": "r1"})
    assert str(err) == "[not_found] no run 'r1'"
    assert err.message == "no run 'r1'"
    assert repr(err) == "NotFound(code='not_found', message=\"no run 'r1'\")"


def test_to_dict() -> None:
    err = PatchError("hunk 2 does not apply", code="ERR_BASE_MISMATCH", details={"hunk": 2})
    assert err.to_dict() == {
        "code": "ERR_BASE_MISMATCH",
        "message": "hunk 2 does not apply",
        "details": {"hunk": 2},
    }
    assert json.loads(json.dumps(err.to_dict())) == err.to_dict()
    assert OpsrunError("x").to_dict()["details"] == {}


@pytest.mark.parametrize(
    ("cls", "parents"),
    [
        (NotFound, (StoreError, OpsrunError)),
        (ArtifactConflict, (StoreError, OpsrunError)),
        (ProviderTimeout, (ProviderError, OpsrunError)),
        (RateLimited, (ProviderError, OpsrunError)),
        (PatchError, (PlanError, OpsrunError)),
        (errors.ApplyError, (PlanError, OpsrunError)),
    ],
)
def test_hierarchy(cls: type[OpsrunError], parents: tuple[type[Exception], ...]) -> None:
    err = cls("x")
    for parent in parents:
        assert isinstance(err, parent)
    with pytest.raises(parents[0]):
        raise err


def test_rate_limited_keeps_retry_after() -> None:
    err = RateLimited("slow down", retry_after=2.5, details={"provider": "offline"})
    assert err.retry_after == 2.5
    assert err.code == "rate_limited"
    assert err.details == {"provider": "offline"}
    assert RateLimited("slow down").retry_after is None
    assert RateLimited("x", code="quota").code == "quota"


def test_long_strings_are_cut_at_1024_chars() -> None:
    err = OpsrunError("x", details={"body": "a" * 5000, "short": "b" * 1024})
    body = err.details["body"]
    assert body.startswith("a" * 1024)
    assert body[1024:] == "…[+3976 chars]"
    assert err.details["short"] == "b" * 1024


def test_lists_are_cut_at_50_items() -> None:
    err = OpsrunError("x", details={"items": list(range(120)), "exact": list(range(50))})
    items = err.details["items"]
    assert items[:50] == list(range(50))
    assert items[50:] == ["…+70 more"]
    assert err.details["exact"] == list(range(50))


def test_mappings_are_cut_at_50_keys() -> None:
    err = OpsrunError("x", details={f"k{i:03}": i for i in range(60)})
    assert len(err.details) == 51
    assert err.details["…"] == "+10 more"
    assert err.details["k049"] == 49
    assert "k050" not in err.details


def test_nesting_is_cut_at_depth_4() -> None:
    """The details object and three containers inside it are kept; a fifth level is elided."""
    deep: dict[str, Any] = {"l1": {"l2": {"l3": {"l4": {"l5": "gone"}}}}}
    assert bound_details(deep) == {"l1": {"l2": {"l3": {"l4": "…"}}}}
    assert bound_details({"a": [[[["x"]]]]}) == {"a": [[["…"]]]}
    # Scalars at the last level survive; only containers are elided.
    assert bound_details({"a": [[["x"]]]}) == {"a": [[["x"]]]}
    err = OpsrunError("x", details=deep)
    assert err.details == bound_details(deep)


def test_details_are_json_safe_copies() -> None:
    class Opaque:
        def __repr__(self) -> str:
            return "<opaque>"

    source = {"obj": Opaque(), "tuple": (1, 2), "set": {3}, "n": None, "f": 1.5, "ok": True}
    err = OpsrunError("x", details=source)
    assert err.details == {
        "obj": "<opaque>",
        "tuple": [1, 2],
        "set": [3],
        "n": None,
        "f": 1.5,
        "ok": True,
    }
    json.dumps(err.details)
    source["n"] = "changed"
    assert err.details["n"] is None
    assert bound_details(None) == {}
    assert bound_details({}) == {}


def test_a_long_repr_is_bounded_too() -> None:
    class Loud:
        def __repr__(self) -> str:
            return "z" * 3000

    assert len(bound_details({"v": Loud()})["v"]) < 1100


def test_keys_become_strings() -> None:
    assert bound_details({"m": {1: "a", None: "b"}}) == {"m": {"1": "a", "None": "b"}}


def test_provider_errors_say_whether_a_retry_may_help() -> None:
    from opsrun.errors import ProviderError, ProviderTimeout, ProviderUnavailable, RateLimited

    assert ProviderTimeout("slow").retryable
    assert RateLimited("wait", retry_after=2.0).retryable
    assert ProviderUnavailable("503").retryable
    assert not ProviderError("bad request", code="bad_request").retryable
    assert ProviderError("overloaded", retryable=True).retryable
    assert ProviderUnavailable("down").code == "provider_unavailable"
