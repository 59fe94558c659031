"""What the contract's tests share: the times they use, builders of records, strategies,
and the base class with the ``stores`` fixture."""

from __future__ import annotations

import base64
import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from ...model import (
    AppliedEffect,
    Artifact,
    ArtifactRef,
    ArtifactUsage,
    ArtifactVersion,
    ChatMessage,
    ChatRole,
    FailedDetails,
    FailedType,
    FinishReason,
    Hook,
    MainLlmCall,
    MainLlmDelta,
    MainLlmFinished,
    MainLlmStarted,
    MainLlmStatus,
    MessageVariant,
    OperationError,
    OperationFinished,
    OperationProfileSessionKey,
    OperationRun,
    OperationStarted,
    OperationStatus,
    Run,
    RunEvent,
    RunFinished,
    RunPhase,
    RunPhaseChanged,
    RunStarted,
    RunStatus,
    SkippedReason,
    Trigger,
    Usage,
)
from ...ports import Stores

__all__ = [
    "JSON_VALUES",
    "PROPERTY",
    "QUICK_PROPERTY",
    "T0",
    "T_OLD",
    "UNICODE_TEXT",
    "ContractBase",
    "delta_events",
    "make_artifact",
    "make_event",
    "make_key",
    "make_message",
    "make_rich_run",
    "make_run",
    "new_id",
]

T0 = datetime(2026, 1, 1, tzinfo=UTC)
"""The time the contract's records start at (stores compare times only through records)."""

