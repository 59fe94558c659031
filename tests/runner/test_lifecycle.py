"""Artifact lifecycle: retention across many writes, session view, UI projection, diffs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from opsrun.model import (
    Artifact,
    ArtifactUsage,
    ArtifactVersion,
    ArtifactWrite,
    DurableRetention,
    OverwriteRetention,
    Retention,
    UiPresentation,
    WindowRetention,
)
from opsrun.report import artifact_diff, session_view, ui_projection
from opsrun.runner._artifacts import next_artifact
from opsrun.stores._frozen import freeze

T0 = datetime(2026, 1, 1, tzinfo=UTC)

retentions = st.one_of(
    st.just(OverwriteRetention()),
    st.just(DurableRetention()),
    st.builds(
        WindowRetention,
        max_versions=st.none() | st.integers(min_value=1, max_value=6),
        ttl_ms=st.none() | st.integers(min_value=1, max_value=10_000),
    ),
)


def write(value: int, retention: Retention) -> ArtifactWrite:
    return ArtifactWrite(
        tag="t", value=value, persisted=True, usage=ArtifactUsage.INTERNAL, retention=retention
    )


def expected_history(
    writes: list[tuple[int, datetime]], retention: Retention, now: datetime
) -> list[int]:
    """The reference rule: previous values newest first, filtered by the policy."""
    previous = list(reversed(writes[:-1]))  # newest first, never the current value
    if isinstance(retention, OverwriteRetention):
        return []
    if isinstance(retention, DurableRetention):
        return [v for v, _ in previous]
    assert isinstance(retention, WindowRetention)
    kept: list[int] = []
    for value, at in previous:
        if retention.ttl_ms is not None and at < now - timedelta(milliseconds=retention.ttl_ms):
            continue
        if retention.max_versions is not None and len(kept) >= retention.max_versions:
            continue
        kept.append(value)
    return kept


@given(retention=retentions, steps=st.lists(st.integers(0, 4_000), min_size=1, max_size=25))
def test_history_follows_the_retention_policy(retention: Retention, steps: list[int]) -> None:
    current: Artifact | None = None
    now = T0
    writes: list[tuple[int, datetime]] = []
    pruned_total: list[int] = []
    for value, step in enumerate(steps, start=1):
        now += timedelta(milliseconds=step)
        current, pruned = next_artifact(
            current, write(value, retention), now=now, run_id="r", operation_id="op"
        )
        writes.append((value, now))
        pruned_total.extend(p.version for p in pruned)
        history = [h.value for h in current.history]
        assert current.value == value
        assert current.version == value
        assert history == expected_history(writes, retention, now)
        assert value not in history
        versions = [h.version for h in current.history]
        assert versions == sorted(versions, reverse=True)
        assert all(h.version == h.value for h in current.history)
    assert current is not None
    # Every earlier version is either still in history or was reported pruned, once.
    kept = {h.version for h in current.history}
    assert sorted(pruned_total) == sorted(set(pruned_total))
    assert kept | set(pruned_total) == set(range(1, len(steps)))
    assert not kept & set(pruned_total)


def test_ttl_window_with_an_injected_clock() -> None:
    retention = WindowRetention(ttl_ms=1_000)
    a1, _ = next_artifact(None, write(1, retention), now=T0, run_id="r", operation_id="op")
    a2, _ = next_artifact(
        a1, write(2, retention), now=T0 + timedelta(milliseconds=500), run_id="r", operation_id="o"
    )
    assert [h.value for h in a2.history] == [1]
    a3, pruned = next_artifact(
        a2,
        write(3, retention),
        now=T0 + timedelta(milliseconds=1_200),
        run_id="r",
        operation_id="o",
    )
    # Version 1 was written at T0, older than 1 s at T0+1.2 s; version 2 is still fresh.
    assert [h.value for h in a3.history] == [2]
    assert [p.version for p in pruned] == [1]


def artifact(value: object, history: list[object], presentation: UiPresentation | None) -> Artifact:
    n = len(history) + 1
    return Artifact(
        tag="feed",
        usage=ArtifactUsage.UI_ONLY,
        persisted=True,
        value=value,
        version=n,
        history=tuple(
            ArtifactVersion(version=n - 1 - i, value=v, created_at=T0)
            for i, v in enumerate(history)
        ),
        ui_presentation=presentation,
    )


def test_ui_projection_latest_only_is_the_default() -> None:
    art = artifact({"hp": 8}, [{"hp": 10}], None)
    assert ui_projection(art) == {
        "mode": "latest_only",
        "tag": "feed",
        "version": 2,
        "value": {"hp": 8},
    }


def test_ui_projection_timeline_newest_first_bounded() -> None:
    art = artifact("c", ["b", "a"], UiPresentation(mode="timeline", max_items=2))
    assert ui_projection(art) == {
        "mode": "timeline",
        "tag": "feed",
        "items": [{"version": 3, "value": "c"}, {"version": 2, "value": "b"}],
    }
    unbounded = artifact("c", ["b", "a"], UiPresentation(mode="timeline"))
    assert [i["value"] for i in ui_projection(unbounded)["items"]] == ["c", "b", "a"]


def test_ui_projection_diff() -> None:
    art = artifact(
        {"hp": 8, "loc": "gate"}, [{"hp": 10, "loc": "gate"}], UiPresentation(mode="diff")
    )
    projection = ui_projection(art)
    assert projection["previous"] == {"hp": 10, "loc": "gate"}
    assert projection["previousVersion"] == 1
    assert projection["diff"] == "hp: 10 → 8"
    first = artifact({"hp": 10}, [], UiPresentation(mode="diff"))
    assert ui_projection(first)["previous"] is None
    assert ui_projection(first)["diff"] == 'created: {"hp":10}'


def test_session_view_has_value_history_and_meta_sorted_by_tag() -> None:
    b = artifact("new", ["old"], None).model_copy(update={"tag": "b"})
    a = artifact(1, [], None).model_copy(update={"tag": "a"})
    view = session_view({"b": b, "a": a})
    assert list(view) == ["a", "b"]
    assert view["b"]["value"] == "new"
    assert view["b"]["history"] == ["old"]
    assert view["b"]["meta"]["version"] == 2
    assert view["b"]["meta"]["tag"] == "b"


def test_artifact_diff_forms() -> None:
    assert artifact_diff(None, [1, 2]) == "created: [1,2]"
    assert artifact_diff(5, 5) == "unchanged"
    assert artifact_diff({"a": 1, "b": 2}, {"b": 3, "c": "x"}) == '-a; b: 2 → 3; +c: "x"'
    assert artifact_diff("one\ntwo", "one\nTWO\nthree") == "+2 -1 lines: -two | +TWO | +three"
    assert artifact_diff("a", "b") == '"a" → "b"'
    long = artifact_diff({"k": "x" * 500}, {"k": "y" * 500}, limit=50)
    assert len(long) == 50
    assert long.endswith("…")


def test_artifact_diff_tells_json_values_python_calls_equal() -> None:
    assert artifact_diff(1, True) == "1 → true"
    assert artifact_diff(1, 1.0) == "1 → 1.0"
    assert artifact_diff({"ok": 0, "n": [1]}, {"ok": False, "n": [1]}) == "ok: 0 → false"
    assert artifact_diff(freeze({"n": [1], "m": {"a": 1}}), {"n": [1], "m": {"a": 1}}) == (
        "unchanged"
    )
