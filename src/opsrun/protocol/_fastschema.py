"""A hand-written check of the canonical plan schemas, for the valid path.

``jsonschema`` walks a plan's 50 actions through ``$ref``, five ``if``/``then``
rules each and a validator object per keyword, which costs about 50 times the
``json.loads`` of the answer. :func:`matches_schema` gives the same verdict as
the canonical schema of each version (``schemas/llm_response_schema*.json``)
with a few dictionary look-ups per action. It only says yes or no: when it says
no, :mod:`._parse` asks ``jsonschema`` for the error so messages and JSON
pointers stay exactly those of the schema.

The rules mirror the schema files keyword by keyword, with jsonschema's type
semantics: ``integer`` is an ``int`` that is not a ``bool``, or a ``float``
with no fractional part; ``array`` is a ``list`` and ``object`` a ``dict``.
A hypothesis property (``tests/protocol/test_fastschema.py``) checks that the
two agree on generated plans, valid or not, for both versions.
"""

from __future__ import annotations

from typing import Any, Literal

__all__ = ["matches_schema"]

_NONE = frozenset[str]()
_DIR_OR_DELETE = frozenset({"CREATE_DIR", "DELETE_FILE", "DELETE_DIR"})

#: v2: the optional action fields each kind may set to something other than null
#: (the schema's ``allOf`` of ``if``/``then`` rules, read the other way round).
_V2_NON_NULL: dict[str, frozenset[str]] = {
    "CREATE_FILE": frozenset({"content"}),
    "UPDATE_FILE": frozenset({"content", "base_sha256"}),
    "PATCH_FILE": frozenset({"patch", "base_sha256"}),
    "REPLACE_RANGE": frozenset({"content", "base_sha256", "start_line", "end_line"}),
    **dict.fromkeys(_DIR_OR_DELETE, _NONE),
}
_V1_NON_NULL: dict[str, frozenset[str]] = {
    kind: frozenset({"content"})
    for kind in ("CREATE_FILE", "CREATE_DIR", "UPDATE_FILE", "DELETE_FILE", "DELETE_DIR")
}
_STRING_FIELDS = frozenset({"content", "patch", "base_sha256"})
_V2_ACTION_KEYS = frozenset(
    {"kind", "path", "content", "patch", "base_sha256", "start_line", "end_line"}
)
_V1_ACTION_KEYS = frozenset({"kind", "path", "content"})
_V2_ROOT_KEYS = frozenset({"actions", "summary", "context_requests", "memory_patch"})
_REQUEST_STRINGS = frozenset({"path", "query", "glob", "source"})
_REQUEST_INTEGERS = frozenset({"start_line", "end_line", "last_n"})
_REQUEST_KEYS = frozenset({"type"}) | _REQUEST_STRINGS | _REQUEST_INTEGERS


def _is_integer(value: object) -> bool:
    if isinstance(value, int):
        return not isinstance(value, bool)
    return isinstance(value, float) and value.is_integer()


def _action_ok(item: object, keys: frozenset[str], non_null: dict[str, frozenset[str]]) -> bool:
    if not isinstance(item, dict) or not item.keys() <= keys:
        return False
    kind = item.get("kind")
    if not isinstance(kind, str) or kind not in non_null or not isinstance(item.get("path"), str):
        return False  # also covers a missing kind or path (``required``)
    allowed = non_null[kind]
    for name, value in item.items():
        if value is None or name == "kind" or name == "path":
            continue
        if name not in allowed:
            return False
        if name in _STRING_FIELDS:
            if not isinstance(value, str):
                return False
        elif not _is_integer(value):
            return False
    return True


def _actions_ok(items: object, keys: frozenset[str], non_null: dict[str, frozenset[str]]) -> bool:
    return isinstance(items, list) and all(_action_ok(item, keys, non_null) for item in items)


def _request_ok(item: object) -> bool:
    if not isinstance(item, dict) or not item.keys() <= _REQUEST_KEYS:
        return False
    if not isinstance(item.get("type"), str):
        return False
    for name, value in item.items():
        if value is None or name == "type":
            continue
        if name in _REQUEST_STRINGS:
            if not isinstance(value, str):
                return False
        elif not _is_integer(value):
            return False
    return True


def _common_ok(value: dict[str, Any]) -> bool:
    """``summary``, ``context_requests`` and ``memory_patch``, the same in both versions."""
    summary = value.get("summary")
    if summary is not None and not isinstance(summary, str):
        return False
    requests = value.get("context_requests")
    if requests is not None and not (
        isinstance(requests, list) and all(_request_ok(r) for r in requests)
    ):
        return False
    memory = value.get("memory_patch")
    return memory is None or isinstance(memory, dict)


def _v2_ok(value: object) -> bool:
    if not isinstance(value, dict) or not value.keys() <= _V2_ROOT_KEYS or "actions" not in value:
        return False
    return _actions_ok(value["actions"], _V2_ACTION_KEYS, _V2_NON_NULL) and _common_ok(value)


def _v1_ok(value: object) -> bool:
    if isinstance(value, list):
        return _actions_ok(value, _V1_ACTION_KEYS, _V1_NON_NULL)
    if not isinstance(value, dict):
        return False
    # The response object allows other keys; only the listed properties are checked.
    actions = value.get("actions")
    if actions is not None and not _actions_ok(actions, _V1_ACTION_KEYS, _V1_NON_NULL):
        return False
    proposed = value.get("proposed_changes")
    if proposed is not None:
        if not isinstance(proposed, dict):
            return False
        nested = proposed.get("actions")
        if nested is not None and not _actions_ok(nested, _V1_ACTION_KEYS, _V1_NON_NULL):
            return False
    return _common_ok(value)


def matches_schema(version: Literal[1, 2], value: object) -> bool:
    """Whether ``value`` is valid under the canonical schema of ``version``.

    Gives the same verdict as ``jsonschema`` with that schema; never raises.
    """
    return _v2_ok(value) if version == 2 else _v1_ok(value)