PROPERTY = settings(
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    deadline=None,
    max_examples=max(20, (settings.default or settings()).max_examples // 2),
)
"""Settings of the contract's properties (the fixture's store is shared by the examples):
half the examples of the active profile, as each example makes several store calls and
the suite runs once per store and backend."""

QUICK_PROPERTY = settings(
    PROPERTY, max_examples=max(10, (settings.default or settings()).max_examples // 4)
)
"""Settings of the properties whose examples each write many records: a quarter of the
examples of the active profile."""

_JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53), max_value=2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
JSON_VALUES = st.recursive(
    _JSON_SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)


def forged_cursors(query: str) -> list[str]:
    """Cursors of ``query``'s shape holding numbers no store made: past 64 bits, past
    any date, negative; a client can send any of them back."""
    cursors = []
    for number in (2**63, 10**30, -(10**30), 2**200):
        for position in ([number], [number, "run_x"], [number, number]):
            raw = json.dumps([query, *position]).encode()
            cursors.append(base64.urlsafe_b64encode(raw).decode().rstrip("="))
    return cursors


def new_id(prefix: str) -> str:
    """A new id of its own for a test's record: ``<prefix>-<12 hex>``."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def make_key(chat_id: str | None = None, **fields: str) -> OperationProfileSessionKey:
    """A session key of a new chat (or of ``chat_id``), ``fields`` overriding the rest."""
    values = {
        "chat_id": chat_id or new_id("chat"),
        "branch_id": "main",
        "profile_ref": "profile@1",
        "operation_profile_session_id": "session-1",
    }
    return OperationProfileSessionKey(**{**values, **fields})


def make_artifact(tag: str, version: int, value: Any = "v", **fields: Any) -> Artifact:
    """A persisted artifact at ``version``, based on the version before it."""
    return Artifact(
        tag=tag,
        usage=ArtifactUsage.PROMPT_AND_UI,
        persisted=True,
        value=value,
        version=version,
        based_on_version=version - 1 if version > 1 else None,
        **fields,
    )


def make_message(
    chat_id: str,
    message_id: str,
    *,
    branch_id: str = "main",
    text: str = "hi",
    role: ChatRole = ChatRole.USER,
) -> ChatMessage:
    """A message with one variant, ``text``."""
    return ChatMessage(
        message_id=message_id,
        chat_id=chat_id,
        branch_id=branch_id,
        role=role,
        variants=(MessageVariant(variant_id=f"{message_id}-v1", content=text),),
        selected_variant_id=f"{message_id}-v1",
    )


def make_run(
    run_id: str | None = None,
    *,
    key: str = "",
    status: RunStatus = RunStatus.RUNNING,
    started_at: datetime = T0,
    lease: datetime | None = None,
    **fields: Any,
) -> Run:
    """A run of chat ``chat`` (or ``chat_id=``), running from ``T0`` unless told otherwise."""
    return Run(
        run_id=run_id or new_id("run"),
        trigger=Trigger.GENERATE,
        chat_id=fields.pop("chat_id", "chat"),
        branch_id="main",
        user_message_id="u1",
        dedupe_key=key,
        status=status,
        started_at=started_at,
        lease_expires_at=lease,
        **fields,
    )


def make_event(run_id: str, seq: int) -> RunEvent:
    """Event ``seq`` of a run, cycling through every event type."""
    base: dict[str, Any] = {
        "seq": seq,
        "ts": T0 + timedelta(milliseconds=seq),
        "run_id": run_id,
        "chat_id": "chat",
        "user_message_id": "u1",
        "trigger": Trigger.GENERATE,
    }
    op = {"hook": Hook.BEFORE_MAIN_LLM, "operation_id": "op", "operation_name": "Op"}
    samples: list[RunEvent] = [
        RunStarted(**base),
        RunPhaseChanged(**base, phase=RunPhase.BEFORE_MAIN_LLM),
        OperationStarted(**base, **op),
        OperationFinished(
            **base,
            **op,
            status=OperationStatus.ERROR,
            error=OperationError(code="timeout", message="slow", details={"ms": 5}),
            duration_ms=5.5,
        ),
        OperationFinished(
            **base, **op, status=OperationStatus.SKIPPED, skipped_reason=SkippedReason.DISABLED
        ),
        MainLlmStarted(**base),
        MainLlmDelta(**base, text='Привет, 🌍 \u0000 "quoted"'),
        MainLlmFinished(**base, status=MainLlmStatus.DONE, finish_reason=FinishReason.COMPLETED),
        RunFinished(
            **base,
            status=RunStatus.FAILED,
            failed_type=FailedType.MAIN_LLM,
            failed_details=FailedDetails(error_code="provider_error", error_message="down"),
        ),
    ]
    return samples[(seq - 1) % len(samples)]


def make_rich_run(run_id: str) -> tuple[Run, list[OperationRun]]:
    """A run record with every nested part filled, and two operation runs."""
    run = make_run(
        run_id,
        key=new_id("key"),
        status=RunStatus.FAILED,
        lease=T0 + timedelta(seconds=30),
        profile_id="profile",
        profile_ref="profile@1",
        operation_profile_session_id="session-1",
        phase=RunPhase.FINISHED,
        failed_type=FailedType.AFTER_MAIN_LLM,
        failed_details=FailedDetails(operation_id="op", error_code="x", error_message="y"),
        finished_at=T0 + timedelta(seconds=2),
        duration_ms=2000.25,
        main_llm=MainLlmCall(
            started=True,
            status=MainLlmStatus.DONE,
            finish_reason=FinishReason.COMPLETED,
            text="réponse « complète »",
            usage=Usage(input_tokens=10, output_tokens=5, total_tokens=15, cost_usd=0.001),
            assistant_message_id="a1",
            assistant_variant_id="a1-v1",
            prompt_hash="0" * 64,
            params={"model": "m", "temperature": 0.7, "stop": ["\n"]},
            started_at=T0,
            finished_at=T0 + timedelta(seconds=1),
        ),
        applied_effects=(
            AppliedEffect(
                index=0,
                operation_id="op",
                hook=Hook.AFTER_MAIN_LLM,
                type="artifact.write",
                tag="notes",
                version=3,
                based_on_version=2,
                summary="+1 line",
                pruned_versions=(1,),
            ),
        ),
        artifacts_at_start=(ArtifactRef(tag="notes", version=2),),
    )
    common: dict[str, Any] = {"run_id": run_id, "trigger": Trigger.GENERATE, "order": 1.5}
    operation_runs = [
        OperationRun(
            **common,
            operation_id="op",
            operation_name="Op",
            hook=Hook.AFTER_MAIN_LLM,
            required=True,
            depends_on=("other",),
            status=OperationStatus.ERROR,
            error=OperationError(code="timeout", message="slow"),
            started_at=T0,
            finished_at=T0 + timedelta(milliseconds=5),
            duration_ms=5.0,
            inputs_summary={"chars": 12, "nested": {"list": [1, "two", None]}},
            outputs_summary={"ok": False},
            debug={"tried": 3},
        ),
        OperationRun(
            **common,
            operation_id="other",
            operation_name="Other",
            hook=Hook.BEFORE_MAIN_LLM,
            required=False,
            status=OperationStatus.DONE,
            committed=True,
            commit_index=0,
        ),
    ]
    return run, operation_runs


T_OLD = datetime(2000, 1, 1, tzinfo=UTC)
"""The time the retention tests' runs start at: they prune only runs before 2001."""

UNICODE_TEXT = st.text(
    st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=24
)
"""Any text without NUL and lone surrogates: other scripts, emoji, control characters."""


def delta_events(run_id: str, first: int, last: int, *, finish: bool = False) -> list[RunEvent]:
    """``main_llm.delta`` events ``first`` to ``last``; with ``finish`` the last one is
    ``run.finished`` instead."""
    base: dict[str, Any] = {
        "run_id": run_id,
        "chat_id": "chat",
        "user_message_id": "u1",
        "trigger": Trigger.GENERATE,
    }
    events: list[RunEvent] = [
        MainLlmDelta(**base, seq=seq, ts=T0 + timedelta(milliseconds=seq), text=f"d{seq} ")
        for seq in range(first, last + 1)
    ]
    if finish:
        events[-1] = RunFinished(**base, seq=last, ts=events[-1].ts, status=RunStatus.DONE)
    return events


class ContractBase:
    """The ``stores`` fixture and the helpers every part of the contract uses."""

    pytestmark: ClassVar[list[pytest.MarkDecorator]] = [pytest.mark.anyio]

    @pytest.fixture
    def stores(self) -> Stores:
        """The store bundle under test: your subclass overrides this fixture; without
        the override every contract test fails with this message."""
        pytest.fail(
            f"{type(self).__name__} must override the `stores` fixture to return the "
            "Stores under test",
            pytrace=False,
        )

    async def archived_versions(
        self, stores: Stores, key: OperationProfileSessionKey, tag: str
    ) -> list[tuple[ArtifactVersion, str]]:
        """The versions of ``art.<tag>`` the archive keeps, newest first, each with the run
        that archived it.

        The default reads ``await stores.archive.versions(key, tag)``; override it when
        your archive keeps them somewhere else as well and the tests should read there.

        Raises:
            AssertionError: the bundle has no archive.
        """
        assert stores.archive is not None, "this store bundle has no archive"
        return [(item.version, item.run_id) for item in await stores.archive.versions(key, tag)]
