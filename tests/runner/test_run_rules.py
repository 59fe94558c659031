"""Statuses, skip reasons, failed types and policy guards of a run."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from _support import A, B, generate, make_runner, op, use_profile
from opsrun.errors import (
    ConfigError,
    OperationFailed,
    ProfileInvalid,
    ProviderError,
    ProviderTimeout,
    RateLimited,
    RunError,
)
from opsrun.model import (
    AppendAfterLastUser,
    ArtifactWrite,
    AssistantMeta,
    ChatRole,
    FailedType,
    FinishReason,
    Hook,
    MainLlmStatus,
    OperationResult,
    OperationStatus,
    RunRequest,
    RunStatus,
    Trigger,
    UserVariant,
)
from opsrun.operations import OperationCatalog, OperationContext
from opsrun.ports import MainLlmDone, ProviderCapabilities
from opsrun.runner import MainLlmRetry, Runner
from opsrun.stores import InMemoryStores
from opsrun.testing import ScriptedMainLlm

pytestmark = pytest.mark.anyio


def register(catalog: OperationCatalog, op_id: str, result: OperationResult | None = None) -> None:
    """Register ``op_id`` returning ``result`` (``done()`` by default)."""

    @catalog.function(op_id, name=f"Name of {op_id}")
    async def _fn(ctx: OperationContext) -> OperationResult:
        return result or OperationResult.done()


def statuses(result: Any) -> dict[str, tuple[str, str | None, str | None]]:
    return {
        f"{r.operation_id}@{r.hook.value}": (r.status.value, r.skipped_reason, r.error_code)
        for r in result.operation_runs
    }


# -- skip reasons ----------------------------------------------------------------------------


async def test_all_done_run_is_done(
    runner: Runner, opsrun_catalog: OperationCatalog, opsrun_stores: InMemoryStores
) -> None:
    register(opsrun_catalog, "a")
    register(opsrun_catalog, "b")
    await use_profile(opsrun_stores, op("a", B), op("b", A, required=True))
    result = await runner.run(generate())
    assert result.status == RunStatus.DONE
    assert result.failed_type is None
    assert result.run.main_llm.status == MainLlmStatus.DONE
    assert result.run.main_llm.finish_reason == FinishReason.COMPLETED
    assert [(r.operation_id, r.status) for r in result.operation_runs] == [
        ("a", OperationStatus.DONE),
        ("b", OperationStatus.DONE),
    ]
    assert all(r.operation_name == f"Name of {r.operation_id}" for r in result.operation_runs)


async def test_disabled_operation_is_skipped_disabled(
    runner: Runner, opsrun_catalog: OperationCatalog, opsrun_stores: InMemoryStores
) -> None:
    calls: list[str] = []

    @opsrun_catalog.function("off", name="Off")
    async def _off(ctx: OperationContext) -> OperationResult:
        calls.append("off")
        return OperationResult.done()

    await use_profile(opsrun_stores, op("off", B, enabled=False, required=True))
    result = await runner.run(generate())
    assert statuses(result) == {"off@before_main_llm": ("skipped", "disabled", None)}
    assert calls == []
    # a disabled operation is not one "that should have run in this Run": even when
    # required it does not block the barrier
    assert result.status == RunStatus.DONE


async def test_trigger_mismatch(
    runner: Runner, opsrun_catalog: OperationCatalog, opsrun_stores: InMemoryStores
) -> None:
    register(opsrun_catalog, "regen_only")
    register(opsrun_catalog, "gen_only")
    await use_profile(
        opsrun_stores,
        op("regen_only", B, triggers=(Trigger.REGENERATE,), required=True),
        op("gen_only", B, order=2, triggers=(Trigger.GENERATE,), required=True),
    )
    first = await runner.run(generate())
    assert first.status == RunStatus.DONE
    assert statuses(first) == {
        "regen_only@before_main_llm": ("skipped", "trigger_mismatch", None),
        "gen_only@before_main_llm": ("done", None, None),
    }
    again = await runner.run(
        RunRequest(
            trigger=Trigger.REGENERATE,
            chat_id="c",
            profile_id="p",
            user_message_id=first.run.user_message_id,
        )
    )
    assert again.status == RunStatus.DONE
    assert statuses(again) == {
        "regen_only@before_main_llm": ("done", None, None),
        "gen_only@before_main_llm": ("skipped", "trigger_mismatch", None),
    }


async def test_condition_false_when_operation_skips(
    runner: Runner, opsrun_catalog: OperationCatalog, opsrun_stores: InMemoryStores
) -> None:
    register(opsrun_catalog, "guard", OperationResult.skipped())
    register(opsrun_catalog, "bare", OperationResult(status=OperationStatus.SKIPPED))
    await use_profile(opsrun_stores, op("guard", B), op("bare", A))
    result = await runner.run(generate())
    assert result.status == RunStatus.DONE
    assert statuses(result) == {
        "guard@before_main_llm": ("skipped", "condition_false", None),
        "bare@after_main_llm": ("skipped", "condition_false", None),
    }


async def test_optional_dependant_of_failed_dependency_is_skipped(
    runner: Runner, opsrun_catalog: OperationCatalog, opsrun_stores: InMemoryStores
) -> None:
    ran: list[str] = []
    register(opsrun_catalog, "dep", OperationResult.failed("boom", "no"))

    @opsrun_catalog.function("child", name="Child")
    async def _child(ctx: OperationContext) -> OperationResult:
        ran.append("child")
        return OperationResult.done()

    await use_profile(opsrun_stores, op("dep", B), op("child", B, depends_on=("dep",)))
    result = await runner.run(generate())
    assert ran == []
    assert statuses(result) == {
        "dep@before_main_llm": ("error", None, "boom"),
        "child@before_main_llm": ("skipped", "dependency_failed", None),
    }
    assert result.status == RunStatus.DONE
    child = result.operation("child")
    assert child.started_at is None


async def test_required_dependant_of_skipped_dependency_errors_and_blocks_barrier(
    runner: Runner,
    opsrun_catalog: OperationCatalog,
    opsrun_stores: InMemoryStores,
    opsrun_main_llm: ScriptedMainLlm,
) -> None:
    register(opsrun_catalog, "guard", OperationResult.skipped())
    register(opsrun_catalog, "child")
    register(opsrun_catalog, "grandchild")
    register(opsrun_catalog, "after")
    await use_profile(
        opsrun_stores,
        op("guard", B),
        op("child", B, depends_on=("guard",), required=True),
        op("grandchild", B, depends_on=("child",)),
        op("after", A),
    )
    result = await runner.run(generate())
    assert statuses(result) == {
        "guard@before_main_llm": ("skipped", "condition_false", None),
        "child@before_main_llm": ("error", None, "dependency_failed"),
        "grandchild@before_main_llm": ("skipped", "dependency_failed", None),
        "after@after_main_llm": ("skipped", "main_llm_not_run", None),
    }
    assert result.status == RunStatus.FAILED
    assert result.failed_type == FailedType.BEFORE_BARRIER
    assert result.run.failed_details is not None
    assert result.run.failed_details.operation_id == "child"
    assert result.run.failed_details.error_code == "dependency_failed"
    assert opsrun_main_llm.requests == []
    assert result.run.main_llm.started is False


# -- failed types ----------------------------------------------------------------------------


async def test_barrier_failure_stops_main_llm(
    runner: Runner,
    opsrun_catalog: OperationCatalog,
    opsrun_stores: InMemoryStores,
    opsrun_main_llm: ScriptedMainLlm,
) -> None:
    register(opsrun_catalog, "gate", OperationResult.failed("nope", "closed"))
    register(opsrun_catalog, "after1")
    register(opsrun_catalog, "after2")
    await use_profile(
        opsrun_stores,
        op("gate", B, required=True),
        op("after1", A, required=True),
        op("after2", A, order=2),
    )
    result = await runner.run(generate())
    assert result.status == RunStatus.FAILED
    assert result.failed_type == FailedType.BEFORE_BARRIER
    assert opsrun_main_llm.requests == []
    assert statuses(result)["after1@after_main_llm"] == ("skipped", "main_llm_not_run", None)
    assert statuses(result)["after2@after_main_llm"] == ("skipped", "main_llm_not_run", None)
    history = await opsrun_stores.chats.history("c", "main")
    assert [m.role for m in history] == [ChatRole.USER]


@pytest.mark.parametrize(
    ("exc", "code", "reason"),
    [
        (ProviderError("down"), "provider_error", FinishReason.PROVIDER_ERROR),
        (RateLimited("slow down", retry_after=1), "rate_limited", FinishReason.RATE_LIMITED),
        (ProviderTimeout("late"), "timeout", FinishReason.TIMEOUT),
        (RuntimeError("adapter bug"), "main_llm_exception", FinishReason.PROVIDER_ERROR),
    ],
)
async def test_main_llm_failure(
    opsrun_catalog: OperationCatalog,
    opsrun_stores: InMemoryStores,
    runner: Runner,
    exc: Exception,
    code: str,
    reason: FinishReason,
) -> None:
    runner.main_llm = ScriptedMainLlm([exc])
    runner.main_llm_retry = MainLlmRetry(max_attempts=1)  # the error itself, not its retry
    register(opsrun_catalog, "after")
    await use_profile(opsrun_stores, op("after", A))
    result = await runner.run(generate())
    assert result.status == RunStatus.FAILED
    assert result.failed_type == FailedType.MAIN_LLM
    main = result.run.main_llm
    assert main.started is True
    assert main.status == MainLlmStatus.ERROR
    assert main.finish_reason == reason
    assert main.error is not None
    assert main.error.code == code
    assert result.run.failed_details is not None
    assert result.run.failed_details.error_code == code
    assert statuses(result) == {"after@after_main_llm": ("skipped", "main_llm_not_run", None)}
    history = await opsrun_stores.chats.history("c", "main")
    assert [m.role for m in history] == [ChatRole.USER]


async def test_required_after_operation_failure_keeps_assistant_variant(
    runner: Runner, opsrun_catalog: OperationCatalog, opsrun_stores: InMemoryStores
) -> None:
    runner.main_llm = ScriptedMainLlm(["the reply"])
    register(opsrun_catalog, "post", OperationResult.failed("post_failed", "bad"))
    register(opsrun_catalog, "optional_post", OperationResult.failed("meh", "ignored"))
    await use_profile(opsrun_stores, op("post", A, required=True), op("optional_post", A, order=0))
    result = await runner.run(generate())
    assert result.status == RunStatus.FAILED
    assert result.failed_type == FailedType.AFTER_MAIN_LLM
    assert result.run.failed_details is not None
    assert result.run.failed_details.operation_id == "post"
    assert result.run.failed_details.error_code == "post_failed"
    history = await opsrun_stores.chats.history("c", "main")
    assert [m.role for m in history] == [ChatRole.USER, ChatRole.ASSISTANT]
    assert history[1].prompt_text == "the reply"
    assert history[1].selected_variant_id == result.run.main_llm.assistant_variant_id


async def test_optional_failures_do_not_fail_the_run(
    runner: Runner, opsrun_catalog: OperationCatalog, opsrun_stores: InMemoryStores
) -> None:
    register(opsrun_catalog, "b", OperationResult.failed("x", "y"))
    register(opsrun_catalog, "a", OperationResult.failed("x", "y"))
    await use_profile(opsrun_stores, op("b", B), op("a", A))
    result = await runner.run(generate())
    assert result.status == RunStatus.DONE


async def test_operation_exceptions(
    runner: Runner, opsrun_catalog: OperationCatalog, opsrun_stores: InMemoryStores
) -> None:
    @opsrun_catalog.function("crash", name="Crash")
    async def _crash(ctx: OperationContext) -> OperationResult:
        raise KeyError("missing")

    @opsrun_catalog.function("fails", name="Fails")
    async def _fails(ctx: OperationContext) -> OperationResult:
        raise OperationFailed("quota gone", code="budget_exceeded", details={"left": 0})

    await use_profile(opsrun_stores, op("crash", B), op("fails", B, order=2))
    result = await runner.run(generate())
    assert result.status == RunStatus.DONE
    crash = result.operation("crash")
    assert crash.status == OperationStatus.ERROR
    assert crash.error is not None
    assert crash.error.code == "operation_exception"
    assert "KeyError" in crash.error.message
    fails = result.operation("fails")
    assert fails.error is not None
    assert fails.error.code == "budget_exceeded"
    assert fails.error.message == "quota gone"
    assert fails.error.details == {"left": 0}


async def test_operation_reporting_aborted_is_not_done(
    runner: Runner, opsrun_catalog: OperationCatalog, opsrun_stores: InMemoryStores
) -> None:
    register(opsrun_catalog, "gives_up", OperationResult(status=OperationStatus.ABORTED))
    await use_profile(opsrun_stores, op("gives_up", B, required=True))
    result = await runner.run(generate())
    assert result.operation("gives_up").status == OperationStatus.ABORTED
    assert result.status == RunStatus.FAILED
    assert result.failed_type == FailedType.BEFORE_BARRIER


# -- policy guards ---------------------------------------------------------------------------


async def test_prompt_effect_in_after_hook_is_policy_error(
    runner: Runner, opsrun_catalog: OperationCatalog, opsrun_stores: InMemoryStores
) -> None:
    register(
        opsrun_catalog, "late", OperationResult.done(prompt=[AppendAfterLastUser(content="x")])
    )
    await use_profile(opsrun_stores, op("late", A))
    result = await runner.run(generate())
    late = result.operation("late")
    assert late.status == OperationStatus.ERROR
    assert late.error_code == "policy_error"
    assert late.committed is False
    assert result.run.applied_effects == ()


async def test_assistant_effect_in_before_hook_is_policy_error(
    runner: Runner, opsrun_catalog: OperationCatalog, opsrun_stores: InMemoryStores
) -> None:
    register(
        opsrun_catalog,
        "early",
        OperationResult.done(
            turn=[UserVariant(content="fine alone"), AssistantMeta(meta={"k": 1})]
        ),
    )
    await use_profile(opsrun_stores, op("early", B))
    result = await runner.run(generate("original"))
    assert result.operation("early").error_code == "policy_error"
    # atomic: the allowed user variant of the same result did not apply either
    message = await opsrun_stores.chats.get_message("c", result.run.user_message_id)
    assert message.prompt_text == "original"
    assert len(message.variants) == 1


async def test_writing_an_undeclared_tag_is_policy_error(
    runner: Runner, opsrun_catalog: OperationCatalog, opsrun_stores: InMemoryStores
) -> None:
    @opsrun_catalog.function("w", name="W", write_tag="mine")
    async def _w(ctx: OperationContext) -> OperationResult:
        return OperationResult.done(artifact=ArtifactWrite(tag="theirs", value=1))

    register(
        opsrun_catalog, "nowrite", OperationResult.done(artifact=ArtifactWrite(tag="x", value=1))
    )
    await use_profile(opsrun_stores, op("w", B), op("nowrite", A))
    result = await runner.run(generate())
    assert result.operation("w").error_code == "policy_error"
    assert result.operation("nowrite").error_code == "policy_error"
    key = next(iter(opsrun_stores.sessions.sessions())).key
    assert await opsrun_stores.sessions.get_artifacts(key) == {}


# -- profiles --------------------------------------------------------------------------------


async def test_operation_in_two_hooks_runs_once_per_hook(
    runner: Runner, opsrun_catalog: OperationCatalog, opsrun_stores: InMemoryStores
) -> None:
    hooks: list[Hook] = []

    @opsrun_catalog.function("both", name="Both")
    async def _both(ctx: OperationContext) -> OperationResult:
        hooks.append(ctx.hook)
        return OperationResult.done()

    await use_profile(opsrun_stores, op("both", B, A))
    result = await runner.run(generate())
    assert hooks == [B, A]
    assert [(r.operation_id, r.hook, r.status) for r in result.operation_runs] == [
        ("both", B, OperationStatus.DONE),
        ("both", A, OperationStatus.DONE),
    ]
    assert result.operation("both", A).hook == A


async def test_disabled_profile_runs_only_the_main_llm(
    runner: Runner,
    opsrun_catalog: OperationCatalog,
    opsrun_stores: InMemoryStores,
    opsrun_main_llm: ScriptedMainLlm,
) -> None:
    ran: list[str] = []

    @opsrun_catalog.function("x", name="X")
    async def _x(ctx: OperationContext) -> OperationResult:
        ran.append("x")
        return OperationResult.done()

    await use_profile(opsrun_stores, op("x", B, A, required=True), enabled=False)
    result = await runner.run(generate())
    assert result.status == RunStatus.DONE
    assert ran == []
    assert result.operation_runs == ()
    assert len(opsrun_main_llm.requests) == 1


async def test_no_profile_runs_only_the_main_llm(
    runner: Runner, opsrun_main_llm: ScriptedMainLlm
) -> None:
    result = await runner.run(
        RunRequest(trigger=Trigger.GENERATE, chat_id="c", user_message="hello")
    )
    assert result.status == RunStatus.DONE
    assert result.run.profile_id is None
    assert len(opsrun_main_llm.requests) == 1


async def test_unknown_profile(runner: Runner) -> None:
    with pytest.raises(RunError) as info:
        await runner.run(generate())
    assert info.value.code == "profile_not_found"


async def test_regenerate_unknown_turn(runner: Runner, opsrun_stores: InMemoryStores) -> None:
    await use_profile(opsrun_stores)
    with pytest.raises(RunError) as info:
        await runner.run(
            RunRequest(
                trigger=Trigger.REGENERATE, chat_id="c", profile_id="p", user_message_id="nope"
            )
        )
    assert info.value.code == "turn_not_found"
    assert opsrun_stores.runs.run_ids() == []


async def test_invalid_profile(
    runner: Runner, opsrun_catalog: OperationCatalog, opsrun_stores: InMemoryStores
) -> None:
    register(opsrun_catalog, "a")
    await use_profile(opsrun_stores, op("a", B, depends_on=("ghost",)), op("unknown_op", B))
    with pytest.raises(ProfileInvalid) as info:
        await runner.run(generate())
    assert info.value.code == "profile_invalid"
    assert len(info.value.issues) >= 2
    assert opsrun_stores.runs.run_ids() == []


async def test_regenerate_adds_a_selected_assistant_variant(
    runner: Runner, opsrun_stores: InMemoryStores
) -> None:
    runner.main_llm = ScriptedMainLlm(["first", "second"])
    await use_profile(opsrun_stores)
    first = await runner.run(generate("q"))
    second = await runner.run(
        RunRequest(
            trigger=Trigger.REGENERATE,
            chat_id="c",
            profile_id="p",
            user_message_id=first.run.user_message_id,
        )
    )
    assert second.status == RunStatus.DONE
    history = await opsrun_stores.chats.history("c", "main")
    assert len(history) == 2
    assistant = history[1]
    assert [v.content for v in assistant.variants] == ["first", "second"]
    assert assistant.prompt_text == "second"
    assert second.run.main_llm.assistant_message_id == first.run.main_llm.assistant_message_id
    # the regenerated prompt ends at the user message: the old reply is not in it
    llm = runner.main_llm
    assert isinstance(llm, ScriptedMainLlm)
    assert [m.role for m in llm.requests[1].messages] == ["user"]


async def test_run_result_is_stored(
    runner: Runner, opsrun_catalog: OperationCatalog, opsrun_stores: InMemoryStores
) -> None:
    register(opsrun_catalog, "a")
    await use_profile(opsrun_stores, op("a", B))
    result = await runner.run(generate())
    stored = await runner.result(result.run.run_id)
    assert stored == result
    with anyio.fail_after(1):
        assert runner.abort(result.run.run_id) is False


async def test_operation_returning_no_result_is_operation_exception(
    runner: Runner, opsrun_catalog: OperationCatalog, opsrun_stores: InMemoryStores
) -> None:
    @opsrun_catalog.function("forgot", name="Forgot to return")
    async def _forgot(ctx: OperationContext) -> OperationResult:
        return None  # type: ignore[return-value]  # the mistake under test

    await use_profile(opsrun_stores, op("forgot", B, timeout_ms=60_000))
    result = await runner.run(generate())
    forgot = result.operation("forgot")
    assert forgot.status == OperationStatus.ERROR
    assert forgot.error_code == "operation_exception"
    assert forgot.error is not None
    assert "NoneType" in forgot.error.message
    assert result.status == RunStatus.DONE


async def test_main_llm_stream_without_final_result(
    runner: Runner, opsrun_stores: InMemoryStores
) -> None:
    class Truncated:
        capabilities = ProviderCapabilities()

        async def stream(self, request: object) -> Any:
            yield "half a"

    runner.main_llm = Truncated()
    await use_profile(opsrun_stores)
    result = await runner.run(generate())
    assert result.status == RunStatus.FAILED
    assert result.failed_type == FailedType.MAIN_LLM
    main = result.run.main_llm
    assert main.status == MainLlmStatus.ERROR
    assert main.finish_reason == FinishReason.UNKNOWN
    assert main.error is not None
    assert main.error.code == "main_llm_incomplete"
    assert main.text == "half a"


@pytest.mark.parametrize(
    ("done", "recorded"),
    [
        (
            MainLlmDone(text="t", finish_reason="length", raw_finish_reason="max_tokens"),
            "max_tokens",
        ),
        (MainLlmDone(text="t", finish_reason="length"), "length"),
        (MainLlmDone(text="t"), "stop"),
    ],
    ids=["raw", "normalised", "default"],
)
async def test_the_run_records_the_providers_own_finish_reason(
    runner: Runner, opsrun_stores: InMemoryStores, done: MainLlmDone, recorded: str
) -> None:
    runner.main_llm = ScriptedMainLlm([done])
    await use_profile(opsrun_stores)
    result = await runner.run(generate())
    main = result.run.main_llm
    assert main.status == MainLlmStatus.DONE
    assert main.finish_reason == FinishReason.COMPLETED
    assert main.provider_finish_reason == recorded


async def test_a_runner_needs_every_store() -> None:
    stores = InMemoryStores()
    with pytest.raises(ConfigError, match="sessions") as info:
        Runner(
            catalog=OperationCatalog(),
            main_llm=ScriptedMainLlm(),
            profiles=stores.profiles,
            chats=stores.chats,
            runs=stores.runs,
        )
    assert info.value.details["field"] == "sessions"
    parts = Runner(
        catalog=OperationCatalog(),
        main_llm=ScriptedMainLlm(),
        profiles=stores.profiles,
        sessions=stores.sessions,
        chats=stores.chats,
        runs=stores.runs,
    )
    assert parts.archive is None  # only a bundle brings its archive along


async def test_stores_given_one_by_one_override_the_bundle() -> None:
    bundle, other = InMemoryStores(), InMemoryStores()
    runner = make_runner(stores=bundle, runs=other.runs, archive=other.archive)
    assert runner.profiles is bundle.profiles
    assert runner.sessions is bundle.sessions
    assert runner.chats is bundle.chats
    assert runner.runs is other.runs
    assert runner.archive is other.archive
    assert make_runner(stores=bundle).archive is bundle.archive
