"""Artifact inclusions: every form, every depth policy, ordering, and composition with effects.

Prompts are written compactly as ``"role:content"`` strings, ``S``/``D``/``U``/``A`` for
system/developer/user/assistant. The history is ``m0`` … ``m5`` (user, assistant, …), the
current user message is ``m6``; ``keep`` keeps that many newest messages.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from opsrun.model import (
    AfterLastUser,
    AfterMessageId,
    AppendAfterLastUser,
    Artifact,
    ArtifactVersion,
    BeforeLastAssistant,
    ChatMessage,
    ChatRole,
    ContentFormat,
    InsertAtDepth,
    MessageVariant,
    PromptEffect,
    PromptInclusion,
    PromptMessage,
    RelativeToAnchor,
    RelativeToEnd,
    SystemUpdate,
    VersionSelector,
)
from opsrun.prompt._effective import build_prompt
from opsrun.prompt._inclusion import (
    InclusionPlan,
    assemble_prompt,
    merge_section,
    plan_inclusions,
    render_value,
)

SHORT = {"system": "S", "developer": "D", "user": "U", "assistant": "A"}
T0 = datetime(2024, 1, 1, tzinfo=UTC)


def message(index: int, role: ChatRole | None = None) -> ChatMessage:
    return ChatMessage(
        message_id=f"m{index}",
        chat_id="c",
        branch_id="b",
        role=role or (ChatRole.USER if index % 2 == 0 else ChatRole.ASSISTANT),
        variants=(MessageVariant(variant_id="v", content=f"h{index}"),),
        selected_variant_id="v",
    )


HISTORY = [message(i) for i in range(7)]


def art(
    tag: str = "a", value: Any = "X", *, usage: str = "prompt_only", **inclusion: Any
) -> Artifact:
    fields: dict[str, Any] = {}
    for name in ("version", "history", "format"):
        if name in inclusion:
            fields[name] = inclusion.pop(name)
    return Artifact(
        tag=tag,
        usage=usage,
        persisted=True,
        value=value,
        prompt_inclusion=PromptInclusion(**inclusion) if inclusion else None,
        **fields,
    )


def assemble(
    *artifacts: Artifact,
    keep: int = 7,
    effects: list[tuple[str, PromptEffect]] | None = None,
    system: str = "sys",
) -> tuple[list[str], InclusionPlan, list[PromptMessage]]:
    kept = HISTORY[len(HISTORY) - keep :]
    plan = plan_inclusions(list(enumerate(artifacts)), HISTORY, kept)
    prompt = assemble_prompt(system, kept, plan, effects or [])
    return [f"{SHORT[m.role.value]}:{m.content}" for m in prompt], plan, prompt


H = [f"{'U' if i % 2 == 0 else 'A'}:h{i}" for i in range(7)]  # the history, compact


def with_history(*, keep: int = 7, system: str = "S:sys", **inserted: str) -> list[str]:
    """The expected prompt: ``before_mN="D:X"`` / ``after_mN`` / ``tail`` insertions."""
    out = [system] if system else []
    for i in range(7 - keep, 7):
        if f"before_m{i}" in inserted:
            out.append(inserted[f"before_m{i}"])
        out.append(H[i])
        if f"after_m{i}" in inserted:
            out.append(inserted[f"after_m{i}"])
    if "tail" in inserted:
        out.append(inserted["tail"])
    return out


# --- each form -------------------------------------------------------------------------------

FORMS: list[tuple[str, dict[str, Any], list[str], str]] = [
    ("append_after_last_user", {"mode": "append_after_last_user"},
     with_history(after_m6="D:X"), "after:m6"),
    ("prepend_system", {"mode": "prepend_system"},
     with_history(system="S:X\n\nsys"), "system:start"),
    ("as_message", {"mode": "as_message"}, with_history(tail="D:X"), "tail"),
    ("system insert at end", {"mode": "as_message", "target": "system"},
     with_history(system="S:sys\n\nX"), "system:end"),
    ("system replace", {"mode": "prepend_system", "operation": "replace"},
     with_history(system="S:X"), "system:replace"),
    ("insert+place replace is replace", {"mode": "prepend_system", "place": "replace"},
     with_history(system="S:X"), "system:replace"),
    ("relative_to_end -2", {"mode": "as_message", "anchor": RelativeToEnd(offset=-2)},
     with_history(before_m5="D:X"), "before:m5"),
    ("relative_to_end 0 user", {"mode": "as_message",
                                "anchor": RelativeToEnd(offset=0, role_filter="user")},
     with_history(after_m6="D:X"), "after:m6"),
    ("relative_to_end -1 assistant", {"mode": "as_message",
                                      "anchor": RelativeToEnd(offset=-1, role_filter="assistant")},
     with_history(before_m5="D:X"), "before:m5"),
    ("relative_to_end -2 user", {"mode": "as_message",
                                 "anchor": RelativeToEnd(offset=-2, role_filter="user")},
     with_history(before_m4="D:X"), "before:m4"),
    ("before_last_assistant", {"mode": "as_message", "anchor": BeforeLastAssistant()},
     with_history(before_m5="D:X"), "before:m5"),
    ("after_message_id", {"mode": "as_message", "anchor": AfterMessageId(message_id="m2")},
     with_history(after_m2="D:X"), "after:m2"),
    ("explicit place before", {"mode": "as_message", "place": "before",
                               "anchor": AfterMessageId(message_id="m2")},
     with_history(before_m2="D:X"), "before:m2"),
    ("relative_to_anchor", {"mode": "as_message",
                            "anchor": RelativeToAnchor(anchor=AfterLastUser(), offset=-2)},
     with_history(after_m4="D:X"), "after:m4"),
    ("phase early without anchor", {"mode": "as_message", "phase": "early"},
     with_history(before_m0="D:X"), "top"),
    ("phase after_last_user without anchor", {"mode": "as_message", "phase": "after_last_user"},
     with_history(after_m6="D:X"), "after:m6"),
    ("role user", {"mode": "as_message", "role": "user"}, with_history(tail="U:X"), "tail"),
    ("role assistant", {"mode": "append_after_last_user", "role": "assistant"},
     with_history(after_m6="A:X"), "after:m6"),
    ("role system", {"mode": "as_message", "role": "system"}, with_history(tail="S:X"), "tail"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("inclusion", "expected", "where"), [f[1:] for f in FORMS], ids=[f[0] for f in FORMS]
)
def test_inclusion_forms(inclusion: dict[str, Any], expected: list[str], where: str) -> None:
    prompt, plan, messages = assemble(art(**inclusion))
    assert prompt == expected
    (record,) = plan.records
    assert record.included
    assert record.where == where
    artifact_parts = [m for m in messages if m.source and m.source.kind == "artifact"]
    assert artifact_parts, "the artifact's part carries an artifact source"
    assert all(m.source and m.source.tag == "a" and m.source.version == 1 for m in artifact_parts)


def test_message_ref_replace_keeps_role_and_records_the_message() -> None:
    prompt, plan, messages = assemble(
        art(mode="as_message", target="message_ref", operation="replace",
            anchor=AfterMessageId(message_id="m3"))
    )  # fmt: skip
    assert prompt == [*with_history()[:4], "A:X", *with_history()[5:]]
    source = messages[4].source
    assert source is not None
    assert (source.kind, source.tag, source.message_id) == ("artifact", "a", "m3")
    assert plan.records[0].where == "replace:m3"


def test_wrap_system_and_message() -> None:
    value = {"pre": "<<", "post": ">>"}
    prompt, _, _ = assemble(
        art("w1", value, mode="prepend_system", operation="wrap"),
        art("w2", value, mode="as_message", place="wrap", anchor=AfterMessageId(message_id="m1")),
    )
    assert prompt[0] == "S:<<sys>>"
    assert prompt[2] == "A:<<h1>>"


@pytest.mark.parametrize(
    "value", ["text", {"pre": 5}, {"pre": None, "post": ["x"]}, {"post": {"a": 1}}, {"x": "y"}]
)
def test_wrap_needs_pre_post_strings(value: Any) -> None:
    prompt, plan, _ = assemble(art(value=value, mode="prepend_system", operation="wrap"))
    assert plan.records[0].reason == "wrap_needs_pre_post"
    assert prompt[0] == "S:sys"


@pytest.mark.parametrize("offset", [0, -1, -3])
@pytest.mark.parametrize("policy", ["strict_drop", "relocate_to_nearest"])
def test_relative_to_end_without_a_message_of_that_role_is_not_found(
    offset: int, policy: str
) -> None:
    """Only user messages: an assistant anchor does not exist, whatever the offset."""
    users = [message(i, ChatRole.USER) for i in range(3)]
    anchor = RelativeToEnd(offset=offset, role_filter="assistant")
    artifact = art(mode="as_message", anchor=anchor, depth_policy=policy)
    plan = plan_inclusions([(0, artifact)], users, users)
    assert (plan.records[0].included, plan.records[0].reason) == (False, "anchor_not_found")


def test_merge_section_into_system_and_message() -> None:
    system = "Intro\n\n## Rules\nold\nmore old\n\n## Style\nterse"
    prompt, plan, _ = assemble(
        art("r", "new rules", mode="prepend_system", operation="merge_section", section="Rules"),
        art("lore", "dragons", mode="prepend_system", operation="merge_section"),
        art("m", "note", mode="as_message", operation="merge_section",
            anchor=AfterMessageId(message_id="m6")),
        system=system,
    )  # fmt: skip
    assert prompt[0] == "S:Intro\n\n## Rules\nnew rules\n\n## Style\nterse\n\n## lore\ndragons"
    assert prompt[-1] == "U:h6\n\n## m\nnote"
    assert [r.where for r in plan.records] == [
        "system:section:Rules", "system:section:lore", "section:m6:m",
    ]  # fmt: skip


def test_merge_section_ignores_headings_in_fences() -> None:
    text = "```\n## Rules\n```\n## Rules\nold"
    assert merge_section(text, "Rules", "new") == "```\n## Rules\n```\n## Rules\nnew"


@pytest.mark.parametrize(
    ("value", "fmt", "expected"),
    [
        ({"b": 1, "a": ["é", None]}, "json", '{"a":["é",null],"b":1}'),
        ("already text", "json", '"already text"'),
        ({"b": 1, "a": 2}, "text", '{"a":2,"b":1}'),
        (None, "text", ""),
        ("# md", "markdown", "# md"),
        ({"k": 1}, "markdown", '```json\n{"k":1}\n```'),
    ],
)
def test_formats(value: Any, fmt: str, expected: str) -> None:
    assert render_value(value, ContentFormat(fmt)) == expected
    prompt, _, _ = assemble(art(value=value, mode="as_message", format=fmt))
    assert prompt[-1:] == ([f"D:{expected}"] if expected else ["U:h6"])


def test_inclusion_format_overrides_artifact_format() -> None:
    prompt, _, _ = assemble(art(value={"a": 1}, format="markdown", mode="as_message"))
    assert prompt[-1] == 'D:```json\n{"a":1}\n```'


VERSIONED: dict[str, Any] = {
    "value": "v3",
    "version": 3,
    "history": (
        ArtifactVersion(version=2, value="v2", created_at=T0),
        ArtifactVersion(version=1, value="v1", created_at=T0),
    ),
}


@pytest.mark.parametrize(
    ("selector", "contents", "versions"),
    [
        (VersionSelector(type="latest"), ["v3"], [3]),
        (VersionSelector(type="last_n", n=2), ["v3", "v2"], [3, 2]),
        (VersionSelector(type="last_n"), ["v3"], [3]),
        (VersionSelector(type="all"), ["v3", "v2", "v1"], [3, 2, 1]),
    ],
)
def test_version_selectors(
    selector: VersionSelector, contents: list[str], versions: list[int]
) -> None:
    prompt, plan, messages = assemble(
        art(**VERSIONED, mode="as_message", version_selector=selector)
    )
    assert prompt[len(with_history()) :] == [f"D:{c}" for c in contents]
    tail = messages[len(with_history()) :]
    assert [m.source.version for m in tail if m.source] == versions
    assert list(plan.records[0].versions) == versions


def test_versions_join_in_the_system_prompt() -> None:
    prompt, _, _ = assemble(
        art(**VERSIONED, mode="prepend_system", version_selector=VersionSelector(type="all"))
    )
    assert prompt[0] == "S:v3\n\nv2\n\nv1\n\nsys"


# --- dropped -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("artifact", "reason"),
    [
        (art(usage="ui_only", mode="as_message"), "usage_not_in_prompt"),
        (art(usage="internal", mode="as_message"), "usage_not_in_prompt"),
        (art(), "no_prompt_inclusion"),
        (art(mode="none", target="system"), "mode_none"),
        (art(mode="as_message", anchor=AfterMessageId(message_id="gone")), "anchor_not_found"),
        (art(mode="as_message", target="message_ref", operation="replace"), "no_anchor"),
        (art(value="", mode="as_message"), "empty_content"),
    ],
)
def test_dropped(artifact: Artifact, reason: str) -> None:
    prompt, plan, _ = assemble(artifact)
    assert prompt == with_history()
    (record,) = plan.records
    assert not record.included
    assert record.reason == reason


def test_prompt_and_ui_artifacts_enter() -> None:
    _, plan, _ = assemble(art(usage="prompt+ui", mode="as_message"))
    assert plan.records[0].included


# --- depth policies -------------------------------------------------------------------------

# keep=3 keeps m4 m5 m6; the anchor m1 (relative_to_end -6) fell out of the window.
LOST = AfterMessageId(message_id="m1")

DEPTH: list[tuple[str, dict[str, Any], list[str] | None, str | None]] = [
    ("strict_drop", {"depth_policy": "strict_drop"}, None, "anchor_trimmed"),
    ("clamp insert after", {"depth_policy": "clamp_to_oldest_kept"},
     with_history(keep=3, before_m4="D:X"), "before:m4"),
    ("relocate insert after", {"depth_policy": "relocate_to_nearest"},
     with_history(keep=3, after_m4="D:X"), "after:m4"),
    ("relocate insert before", {"depth_policy": "relocate_to_nearest", "place": "before"},
     with_history(keep=3, before_m4="D:X"), "before:m4"),
    ("clamp replace is dropped", {"depth_policy": "clamp_to_oldest_kept", "operation": "replace"},
     None, "anchor_trimmed"),
    ("relocate replace acts on the nearest",
     {"depth_policy": "relocate_to_nearest", "operation": "replace"},
     ["S:sys", "U:X", "A:h5", "U:h6"], "replace:m4"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("extra", "expected", "where"), [d[1:] for d in DEPTH], ids=[d[0] for d in DEPTH]
)
def test_depth_policies_when_the_anchor_was_trimmed(
    extra: dict[str, Any], expected: list[str] | None, where: str
) -> None:
    prompt, plan, _ = assemble(art(mode="as_message", anchor=LOST, **extra), keep=3)
    (record,) = plan.records
    assert record.anchor_message_id == "m1"
    if expected is None:
        assert prompt == with_history(keep=3)
        assert record.reason == where
    else:
        assert prompt == expected
        assert record.where == where
        assert record.depth_policy == extra["depth_policy"]


def test_relative_anchor_lost_to_trimming_uses_the_policy() -> None:
    anchor = RelativeToEnd(offset=-5)  # before m2
    kept_all, _, _ = assemble(art(mode="as_message", anchor=anchor), keep=7)
    assert kept_all == with_history(before_m2="D:X")
    dropped, plan, _ = assemble(art(mode="as_message", anchor=anchor), keep=4)
    assert dropped == with_history(keep=4)
    assert plan.records[0].reason == "anchor_trimmed"
    clamped, _, _ = assemble(
        art(mode="as_message", anchor=anchor, depth_policy="clamp_to_oldest_kept"), keep=4
    )
    assert clamped == with_history(keep=4, before_m3="D:X")


@pytest.mark.parametrize(
    ("anchor", "policy", "expected", "reason"),
    [
        (RelativeToEnd(offset=-10), "strict_drop", None, "anchor_out_of_range"),
        (RelativeToEnd(offset=-10), "clamp_to_oldest_kept", with_history(before_m0="D:X"), None),
        (RelativeToAnchor(anchor=AfterMessageId(message_id="m5"), offset=5),
         "relocate_to_nearest", with_history(after_m6="D:X"), None),
        (RelativeToAnchor(anchor=AfterMessageId(message_id="m5"), offset=5),
         "strict_drop", None, "anchor_out_of_range"),
    ],
)  # fmt: skip
def test_anchors_beyond_the_history(
    anchor: Any, policy: str, expected: list[str] | None, reason: str | None
) -> None:
    prompt, plan, _ = assemble(art(mode="as_message", anchor=anchor, depth_policy=policy))
    assert prompt == (expected or with_history())
    assert plan.records[0].reason == reason


def test_no_history_drops_anchored_inclusions() -> None:
    plan = plan_inclusions([(0, art(mode="as_message", anchor=RelativeToEnd(offset=-1),
                                    depth_policy="clamp_to_oldest_kept"))], [], [])  # fmt: skip
    assert plan.records[0].reason == "no_history"


# --- ordering --------------------------------------------------------------------------------


def test_order_in_one_slot_is_phase_priority_profile_tag_version() -> None:
    prompt, _, _ = assemble(
        art("z", "tail-late", mode="as_message", priority=5),
        art("y", "tail-early", mode="as_message", priority=-1),
        art("b", "same-b", mode="as_message"),
        art("a", "same-a", mode="as_message"),
        art("n", "near", mode="as_message", anchor=RelativeToEnd(offset=0)),
        art("u", "user", mode="append_after_last_user"),
        art("e", "early-phase-at-tail", mode="as_message", phase="early",
            anchor=RelativeToEnd(offset=0)),
    )  # fmt: skip
    assert prompt[len(with_history()) :] == [
        "D:early-phase-at-tail",  # phase early sorts first in the slot after m6
        "D:near",  # near_anchor
        "D:user",  # after_last_user
        "D:tail-early",  # tail, priority -1
        "D:same-b",  # tail, priority 0, profile index 2 before 3
        "D:same-a",
        "D:tail-late",  # priority 5
    ]


def test_same_profile_index_sorts_by_tag() -> None:
    kept = HISTORY
    artifacts = [(0, art("b", "B", mode="as_message")), (0, art("a", "A", mode="as_message"))]
    prompt = assemble_prompt("", kept, plan_inclusions(artifacts, HISTORY, kept), [])
    assert [m.content for m in prompt[-2:]] == ["A", "B"]


def test_system_parts_read_in_order() -> None:
    prompt, _, _ = assemble(
        art("p1", "first", mode="prepend_system"),
        art("p2", "second", mode="prepend_system"),
        art("e1", "end", mode="as_message", target="system"),
        art("r", "replaced", mode="prepend_system", operation="replace", priority=9),
    )
    assert prompt[0] == "S:first\n\nsecond\n\nreplaced\n\nend"


# --- composition with prompt-time effects ----------------------------------------------------


def test_composition_with_effects() -> None:
    effects: list[tuple[str, PromptEffect]] = [
        ("op1", SystemUpdate(mode="prepend", content="EFF|")),
        ("op2", InsertAtDepth(depth_from_end=-2, content="depth2")),
        ("op3", AppendAfterLastUser(content="after-user")),
        ("op4", InsertAtDepth(depth_from_end=0, content="closing")),
        ("op5", InsertAtDepth(depth_from_end=-99, content="top")),
    ]
    prompt, _, messages = assemble(
        art("s", "ART", mode="prepend_system"),
        art("d", "incl-depth2", mode="as_message", anchor=RelativeToEnd(offset=-2)),
        art("u", "incl-user", mode="append_after_last_user"),
        art("t", "incl-tail", mode="as_message"),
        art("e", "incl-top", mode="as_message", phase="early"),
        effects=effects,
    )
    assert (
        prompt
        == [
            "S:EFF|ART\n\nsys",  # inclusions first, then system_update effects
            "D:incl-top",
            "D:top",  # an effect depth beyond the history lands above it, after inclusions
            *H[:5],
            "D:incl-depth2",  # same slot: inclusion, then effect
            "D:depth2",
            H[5],
            H[6],
            "D:incl-user",
            "D:after-user",
            "D:incl-tail",
            "D:closing",  # depthFromEnd = 0 closes the prompt
        ]
    )
    assert messages[0].source is not None
    assert messages[0].source.kind == "effect"


def test_effect_depths_count_history_messages_only() -> None:
    effects: list[tuple[str, PromptEffect]] = [
        ("op", InsertAtDepth(depth_from_end=-1, content="E"))
    ]
    prompt, _, _ = assemble(
        art("a", "A", mode="as_message", anchor=RelativeToEnd(offset=-1)),
        art("b", "B", mode="as_message", anchor=RelativeToEnd(offset=-3)),
        effects=effects,
    )
    assert prompt == [*with_history()[:5], "D:B", *H[4:6], "D:A", "D:E", H[6]]


@pytest.mark.parametrize("keep", [7, 3, 1])
def test_without_artifacts_it_is_build_prompt(keep: int) -> None:
    effects: list[tuple[str, PromptEffect]] = [
        ("op", SystemUpdate(mode="append", content="+")),
        ("op", InsertAtDepth(depth_from_end=-2, content="d")),
        ("op", AppendAfterLastUser(content="a")),
    ]
    kept = HISTORY[7 - keep :]
    plan = plan_inclusions([], HISTORY, kept)
    assert assemble_prompt("sys", kept, plan, effects) == build_prompt("sys", kept, effects)


def test_empty_system_prompt_is_omitted() -> None:
    prompt, _, _ = assemble(system="")
    assert prompt == H


# --- misuse ----------------------------------------------------------------------------------


def test_kept_must_be_a_suffix_of_full() -> None:
    with pytest.raises(ValueError, match="suffix"):
        plan_inclusions([], HISTORY, HISTORY[:3])
    with pytest.raises(ValueError, match="suffix"):
        plan_inclusions([], HISTORY[:2], HISTORY)


def test_plan_must_match_the_kept_history() -> None:
    plan = plan_inclusions([], HISTORY, HISTORY[2:])
    with pytest.raises(ValueError, match="kept messages"):
        assemble_prompt("", HISTORY, plan, [])
    replace = art(mode="as_message", operation="replace", anchor=AfterMessageId(message_id="m6"))
    plan = plan_inclusions([(0, replace)], HISTORY, HISTORY[4:])
    other = [*HISTORY[4:6], message(9, ChatRole.USER)]
    with pytest.raises(ValueError, match="different kept history"):
        assemble_prompt("", other, plan, [])
