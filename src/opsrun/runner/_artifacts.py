"""Deterministic commit order and artifact versioning (pure functions, no I/O)."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import TypeVar

from ..model import (
    Artifact,
    ArtifactUsage,
    ArtifactVersion,
    ArtifactWrite,
    ContentFormat,
    DurableRetention,
    OverwriteRetention,
    Retention,
    WindowRetention,
)

__all__ = ["apply_retention", "commit_order", "next_artifact"]

T = TypeVar("T")


def commit_order(
    items: Sequence[T],
    *,
    key: Callable[[T], str],
    depends_on: Callable[[T], Iterable[str]],
    order: Callable[[T], float],
) -> list[T]:
    """Order ``items`` for commit: dependencies first, then ``order``, then id.

    Kahn's algorithm with a heap of ready items keyed by ``(order, id)``; edges to
    ids outside ``items`` are ignored (only ``done`` operations commit, and every
    dependency of a ``done`` operation is itself ``done``).

    Raises:
        ValueError: if the dependencies among ``items`` form a cycle.
    """
    if not any(map(depends_on, items)):  # no dependencies at all: by (order, id)
        return sorted(items, key=lambda item: (order(item), key(item)))
    by_id = {key(item): item for item in items}
    waiting: dict[str, set[str]] = {
        k: {d for d in depends_on(item) if d in by_id and d != k} for k, item in by_id.items()
    }
    dependants: dict[str, list[str]] = {k: [] for k in by_id}
    for k, deps in waiting.items():
        for d in deps:
            dependants[d].append(k)
    ready = [(order(by_id[k]), k) for k, deps in waiting.items() if not deps]
    heapq.heapify(ready)
    result: list[T] = []
    while ready:
        _, k = heapq.heappop(ready)
        result.append(by_id[k])
        for child in dependants[k]:
            waiting[child].discard(k)
            if not waiting[child]:
                heapq.heappush(ready, (order(by_id[child]), child))
    if len(result) != len(by_id):
        raise ValueError("dependency cycle among committed operations")
    return result


def apply_retention(
    history: Sequence[ArtifactVersion], retention: Retention, now: datetime
) -> tuple[tuple[ArtifactVersion, ...], tuple[ArtifactVersion, ...]]:
    """Split ``history`` (newest first) into what ``retention`` keeps and what it prunes."""
    if isinstance(retention, OverwriteRetention):
        return (), tuple(history)
    if isinstance(retention, DurableRetention):
        return tuple(history), ()
    assert isinstance(retention, WindowRetention)
    kept: list[ArtifactVersion] = []
    pruned: list[ArtifactVersion] = []
    cutoff = None if retention.ttl_ms is None else now - timedelta(milliseconds=retention.ttl_ms)
    for item in history:
        too_many = retention.max_versions is not None and len(kept) >= retention.max_versions
        too_old = cutoff is not None and item.created_at < cutoff
        (pruned if too_many or too_old else kept).append(item)
    return tuple(kept), tuple(pruned)


def next_artifact(
    current: Artifact | None,
    write: ArtifactWrite,
    *,
    now: datetime,
    run_id: str,
    operation_id: str,
) -> tuple[Artifact, tuple[ArtifactVersion, ...]]:
    """Return the artifact after ``write`` over ``current``, and the versions pruned.

    The previous value moves to the front of ``history``; the retention of the write
    (or else of the current artifact) decides what stays. Run-only artifacts never
    keep history. Fields left None in the write keep the current artifact's setting.
    """
    retention: Retention = write.retention or (
        current.retention if current is not None else OverwriteRetention()
    )
    history: tuple[ArtifactVersion, ...] = ()
    if current is not None:
        previous = ArtifactVersion(
            version=current.version,
            value=current.value,
            created_at=current.updated_at or current.created_at or now,
        )
        history = (previous, *current.history)
    if not write.persisted:
        retention = OverwriteRetention()
    kept, pruned = apply_retention(history, retention, now)
    artifact = Artifact(
        tag=write.tag,
        usage=_keep(write.usage, current, "usage") or ArtifactUsage.INTERNAL,
        semantics=_keep(write.semantics, current, "semantics") or "intermediate",
        persisted=write.persisted,
        value=write.value,
        format=_keep(write.format, current, "format") or ContentFormat.TEXT,
        version=1 if current is None else current.version + 1,
        based_on_version=None if current is None else current.version,
        history=kept,
        retention=retention,
        prompt_inclusion=_keep(write.prompt_inclusion, current, "prompt_inclusion"),
        ui_presentation=_keep(write.ui_presentation, current, "ui_presentation"),
        written_by=operation_id,
        run_id=run_id,
        created_at=now if current is None else (current.created_at or now),
        updated_at=now,
    )
    return artifact, pruned


def _keep(new: T | None, current: Artifact | None, name: str) -> T | None:
    if new is not None or current is None:
        return new
    value: T | None = getattr(current, name)
    return value
