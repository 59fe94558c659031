"""parse_plan: LLM answer text → :class:`Plan`, for protocol v1 and v2."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

from jsonschema.exceptions import best_match
from pydantic import TypeAdapter
from pydantic import ValidationError as PydanticValidationError

from opsrun.errors import PlanError

from ._fastschema import matches_schema
from ._jsonsafe import (
    candidate_spans,
    is_control_character_error,
    is_hostile,
    loads_strict_json,
)
from ._limits import PlanLimits
from ._plan import Action, ContextRequest, Plan
from ._schemas import _check_version, validator_for

__all__ = ["json_pointer", "normalize_eol", "parse_plan", "plan_from_json"]

_DEFAULT_LIMITS = PlanLimits()
_PLAN_ADAPTER = TypeAdapter(Plan)


def normalize_eol(text: str) -> str:
    """Return ``text`` with CRLF and lone CR as LF, ending in a newline.

    Empty text stays empty. Never raises.
    """
    if not text:
        return text
    out = text.replace("\r\n", "\n").replace("\r", "\n")
    return out if out.endswith("\n") else out + "\n"


def json_pointer(parts: Iterable[str | int]) -> str:
    """Return the RFC 6901 JSON pointer for a path of keys and indices (``""`` is the root)."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def _schema_error(version: Literal[1, 2], value: Any) -> PlanError | None:
    # The hand-written check answers for valid plans; jsonschema is asked only to
    # describe a failure, so messages and pointers are the schema's own.
    if matches_schema(version, value):
        return None
    validator = validator_for(version, value)
    error = best_match(validator.iter_errors(value))
    if error is None:
        return None
    pointer = json_pointer(error.absolute_path)
    where = pointer or "/"
    return PlanError(
        f"plan does not match the v{version} schema at {where}: {error.message}",
        code="ERR_SCHEMA",
        details={
            "pointer": pointer,
            "schema_path": json_pointer(error.absolute_schema_path),
            "validator": str(error.validator),
            "version": version,
        },
    )


def _actions_of(value: Any) -> tuple[list[Any], Any]:
    """Return ``(raw_actions, object_or_None)`` for a schema-valid v1/v2 value."""
    if isinstance(value, list):
        return value, None
    root_actions = value.get("actions")
    proposed = value.get("proposed_changes") or {}
    nested_actions = proposed.get("actions")
    if root_actions is not None and nested_actions is not None:
        raise PlanError(
            "plan has both actions and proposed_changes.actions; send only one",
            code="ERR_SCHEMA",
            details={"pointer": "/proposed_changes/actions"},
        )
    chosen = root_actions if root_actions is not None else nested_actions
    return list(chosen or ()), value


def _drop_nulls(item: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in item.items() if v is not None}


def _count_actions(value: Any, lim: PlanLimits) -> None:
    """Refuse a plan with more actions (or context requests) than ``lim.max_actions``
    before any schema work, which costs per element."""
    if isinstance(value, list):
        actions: Any = value
    elif isinstance(value, dict):
        actions = value.get("actions")
        proposed = value.get("proposed_changes")
        if actions is None and isinstance(proposed, dict):
            actions = proposed.get("actions")
    else:
        return
    if isinstance(actions, list) and len(actions) > lim.max_actions:
        raise PlanError(
            f"plan has {len(actions)} actions; the limit is {lim.max_actions}",
            code="ERR_TOO_MANY_ACTIONS",
            details={"count": len(actions), "limit": lim.max_actions},
        )
    requests = value.get("context_requests") if isinstance(value, dict) else None
    if isinstance(requests, list) and len(requests) > lim.max_actions:
        raise PlanError(
            f"plan has {len(requests)} context requests; the limit is {lim.max_actions}",
            code="ERR_TOO_MANY_CONTEXT_REQUESTS",
            details={"count": len(requests), "limit": lim.max_actions},
        )


