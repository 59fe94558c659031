"""Artifacts that outlive a turn: how templates, UIs and reports see them.

Three pure views over stored :class:`~opsrun.model.Artifact` records:

- :func:`session_view`: ``tag -> {value, history, meta}``, the shape operations and
  Liquid templates read as ``art.<tag>``;
- :func:`ui_projection`: what a UI shows for one artifact under its
  ``uiPresentation`` (``latest_only``, ``timeline`` or ``diff``);
- :func:`artifact_diff`: a short, bounded account of a change, recorded with every
  artifact write and shown in the debug report.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from typing import Any, TypeAlias

from ..model import Artifact, UiPresentation
from ..model._base import JsonObject, JsonValue

__all__ = ["SessionView", "artifact_diff", "session_view", "ui_projection"]

SessionView: TypeAlias = dict[str, JsonObject]
"""``tag -> {"value": …, "history": [newest first], "meta": {…}}``."""

_VALUE_PREVIEW = 60
_DIFF_LIMIT = 400


def session_view(artifacts: Mapping[str, Artifact]) -> SessionView:
    """Return the ``art`` mapping templates and operations read, sorted by tag.

    ``history`` holds previous values newest first and never the current value;
    ``meta`` has tag, version, basedOnVersion, usage, semantics, persisted, format,
    writtenBy and updatedAt.
    """
    return {tag: artifacts[tag].view() for tag in sorted(artifacts)}


def ui_projection(artifact: Artifact) -> JsonObject:
    """Return what a UI shows for ``artifact`` under its ``uiPresentation``.

    - ``latest_only`` (the default, for panels): ``{mode, tag, version, value}``;
    - ``timeline`` (feeds): ``{mode, tag, items}`` with ``{version, value}`` items,
      newest first, the current value first, at most ``maxItems``;
    - ``diff``: ``{mode, tag, version, value, previousVersion, previous, diff}`` where
      ``diff`` is :func:`artifact_diff` of the newest history value and the current one
      (``previous`` and ``previousVersion`` are None on the first version).
    """
    presentation = artifact.ui_presentation or UiPresentation()
    base: JsonObject = {"mode": presentation.mode, "tag": artifact.tag}
    if presentation.mode == "timeline":
        items = [{"version": artifact.version, "value": artifact.value}]
        items += [{"version": h.version, "value": h.value} for h in artifact.history]
        if presentation.max_items is not None:
            items = items[: presentation.max_items]
        return {**base, "items": items}
    current = {"version": artifact.version, "value": artifact.value}
    if presentation.mode == "latest_only":
        return {**base, **current}
    previous = artifact.history[0] if artifact.history else None
    return {
        **base,
        **current,
        "previousVersion": previous.version if previous else None,
        "previous": previous.value if previous else None,
        "diff": artifact_diff(previous.value if previous else None, artifact.value),
    }


def artifact_diff(old: JsonValue, new: JsonValue, *, limit: int = _DIFF_LIMIT) -> str:
    """Describe the change from ``old`` to ``new`` in at most ``limit`` characters.

    Objects list changed keys (``+key: value``, ``-key``, ``key: old → new``, sorted by
    key); text gives ``+N -M lines`` and the first changed lines of a unified diff; other
    values give ``old → new``. ``old`` None means the first version (``created: …``).
    Values are shown as compact JSON, each cut to a short preview.
    """
    if old is None:
        text = f"created: {_preview(new)}"
    elif _same(old, new):
        text = "unchanged"
    elif isinstance(old, dict) and isinstance(new, dict):
        text = _dict_diff(old, new)
    elif isinstance(old, str) and isinstance(new, str) and ("\n" in old or "\n" in new):
        text = _text_diff(old, new)
    else:
        text = f"{_preview(old)} → {_preview(new)}"
    return _cut(text, limit)


def _dict_diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    changes: list[str] = []
    for key in sorted(old.keys() | new.keys(), key=str):
        if key not in old:
            changes.append(f"+{key}: {_preview(new[key])}")
        elif key not in new:
            changes.append(f"-{key}")
        elif not _same(old[key], new[key]):
            changes.append(f"{key}: {_preview(old[key])} → {_preview(new[key])}")
    return "; ".join(changes)


def _same(old: Any, new: Any) -> bool:
    """Equal as JSON: Python's ``1 == True == 1.0`` are three different JSON values
    (a stored, read-only dict or list and a plain one are the same)."""
    if old != new or _json_kind(old) != _json_kind(new):
        return False
    if isinstance(old, dict):
        return all(_same(v, new[k]) for k, v in old.items())
    if isinstance(old, list | tuple):
        return all(_same(a, b) for a, b in zip(old, new, strict=True))
    return True


def _json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list | tuple):
        return "array"
    return type(value).__name__


def _text_diff(old: str, new: str) -> str:
    lines = list(difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=0))[
        2:
    ]  # drop the ---/+++ header
    added = sum(1 for line in lines if line.startswith("+"))
    removed = sum(1 for line in lines if line.startswith("-"))
    body = [line for line in lines if not line.startswith("@@")]
    return f"+{added} -{removed} lines: " + " | ".join(body)


def _preview(value: JsonValue) -> str:
    return _cut(_json(value), _VALUE_PREVIEW)


def _json(value: JsonValue) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError):
        return repr(value)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(0, limit - 1)] + "…"
