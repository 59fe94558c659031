"""Properties of prompt assembly: deterministic, order-free in its inputs, hash-faithful."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from _support import examples
from opsrun.model import (
    AfterLastUser,
    AfterMessageId,
    AppendAfterLastUser,
    Artifact,
    ArtifactVersion,
    BeforeLastAssistant,
    ChatMessage,
    ChatRole,
    InsertAtDepth,
    MessageVariant,
    PromptInclusion,
    PromptMessage,
    RelativeToAnchor,
    RelativeToEnd,
    SystemUpdate,
    VersionSelector,
)
from opsrun.prompt._effective import build_prompt
from opsrun.prompt._inclusion import assemble_prompt, plan_inclusions

T0 = datetime(2024, 1, 1, tzinfo=UTC)


def builds(model: Any, **fields: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Like st.builds, without hypothesis guessing pydantic's aliased required arguments."""
    return st.fixed_dictionaries(fields).map(lambda kw: model(**kw))


def canonical_hash(messages: list[PromptMessage]) -> str:
    pairs = [[m.role.value, m.content] for m in messages]
    return hashlib.sha256(
        json.dumps(pairs, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    ).hexdigest()


@st.composite
def histories(draw: st.DrawFn) -> list[ChatMessage]:
    roles = draw(st.lists(st.sampled_from([ChatRole.USER, ChatRole.ASSISTANT]), max_size=10))
    roles.append(ChatRole.USER)  # the current user message
    return [
        ChatMessage(
            message_id=f"m{i}",
            chat_id="c",
            branch_id="b",
            role=role,
            variants=(
                MessageVariant(variant_id="v", content=draw(st.sampled_from(["hi", "", "x\ny"]))),
            ),
            selected_variant_id="v",
        )
        for i, role in enumerate(roles)
    ]


anchors = st.one_of(
    st.none(),
    st.just(AfterLastUser()),
    st.just(BeforeLastAssistant()),
    builds(AfterMessageId, message_id=st.sampled_from(["m0", "m2", "m5", "nope"])),
    builds(RelativeToEnd, offset=st.integers(-12, 0),
              role_filter=st.sampled_from(["any", "user", "assistant"])),
    builds(RelativeToAnchor, anchor=st.just(AfterLastUser()), offset=st.integers(-8, 3)),
)  # fmt: skip

inclusions = builds(
    PromptInclusion,
    mode=st.sampled_from(["none", "append_after_last_user", "prepend_system", "as_message"]),
    operation=st.none() | st.sampled_from(["insert", "replace", "wrap", "merge_section"]),
    target=st.none() | st.sampled_from(["system", "timeline", "message_ref"]),
    anchor=anchors,
    place=st.none() | st.sampled_from(["before", "after", "replace", "wrap"]),
    depth_policy=st.sampled_from(["strict_drop", "clamp_to_oldest_kept", "relocate_to_nearest"]),
    phase=st.none()
    | st.sampled_from(["system", "early", "near_anchor", "after_last_user", "tail"]),
    priority=st.integers(-2, 2),
    role=st.sampled_from(["developer", "system", "user", "assistant"]),
    format=st.none() | st.sampled_from(["text", "json", "markdown"]),
    version_selector=st.sampled_from(
        [VersionSelector(), VersionSelector(type="last_n", n=2), VersionSelector(type="all")]
    ),
    section=st.none() | st.just("Notes"),
)

values = st.one_of(
    st.sampled_from(["note", "", "multi\nline", "## Notes\nold"]),
    st.dictionaries(
        st.sampled_from(["pre", "post", "k"]), st.sampled_from(["<", ">", "v"]), max_size=2
    ),
    st.integers(0, 3),
)


@st.composite
def artifact_sets(draw: st.DrawFn) -> list[tuple[int, Artifact]]:
    tags = draw(st.lists(st.sampled_from(list("abcdefgh")), unique=True, max_size=6))
    out = []
    for tag in tags:
        version = draw(st.integers(1, 4))
        out.append(
            (
                draw(st.integers(0, 3)),
                Artifact(
                    tag=tag,
                    usage=draw(st.sampled_from(["prompt_only", "prompt+ui", "ui_only"])),
                    persisted=True,
                    value=draw(values),
                    version=version,
                    history=tuple(
                        ArtifactVersion(version=v, value=draw(values), created_at=T0)
                        for v in range(version - 1, 0, -1)
                    ),
                    prompt_inclusion=draw(st.none() | inclusions),
                ),
            )
        )
    return out


effect_lists = st.lists(
    st.tuples(
        st.sampled_from(["op1", "op2"]),
        st.one_of(
            builds(AppendAfterLastUser, content=st.sampled_from(["e1", "e2"])),
            builds(SystemUpdate, mode=st.sampled_from(["prepend", "append", "replace"]),
                      content=st.sampled_from(["S1", "S2"])),
            builds(InsertAtDepth, depth_from_end=st.integers(-12, 0),
                      content=st.sampled_from(["d1", "d2"])),
        ),
    ),
    max_size=4,
)  # fmt: skip


# Drawing a scenario (pydantic records) is most of each example's time. With up to six
# artifacts and four effects a scenario, half of the profile's examples still draw every
# inclusion mode, anchor and effect kind several times.
SCENARIO_EXAMPLES = settings(max_examples=examples(1 / 2))


@st.composite
def scenarios(draw: st.DrawFn) -> dict[str, Any]:
    history = draw(histories())
    keep = draw(st.integers(1, len(history)))
    return {
        "system": draw(st.sampled_from(["", "sys", "sys\n\n## Notes\nbase"])),
        "history": history,
        "kept": history[len(history) - keep :],
        "artifacts": draw(artifact_sets()),
        "effects": draw(effect_lists),
    }


def assemble(
    s: dict[str, Any], artifacts: list[tuple[int, Artifact]] | None = None
) -> list[PromptMessage]:
    plan = plan_inclusions(
        s["artifacts"] if artifacts is None else artifacts, s["history"], s["kept"]
    )
    return assemble_prompt(s["system"], s["kept"], plan, s["effects"])


@SCENARIO_EXAMPLES
@given(s=scenarios(), data=st.data())
def test_input_order_of_artifacts_never_matters(s: dict[str, Any], data: st.DataObject) -> None:
    shuffled = data.draw(st.permutations(s["artifacts"]))
    assert assemble(s, list(shuffled)) == assemble(s)
    first = plan_inclusions(s["artifacts"], s["history"], s["kept"])
    second = plan_inclusions(list(shuffled), s["history"], s["kept"])
    assert first == second


@SCENARIO_EXAMPLES
@given(s=scenarios())
def test_every_artifact_is_accounted_for(s: dict[str, Any]) -> None:
    plan = plan_inclusions(s["artifacts"], s["history"], s["kept"])
    assert sorted(r.tag for r in plan.records) == sorted(a.tag for _, a in s["artifacts"])
    prompt = assemble_prompt(s["system"], s["kept"], plan, s["effects"])
    included = {r.tag for r in plan.records if r.included}
    from_artifacts = {m.source.tag for m in prompt if m.source and m.source.kind == "artifact"}
    assert from_artifacts <= included
    assert {p.tag for p in plan.parts} == included
    for record in plan.records:
        assert record.included == (record.reason is None)
        if record.included:
            assert record.where
            assert record.versions
    # artifact inclusions never shift the history: kept messages stay in order, one each
    history_ids = [m.source.message_id for m in prompt if m.source and m.source.message_id]
    assert history_ids == [m.message_id for m in s["kept"]]


@SCENARIO_EXAMPLES
@given(s=scenarios())
def test_without_inclusions_it_is_build_prompt(s: dict[str, Any]) -> None:
    assert assemble(s, []) == build_prompt(s["system"], s["kept"], s["effects"])


@SCENARIO_EXAMPLES
@given(a=scenarios(), data=st.data())
def test_prompt_hash_is_equal_exactly_when_role_content_pairs_are(
    a: dict[str, Any], data: st.DataObject
) -> None:
    b = data.draw(
        st.one_of(
            st.just({**a, "artifacts": list(reversed(a["artifacts"]))}),
            st.just({**a, "system": a["system"] + " "}),
            scenarios(),
        )
    )
    pa, pb = assemble(a), assemble(b)
    same = [(m.role, m.content) for m in pa] == [(m.role, m.content) for m in pb]
    assert (canonical_hash(pa) == canonical_hash(pb)) == same
    assert canonical_hash(pa) == canonical_hash(assemble(a))
