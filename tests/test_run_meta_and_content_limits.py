"""``RunMeta`` stores its trigger as a ``Trigger``; captured LLM content over
``max_content_chars`` is cut, never dropped."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from opsrun._telemetry import bounded_messages
from opsrun.model import RunRequest, Trigger
from opsrun.operations import OperationCatalog, RunMeta
from opsrun.redaction import DEFAULT_REDACTOR
from opsrun.runner import Runner
from opsrun.stores import InMemoryStores
from opsrun.telemetry import Telemetry
from opsrun.testing import ScriptedMainLlm

pytestmark = pytest.mark.anyio

REPLY = "The capital of France is Paris, and has been for a very long time."
ROLES = ("system", "developer", "user", "assistant")
"""Every role opsrun sends to a provider."""


def run_meta(trigger: Any) -> RunMeta:
    """A ``RunMeta`` with ``trigger`` as given (typed ``Any``: a test passes strings)."""
    return RunMeta(
        run_id="r1",
        trigger=trigger,
        chat_id="c1",
        branch_id="main",
        user_message_id="m1",
        profile_id=None,
        session_key=None,
    )


# -- RunMeta -----------------------------------------------------------------------------


@pytest.mark.parametrize("trigger", list(Trigger))
def test_run_meta_turns_a_trigger_string_into_its_trigger(trigger: Trigger) -> None:
    meta = run_meta(trigger.value)
    assert meta.trigger is trigger
    assert meta.as_dict()["trigger"] == trigger.value


def test_run_meta_keeps_a_trigger_as_given() -> None:
    assert run_meta(Trigger.REGENERATE).trigger is Trigger.REGENERATE


@pytest.mark.parametrize("trigger", ["Generate", "gen", "", None, 1])
def test_run_meta_refuses_what_is_no_trigger(trigger: Any) -> None:
    with pytest.raises(ValueError, match="'generate', 'regenerate'") as info:
        run_meta(trigger)
    assert "RunMeta.trigger" in str(info.value)


# -- content over the limit --------------------------------------------------------------


async def reply_span_attributes(limit: int) -> dict[str, Any]:
    """The attributes of the main LLM span of one run answering ``REPLY``, content
    captured with ``max_content_chars=limit``."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    runner = Runner(
        catalog=OperationCatalog(),
        stores=InMemoryStores(),
        main_llm=ScriptedMainLlm([REPLY]),
        telemetry=Telemetry(
            tracer_provider=provider, capture_content=True, max_content_chars=limit
        ),
    )
    await runner.run(RunRequest(trigger="generate", chat_id="c", user_message="Capital?"))
    [span] = [s for s in exporter.get_finished_spans() if s.name == "chat"]
    return dict(span.attributes or {})


@pytest.mark.parametrize("limit", [64, 72, 85])
async def test_a_reply_over_a_small_limit_is_cut_not_dropped(limit: int) -> None:
    attributes = await reply_span_attributes(limit)
    text = attributes["gen_ai.output.messages"]
    assert len(text) <= limit
    [message] = json.loads(text)
    assert message["role"] == "assistant"
    content = message["parts"][0]["content"]
    assert content.endswith("…")
    assert len(content) >= 3  # some of the reply's text, not only the ellipsis
    assert REPLY.startswith(content[:-1])
    assert attributes["opsrun.content.truncated"] is True


async def test_a_reply_keeps_its_finish_reason_when_text_fits_beside_it() -> None:
    attributes = await reply_span_attributes(110)
    [message] = json.loads(attributes["gen_ai.output.messages"])
    assert message["finish_reason"] == "stop"
    assert REPLY.startswith(message["parts"][0]["content"][:-1])


def test_a_finish_reason_too_long_for_the_limit_gives_way_to_the_text() -> None:
    text, cut = bounded_messages(
        [("assistant", "done")], redactor=DEFAULT_REDACTOR, limit=200, finish_reason="x" * 300
    )
    [message] = json.loads(text)
    assert message == {"role": "assistant", "parts": [{"type": "text", "content": "done"}]}
    assert cut is True


@given(
    messages=st.lists(
        st.tuples(st.sampled_from(ROLES), st.text(max_size=300)), min_size=1, max_size=6
    ),
    limit=st.integers(min_value=64, max_value=400),
    finish_reason=st.sampled_from([None, "stop", "length", "content_filter", "x" * 120]),
)
def test_the_newest_message_is_never_dropped(
    messages: list[tuple[str, str]], limit: int, finish_reason: str | None
) -> None:
    text, cut = bounded_messages(
        messages, redactor=DEFAULT_REDACTOR, limit=limit, finish_reason=finish_reason
    )
    assert len(text) <= limit
    kept = json.loads(text)
    assert kept, "the newest message was dropped"
    newest = kept[-1]
    assert newest["role"] == messages[-1][0]
    content = newest["parts"][0]["content"]
    whole = content == DEFAULT_REDACTOR.redact(messages[-1][1])
    if "finish_reason" in newest and not whole:
        assert len(content) >= 2, "the finish reason took the room of all the text"
    if not cut:
        assert len(kept) == len(messages)
        assert whole
        assert newest.get("finish_reason") == finish_reason


def test_a_text_with_escapes_keeps_what_fits() -> None:
    # "\x07" takes 6 characters in JSON: cutting it must not cut the "0" before it too.
    text, cut = bounded_messages([("system", "0\x07")], redactor=DEFAULT_REDACTOR, limit=64)
    assert json.loads(text)[0]["parts"][0]["content"] == "0…"
    assert cut is True


@given(
    role=st.sampled_from(ROLES),
    content=st.text(alphabet=st.sampled_from('ab"\\\n\x07é'), max_size=200),
    limit=st.integers(min_value=64, max_value=300),
)
def test_a_cut_message_keeps_the_longest_text_that_fits(
    role: str, content: str, limit: int
) -> None:
    text, cut = bounded_messages([(role, content)], redactor=DEFAULT_REDACTOR, limit=limit)
    kept = json.loads(text)[0]["parts"][0]["content"]
    if not cut:
        assert kept == content
        return
    prefix = kept.removesuffix("…")
    assert content.startswith(prefix)
    one_more = json.dumps(
        [{"role": role, "parts": [{"type": "text", "content": content[: len(prefix) + 1] + "…"}]}],
        ensure_ascii=False,
        separators=(",", ":"),
    )
    assert len(one_more) > limit
