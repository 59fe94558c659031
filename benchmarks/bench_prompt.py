"""Cost of prompt assembly: ``effective_prompt`` vs plain concatenation.

Builds one prompt (trim, inclusion plan, assembly) from 500 history messages and 50
artifacts with inclusions (every
shorthand, anchors at depth, a trimmed anchor with a depth policy, versions, json and
markdown formats, a merged section) plus a few prompt-time effects, and compares it, in
the same run, with two baselines over the same strings:

* ``messages``: the same system text, artifact texts and history texts put into the same
  number of ``PromptMessage`` objects by plain concatenation (no placement logic) —
  the cost any assembly pays to produce its output; the target is a ratio of at most 5;
* ``join``: one ``"".join`` of those strings, the floor of string handling in Python.

Timings are CPU time of this process (``time.process_time``), medians of interleaved
rounds.

Run: ``.venv/bin/python benchmarks/bench_prompt.py``
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from opsrun.model import (
    AfterMessageId,
    AppendAfterLastUser,
    Artifact,
    ArtifactVersion,
    ChatMessage,
    ChatRole,
    DomainRole,
    InsertAtDepth,
    MessageVariant,
    PromptEffect,
    PromptInclusion,
    PromptMessage,
    PromptSource,
    RelativeToEnd,
    SystemUpdate,
    VersionSelector,
)
from opsrun.prompt import HistoryWindow, effective_prompt, trim_history

T0 = datetime(2024, 1, 1, tzinfo=UTC)


def make_history(n: int = 500) -> list[ChatMessage]:
    """``n`` messages alternating user / assistant, ending with the current user message."""
    return [
        ChatMessage(
            message_id=f"m{i}",
            chat_id="c",
            branch_id="b",
            role=ChatRole.USER if (n - 1 - i) % 2 == 0 else ChatRole.ASSISTANT,
            variants=(MessageVariant(variant_id="v", content=f"message {i} " + "words " * 40),),
            selected_variant_id="v",
        )
        for i in range(n)
    ]


def make_artifacts(n: int = 50) -> list[tuple[int, Artifact]]:
    forms: list[dict[str, Any]] = [
        {"mode": "append_after_last_user"},
        {"mode": "prepend_system"},
        {"mode": "as_message"},
        {"mode": "as_message", "anchor": RelativeToEnd(offset=-4)},
        {"mode": "as_message", "anchor": RelativeToEnd(offset=-2, role_filter="user"),
         "format": "json"},
        {"mode": "as_message", "anchor": AfterMessageId(message_id="m3"),
         "depth_policy": "clamp_to_oldest_kept"},
        {"mode": "prepend_system", "operation": "merge_section"},
        {"mode": "as_message", "version_selector": VersionSelector(type="last_n", n=3),
         "format": "markdown"},
    ]  # fmt: skip
    out = []
    for i in range(n):
        value: Any = (
            {"hp": i, "notes": ["x"] * 5, "name": f"npc {i}"}
            if i % 3 == 0
            else f"artifact {i} " * 12
        )
        out.append(
            (
                i % 7,
                Artifact(
                    tag=f"tag{i}",
                    usage="prompt_only",
                    persisted=True,
                    value=value,
                    version=4,
                    history=tuple(
                        ArtifactVersion(version=v, value=value, created_at=T0) for v in (3, 2, 1)
                    ),
                    prompt_inclusion=PromptInclusion(priority=i % 3, **forms[i % len(forms)]),
                ),
            )
        )
    return out


EFFECTS: list[tuple[str, PromptEffect]] = [
    ("op1", SystemUpdate(mode="append", content="\nBe brief.")),
    ("op2", InsertAtDepth(depth_from_end=-3, content="depth note")),
    ("op3", AppendAfterLastUser(content="after user")),
]
SYSTEM = "You are a narrator.\n\n## Rules\nStay in character."


WINDOW = HistoryWindow(max_messages=480)


def engine(history: list[ChatMessage], artifacts: list[tuple[int, Artifact]]) -> int:
    return len(
        effective_prompt(SYSTEM, history, EFFECTS, artifacts=artifacts, window=WINDOW).messages
    )


def naive_messages(history: list[ChatMessage], texts: list[str]) -> int:
    system = "\n\n".join([*texts[:6], SYSTEM])
    out = [
        PromptMessage(role=DomainRole.SYSTEM, content=system, source=PromptSource(kind="system"))
    ]
    out.extend(
        PromptMessage(
            role=DomainRole(m.role.value),
            content=m.prompt_text,
            source=PromptSource(kind="history", message_id=m.message_id),
        )
        for m in history
    )
    out.extend(
        PromptMessage(role=DomainRole.DEVELOPER, content=t, source=PromptSource(kind="artifact"))
        for t in texts[6:]
    )
    return len(out)


def naive_join(history: list[ChatMessage], texts: list[str]) -> int:
    return len("".join([SYSTEM, *texts, *(m.prompt_text for m in history)]))


def median_times(fns: list[Callable[[], int]], repeat: int = 7, number: int = 20) -> list[float]:
    """CPU seconds per call of each function: median of ``repeat`` interleaved rounds."""
    timings: list[list[float]] = [[] for _ in fns]
    for fn in fns:
        fn()  # warm up
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            start = time.process_time()
            for _ in range(number):
                fn()
            timings[i].append((time.process_time() - start) / number)
    return [statistics.median(t) for t in timings]


def main() -> None:
    history = make_history()
    artifacts = make_artifacts()
    prompt = effective_prompt(SYSTEM, history, EFFECTS, artifacts=artifacts, window=WINDOW)
    kept = trim_history(history, WINDOW).kept
    texts = [m.content for m in prompt.messages if m.source and m.source.kind == "artifact"]
    included = sum(r.included for r in prompt.inclusions)
    print(
        f"history {len(history)} messages ({len(kept)} kept), artifacts {len(artifacts)} "
        f"({included} included), prompt {len(prompt.messages)} messages"
    )
    t_engine, t_messages, t_join = median_times(
        [
            lambda: engine(history, artifacts),
            lambda: naive_messages(list(kept), texts),
            lambda: naive_join(list(kept), texts),
        ]
    )
    print("CPU time per prompt (time.process_time):")
    print(f"engine (trim + plan + assemble): {t_engine * 1e3:8.3f} ms")
    print(f"baseline messages (concatenate): {t_messages * 1e3:8.3f} ms")
    print(f"baseline join (one str join):    {t_join * 1e3:8.3f} ms")
    print(f"ratio engine / messages: {t_engine / t_messages:6.2f}x (target <= 5)")
    print(f"ratio engine / join:     {t_engine / t_join:6.1f}x (floor, for reference)")


if __name__ == "__main__":
    main()
