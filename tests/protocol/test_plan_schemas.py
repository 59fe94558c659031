"""Shipped schemas, their hashes, and the provider variants derived from them."""

from __future__ import annotations

import hashlib
import json
from importlib import resources
from typing import Any

import pytest
from jsonschema import Draft202012Validator

import opsrun.protocol
from opsrun.errors import PlanError
from opsrun.protocol import load_schema, schema_hash

FILES = {1: "llm_response_schema.json", 2: "llm_response_schema_v2.json"}
UNSUPPORTED = {
    "oneOf",
    "allOf",
    "not",
    "if",
    "then",
    "else",
    "minLength",
    "maxLength",
    "pattern",
    "format",
    "minimum",
    "maximum",
    "patternProperties",
    "x_schema_version",
    "$schema",
    "$id",
}


def _nodes(node: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            found.append(item)
            for key, value in item.items():
                if key in ("properties", "$defs"):
                    stack.extend(value.values())
                elif key != "enum":
                    stack.append(value)
        elif isinstance(item, list):
            stack.extend(item)
    return found


@pytest.mark.parametrize("version", [1, 2])
def test_canonical_schema_is_package_data_and_hashed(version: int) -> None:
    raw = (resources.files("opsrun.protocol") / "schemas" / FILES[version]).read_bytes()
    assert schema_hash(version) == hashlib.sha256(raw).hexdigest()
    schema = load_schema(version)
    assert schema == json.loads(raw)
    assert schema["x_schema_version"] == version
    Draft202012Validator.check_schema(schema)
    schema["title"] = "mutated"
    assert load_schema(version)["title"] != "mutated"


def test_kinds_per_version() -> None:
    v1 = load_schema(1)["$defs"]["action"]["properties"]["kind"]["enum"]
    v2 = load_schema(2)["$defs"]["action"]["properties"]["kind"]["enum"]
    assert len(v1) == 5
    assert set(v2) == set(v1) | {"PATCH_FILE", "REPLACE_RANGE"}
    assert load_schema(2)["type"] == "object"


@pytest.mark.parametrize("version", [1, 2])
def test_provider_schema_follows_strict_structured_output_rules(version: int) -> None:
    schema = load_schema(version, provider=True)
    Draft202012Validator.check_schema(schema)
    assert schema["type"] == "object"
    for node in _nodes(schema):
        assert not UNSUPPORTED.intersection(node), node
        types = node.get("type")
        if types == "object" or (isinstance(types, list) and "object" in types):
            assert node["additionalProperties"] is False, node
            assert set(node["required"]) == set(node["properties"]), node


@pytest.mark.parametrize("version", [1, 2])
def test_provider_answers_validate_under_the_canonical_schema(version: int) -> None:
    provider = Draft202012Validator(load_schema(version, provider=True))
    canonical = Draft202012Validator(load_schema(version))
    keys = load_schema(version, provider=True)["properties"]["memory_patch"]["properties"]
    empty: dict[str, Any] = dict.fromkeys(
        ("patch", "base_sha256", "start_line", "end_line") if version == 2 else ()
    )
    answer = {
        "actions": [{"kind": "CREATE_FILE", "path": "a.py", "content": "x\n", **empty}],
        "summary": "done",
        "context_requests": [
            {
                "type": "read_file",
                "path": "a.py",
                "start_line": 1,
                "end_line": 9,
                "query": None,
                "glob": None,
                "source": None,
                "last_n": None,
            }
        ],
        "memory_patch": {**dict.fromkeys(keys), "user.ask_budget": 1},
    }
    assert list(provider.iter_errors(answer)) == []
    assert list(canonical.iter_errors(answer)) == []
    assert opsrun.protocol.parse_plan(json.dumps(answer), version=version).actions


def test_unknown_version_is_refused() -> None:
    for call in (lambda: load_schema(3), lambda: schema_hash(0)):
        with pytest.raises(PlanError) as caught:
            call()
        assert caught.value.code == "ERR_UNKNOWN_VERSION"


def test_public_names_match_all() -> None:
    public = {n for n in dir(opsrun.protocol) if n[0] not in "_@"}
    modules = {"annotations"}
    assert set(opsrun.protocol.__all__) == public - modules
