"""The JSON schemas of the plan protocol, their hashes, validators and provider variants.

The canonical schemas ship as package data (``schemas/llm_response_schema.json``
for v1, ``schemas/llm_response_schema_v2.json`` for v2) and are what local
validation always uses. Providers with strict structured outputs (OpenAI's
rules) cannot take them as they are, so a *provider* variant is derived in code:

* the root is an object (v1's array-or-object root becomes its object form,
  without ``proposed_changes``);
* ``oneOf`` becomes ``anyOf``;
* every object lists all its properties as required, optional ones are made
  nullable, and ``additionalProperties`` is ``false``;
* keywords such providers refuse (``allOf``, ``not``, ``if``/``then``/``else``,
  ``minLength``, ``pattern``, ``format``, numeric bounds…) are stripped;
* ``memory_patch`` lists the whitelisted keys explicitly.

Any answer valid under the provider variant is valid under the canonical
schema, which then enforces the rules the provider variant had to drop.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
from importlib import resources
from typing import Any, Literal

from jsonschema import Draft202012Validator

from opsrun.errors import PlanError

from ._memory import memory_patch_provider_schema

__all__ = [
    "SCHEMA_FILES",
    "load_schema",
    "schema_hash",
    "schema_validator",
    "validator_for",
]

#: File name of each version's canonical schema inside ``opsrun.protocol.schemas``.
SCHEMA_FILES: dict[int, str] = {1: "llm_response_schema.json", 2: "llm_response_schema_v2.json"}

_STRIPPED = frozenset(
    {
        "$schema",
        "$id",
        "x_schema_version",
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
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minItems",
        "maxItems",
        "uniqueItems",
        "minProperties",
        "maxProperties",
        "patternProperties",
        "propertyNames",
        "unevaluatedProperties",
        "dependentRequired",
        "dependentSchemas",
        "contains",
        "default",
        "examples",
    }
)


def _check_version(version: int) -> Literal[1, 2]:
    if version == 1:
        return 1
    if version == 2:
        return 2
    raise PlanError(
        f"unknown protocol version {version!r}; expected 1 or 2",
        code="ERR_UNKNOWN_VERSION",
        details={"version": repr(version)},
    )


@functools.cache
def _schema_bytes(version: Literal[1, 2]) -> bytes:
    return (resources.files("opsrun.protocol") / "schemas" / SCHEMA_FILES[version]).read_bytes()


@functools.cache
def _canonical(version: Literal[1, 2]) -> str:
    # Cached as text so every caller gets a fresh, independent dict.
    return _schema_bytes(version).decode("utf-8")


def schema_hash(version: int) -> str:
    """Return the sha256 hex digest of the canonical schema file's bytes.

    Raises:
        PlanError: ``ERR_UNKNOWN_VERSION`` if ``version`` is not 1 or 2.
    """
    return hashlib.sha256(_schema_bytes(_check_version(version))).hexdigest()


def load_schema(version: int, *, provider: bool = False) -> dict[str, Any]:
    """Return a fresh copy of a protocol schema.

    Args:
        version: 1 or 2.
        provider: Return the variant derived for strict structured outputs
            instead of the canonical schema.

    Raises:
        PlanError: ``ERR_UNKNOWN_VERSION`` if ``version`` is not 1 or 2.
    """
    v = _check_version(version)
    if provider:
        return copy.deepcopy(_provider(v))
    loaded: dict[str, Any] = json.loads(_canonical(v))
    return loaded


@functools.cache
def schema_validator(version: Literal[1, 2]) -> Draft202012Validator:
    """Return the compiled validator of a canonical schema (built once per version)."""
    schema = json.loads(_canonical(version))
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


@functools.cache
def _v1_branch(branch: Literal["actions", "response"]) -> Draft202012Validator:
    schema = json.loads(_canonical(1))
    del schema["oneOf"]
    schema["$ref"] = f"#/$defs/{branch}"
    return Draft202012Validator(schema)


def validator_for(version: Literal[1, 2], value: object) -> Draft202012Validator:
    """Return the validator to check ``value`` with.

    v1's root ``oneOf`` (array or object) is decided here by the value's JSON
    type, then the matching branch of the same canonical schema is checked.
    This gives the same verdict as the root ``oneOf`` (the branches differ in
    type) without jsonschema describing the failed branch, which costs a
    ``repr`` of the whole answer.
    """
    if version == 1 and isinstance(value, list):
        return _v1_branch("actions")
    if version == 1 and isinstance(value, dict):
        return _v1_branch("response")
    return schema_validator(version)


def _nullable(node: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in node:
        return {"anyOf": [node, {"type": "null"}]}
    if "anyOf" in node:
        options = node["anyOf"]
        if not any(o.get("type") == "null" for o in options):
            node = {**node, "anyOf": [*options, {"type": "null"}]}
        return node
    node = dict(node)
    kind = node.get("type")
    if isinstance(kind, str) and kind != "null":
        node["type"] = [kind, "null"]
    elif isinstance(kind, list) and "null" not in kind:
        node["type"] = [*kind, "null"]
    if "enum" in node and None not in node["enum"]:
        node["enum"] = [*node["enum"], None]
    return node


def _strictify(node: Any) -> Any:
    if isinstance(node, list):
        return [_strictify(item) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _STRIPPED:
            continue
        if key == "oneOf":
            out["anyOf"] = _strictify(value)
        elif key in ("properties", "$defs"):
            out[key] = {name: _strictify(sub) for name, sub in value.items()}
        else:
            out[key] = _strictify(value)
    types = out.get("type")
    is_object = types == "object" or (isinstance(types, list) and "object" in types)
    if is_object or "properties" in out:
        props: dict[str, Any] = out.get("properties", {})
        required = set(node.get("required", ()))
        out["properties"] = {
            name: sub if name in required else _nullable(sub) for name, sub in props.items()
        }
        out["required"] = list(props)
        out["additionalProperties"] = False
    return out


@functools.cache
def _provider(version: Literal[1, 2]) -> dict[str, Any]:
    canonical: dict[str, Any] = json.loads(_canonical(version))
    if version == 1:
        defs = dict(canonical["$defs"])
        root = copy.deepcopy(defs.pop("response"))
        root["properties"].pop("proposed_changes", None)
        root["$defs"] = defs
        root["title"] = canonical["title"]
    else:
        root = canonical
    root["properties"]["memory_patch"] = memory_patch_provider_schema()
    derived: dict[str, Any] = _strictify(root)
    return derived