def plan_from_json(value: Any, *, version: int, limits: PlanLimits | None = None) -> Plan:
    """Build a :class:`Plan` from an already-decoded JSON value.

    The value is checked against the canonical schema of ``version`` first (by a
    hand-written check with the same verdict; ``jsonschema`` describes the
    failures); v1 arrays and ``proposed_changes.actions`` objects are normalised.

    Raises:
        PlanError: ``ERR_TOO_MANY_ACTIONS`` / ``ERR_TOO_MANY_CONTEXT_REQUESTS`` (more
            than ``limits.max_actions``, found before any schema work), ``ERR_SCHEMA`` (with
            the JSON pointer of the
            most relevant error in ``details["pointer"]``) or ``ERR_UNKNOWN_VERSION``.
    """
    v = _check_version(version)
    _count_actions(value, limits or _DEFAULT_LIMITS)
    error = _schema_error(v, value)
    if error is not None:
        raise error
    raw_actions, obj = _actions_of(value)
    try:
        # One pass through pydantic for the whole plan; the schema has checked the
        # shapes, so this fails only on what the models refuse beyond it, and the
        # item-by-item path below then names the first such value.
        return _PLAN_ADAPTER.validate_python(
            {"version": v, "actions": raw_actions}
            if obj is None
            else {
                "version": v,
                "actions": raw_actions,
                "summary": obj.get("summary"),
                "context_requests": obj.get("context_requests") or (),
                "memory_patch": obj.get("memory_patch"),
            }
        )
    except PydanticValidationError:
        pass
    try:
        actions = tuple(Action.model_validate(_drop_nulls(a)) for a in raw_actions)
        if obj is None:
            return Plan(version=v, actions=actions)
        requests = tuple(
            ContextRequest.model_validate(_drop_nulls(r)) for r in obj.get("context_requests") or ()
        )
        return Plan(
            version=v,
            actions=actions,
            summary=obj.get("summary"),
            context_requests=requests,
            memory_patch=obj.get("memory_patch"),
        )
    except PydanticValidationError as exc:
        first = exc.errors()[0]
        raise PlanError(
            f"plan does not fit the plan model: {first['msg']}",
            code="ERR_SCHEMA",
            details={"pointer": json_pointer(first["loc"]), "version": v},
        ) from exc


def _eol_plan(plan: Plan) -> Plan:
    actions = tuple(
        a.model_copy(update={"content": normalize_eol(a.content)}) if a.content else a
        for a in plan.actions
    )
    return plan.model_copy(update={"actions": actions})


def parse_plan(
    text: str | bytes,
    *,
    version: int = 2,
    strict: bool = False,
    limits: PlanLimits | None = None,
    eol: bool = False,
) -> Plan:
    """Parse an LLM answer into a :class:`Plan`.

    In strict mode the whole text must be one JSON value. Otherwise the
    candidates are tried in order — the whole text, line-anchored fenced blocks
    tagged ``json`` (any case, three or more backticks), other fenced blocks, then
    the JSON value at each of the first few ``{`` / ``[`` — and the first that
    decodes and matches the schema wins. A candidate whose only fault is raw
    control characters (newlines, tabs) inside strings is decoded again with them
    escaped, and wins if the result matches the schema; the plan then lists the
    repair in :attr:`Plan.repairs`. Strict mode never repairs.

    Args:
        text: The answer; bytes must be UTF-8.
        version: Protocol version, 1 or 2.
        strict: Accept only a bare JSON document.
        limits: Size and JSON limits (defaults: :class:`PlanLimits`).
        eol: Normalise ``content`` line endings with :func:`normalize_eol`.

    Raises:
        PlanError: ``ERR_INPUT_TOO_LARGE``, ``ERR_TOO_MANY_ACTIONS`` and
            ``ERR_TOO_MANY_CONTEXT_REQUESTS`` (checked before the schema, so an
            oversized plan costs little), ``ERR_INVALID_JSON`` (not JSON, too
            deep, over-long numbers, NaN/Infinity, duplicate keys, lone
            surrogates, bad UTF-8, a raw control character inside a string, with
            ``line`` and ``column`` in ``details``), ``ERR_SCHEMA`` or
            ``ERR_UNKNOWN_VERSION``. Nothing else escapes.
    """
    lim = limits or _DEFAULT_LIMITS
    v = _check_version(version)
    if isinstance(text, bytes | bytearray):
        if len(text) > lim.max_input_bytes:
            raise _too_large(len(text), lim)
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise PlanError(
                f"answer is not valid UTF-8 at byte {exc.start}",
                code="ERR_INVALID_JSON",
                details={"offset": exc.start},
            ) from exc
    # Cheap bound first (a character is at most 4 UTF-8 bytes), exact size after.
    if len(text) > lim.max_input_bytes:
        raise _too_large(len(text), lim)
    try:
        # ASCII text (the common case) is its own UTF-8 and holds no surrogate.
        size = len(text) if text.isascii() else len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise PlanError(
            "answer contains a lone UTF-16 surrogate",
            code="ERR_INVALID_JSON",
            details={"offset": exc.start},
        ) from exc
    if size > lim.max_input_bytes:
        raise _too_large(size, lim)
    text = text.removeprefix("\ufeff")

    plan = _parse_strict(text, v, lim) if strict else _parse_best_effort(text, v, lim)
    return _eol_plan(plan) if eol else plan


def _too_large(size: int, lim: PlanLimits) -> PlanError:
    return PlanError(
        f"answer is {size} bytes; the limit is {lim.max_input_bytes}",
        code="ERR_INPUT_TOO_LARGE",
        details={"size": size, "limit": lim.max_input_bytes},
    )


def _parse_strict(text: str, version: Literal[1, 2], lim: PlanLimits) -> Plan:
    return plan_from_json(loads_strict_json(text, lim), version=version, limits=lim)


def _repair_note(error: PlanError) -> str:
    details = error.details
    return (
        f"escaped raw control characters inside JSON strings (the first, "
        f"{details['control_character']}, at line {details['line']}, column {details['column']})"
    )


def _parse_best_effort(text: str, version: Literal[1, 2], lim: PlanLimits) -> Plan:
    # Plain syntax errors are expected (prose around the JSON) and reported only
    # when nothing better is known. A schema error, or a raw control character
    # inside a string (the JSON was real but broken), is reported in preference,
    # the first one in candidate order: fragments found after a broken candidate
    # must not hide why it broke.
    first_json_error: PlanError | None = None
    first_error: PlanError | None = None
    for candidate in candidate_spans(text, lim, repair=True):
        where, value = candidate.where, candidate.value
        if isinstance(value, PlanError):
            if is_hostile(value):
                raise value
            if is_control_character_error(value):
                first_error = first_error or _no_plan(value, where)
            else:
                first_json_error = first_json_error or value
            continue
        try:
            plan = plan_from_json(value, version=version, limits=lim)
        except PlanError as exc:
            if exc.code in ("ERR_TOO_MANY_ACTIONS", "ERR_TOO_MANY_CONTEXT_REQUESTS"):
                raise  # a real plan, too big: no other candidate is looked for
            if first_error is None:
                if candidate.repaired_from is not None:
                    first_error = _no_plan(candidate.repaired_from, where)
                    first_error.details["after_repair"] = exc.message
                else:
                    exc.details["found_in"] = where
                    first_error = exc
            continue
        if candidate.repaired_from is not None:
            plan = plan.model_copy(update={"repairs": (_repair_note(candidate.repaired_from),)})
        return plan
    if first_error is not None:
        raise first_error
    if first_json_error is not None:
        raise _no_plan(first_json_error, None)
    raise PlanError("no JSON plan found in the answer", code="ERR_INVALID_JSON")


def _no_plan(error: PlanError, where: str | None) -> PlanError:
    details = dict(error.details)
    if where is not None:
        details["found_in"] = where
    return PlanError(
        f"no JSON plan found in the answer: {error.message}",
        code="ERR_INVALID_JSON",
        details=details,
    )
