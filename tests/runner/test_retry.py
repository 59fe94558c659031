"""Retries of the main LLM call (``Runner(main_llm_retry=...)``) and the shared backoff.

Waits are observed through a recording ``sleep`` passed in the policy, never measured
on the wall clock.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st
from tenacity import AsyncRetrying, RetryCallState

from opsrun._retry import Backoff, call_with_retries
from opsrun.errors import (
    ConfigError,
    ProviderError,
    ProviderTimeout,
    ProviderUnavailable,
    RateLimited,
)
from opsrun.model import (
    FinishReason,
    MainLlmCall,
    MainLlmStatus,
    RunEvent,
    RunRequest,
    RunResult,
    RunStatus,
    Trigger,
)
from opsrun.operations import AbortSignal, OperationCatalog
from opsrun.ports import MainLlm, MainLlmDone, MainLlmRequest, ProviderCapabilities
from opsrun.runner import MainLlmRetry, Runner
from opsrun.stores import InMemoryStores
from opsrun.testing import FakeClock, ScriptedMainLlm, SequentialIds

pytestmark = pytest.mark.anyio


class Waits:
    """A recording ``sleep``: keeps the seconds asked for and returns at once."""

    def __init__(self) -> None:
        self.seconds: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.seconds.append(seconds)
        await anyio.lowlevel.checkpoint()


class Sink:
    def __init__(self) -> None:
        self.events: list[RunEvent] = []

    async def emit(self, event: RunEvent) -> None:
        self.events.append(event)


class PartialThenError:
    """A main LLM that streams ``text`` and then raises ``error``."""

    capabilities = ProviderCapabilities()

    def __init__(self, text: str, error: Exception) -> None:
        self.text, self.error = text, error
        self.calls = 0

    def stream(self, request: MainLlmRequest) -> AsyncIterator[str | MainLlmDone]:
        self.calls += 1
        return self._items()

    async def _items(self) -> AsyncIterator[str | MainLlmDone]:
        yield self.text
        raise self.error


def runner(
    main_llm: MainLlm, retry: MainLlmRetry | None = None, sink: Sink | None = None
) -> Runner:
    return Runner(
        catalog=OperationCatalog(),
        stores=InMemoryStores(),
        main_llm=main_llm,
        clock=FakeClock(),
        ids=SequentialIds(),
        events=sink,
        main_llm_retry=retry,
    )


def turn(**kw: Any) -> RunRequest:
    return RunRequest(trigger=Trigger.GENERATE, chat_id="c", user_message="hi", **kw)


async def run(main_llm: MainLlm, retry: MainLlmRetry | None, **kw: Any) -> RunResult:
    with anyio.fail_after(5):  # safety bound only: no test may wait for real
        return await runner(main_llm, retry).run(turn(**kw))


def quick(waits: Waits, **kw: Any) -> MainLlmRetry:
    return MainLlmRetry(initial_backoff=0.5, max_backoff=8.0, sleep=waits, **kw)


# -- the main LLM call ---------------------------------------------------------------------


async def test_a_rate_limit_a_timeout_and_an_unavailable_server_are_retried() -> None:
    waits = Waits()
    unavailable = ProviderUnavailable("503")
    llm = ScriptedMainLlm([RateLimited("429"), ProviderTimeout("late"), unavailable, "the answer"])
    sink = Sink()
    with anyio.fail_after(5):
        result = await runner(llm, quick(waits, max_attempts=4), sink).run(turn())
    main = result.run.main_llm
    assert result.status == RunStatus.DONE
    assert main.status == MainLlmStatus.DONE
    assert main.text == "the answer"
    assert main.error is None
    assert main.attempts == 4
    assert len(llm.requests) == 4
    assert len(waits.seconds) == 3
    types = [e.type for e in sink.events]
    assert types.count("main_llm.started") == 1
    assert types.count("main_llm.finished") == 1
    deltas = [e for e in sink.events if e.type == "main_llm.delta"]
    assert "".join(getattr(e, "text", "") for e in deltas) == "the answer"


async def test_a_reply_the_provider_ended_with_an_error_before_any_text_is_retried() -> None:
    waits = Waits()
    failed = MainLlmDone(text="", finish_reason="error", raw_finish_reason="abort")
    llm = ScriptedMainLlm([failed, "the answer"])
    result = await run(llm, quick(waits))
    assert result.status == RunStatus.DONE
    assert result.run.main_llm.text == "the answer"
    assert result.run.main_llm.attempts == 2
    assert len(waits.seconds) == 1


async def test_the_last_error_ends_the_call_when_the_attempts_are_used_up() -> None:
    waits = Waits()
    llm = ScriptedMainLlm([RateLimited("429 a"), RateLimited("429 b"), RateLimited("429 c")])
    result = await run(llm, quick(waits, max_attempts=3))
    main = result.run.main_llm
    assert result.status == RunStatus.FAILED
    assert main.status == MainLlmStatus.ERROR
    assert main.finish_reason == FinishReason.RATE_LIMITED
    assert main.error is not None
    assert main.error.code == "rate_limited"
    assert main.error.message == "429 c"
    assert main.attempts == 3
    assert len(waits.seconds) == 2


async def test_a_retry_after_longer_than_the_backoff_is_waited_out() -> None:
    waits = Waits()
    llm = ScriptedMainLlm([RateLimited("429", retry_after=5.0), "ok"])
    result = await run(llm, MainLlmRetry(initial_backoff=0.01, max_backoff=0.02, sleep=waits))
    assert result.status == RunStatus.DONE
    assert waits.seconds == [5.0]


async def test_a_retry_after_shorter_than_the_backoff_does_not_shorten_it() -> None:
    waits = Waits()
    llm = ScriptedMainLlm([RateLimited("429", retry_after=0.001), "ok"])
    await run(llm, MainLlmRetry(initial_backoff=1.0, max_backoff=4.0, jitter=False, sleep=waits))
    assert waits.seconds == [1.0]


async def test_the_backoff_doubles_up_to_its_cap() -> None:
    waits = Waits()
    llm = ScriptedMainLlm([ProviderTimeout("late")] * 4 + ["ok"])
    retry = MainLlmRetry(
        max_attempts=5, initial_backoff=1.0, max_backoff=3.0, jitter=False, sleep=waits
    )
    result = await run(llm, retry)
    assert result.status == RunStatus.DONE
    assert waits.seconds == [1.0, 2.0, 3.0, 3.0]


async def test_no_retry_once_text_was_streamed() -> None:
    waits = Waits()
    llm = PartialThenError("half an answ", RateLimited("429"))
    result = await run(llm, quick(waits))
    main = result.run.main_llm
    assert result.status == RunStatus.FAILED
    assert main.status == MainLlmStatus.ERROR
    assert main.finish_reason == FinishReason.RATE_LIMITED
    assert main.text == "half an answ"
    assert main.attempts == 1
    assert llm.calls == 1
    assert waits.seconds == []


@pytest.mark.parametrize("error", [ProviderError("bad request"), RuntimeError("adapter bug")])
async def test_errors_that_are_not_transient_are_not_retried(error: Exception) -> None:
    waits = Waits()
    llm = ScriptedMainLlm([error, "never"])
    result = await run(llm, quick(waits))
    assert result.status == RunStatus.FAILED
    assert result.run.main_llm.attempts == 1
    assert len(llm.requests) == 1
    assert waits.seconds == []


async def test_no_retry_whose_wait_would_pass_the_run_deadline() -> None:
    waits = Waits()
    llm = ScriptedMainLlm([RateLimited("429", retry_after=30), "never"])
    result = await run(llm, quick(waits), deadline_ms=2000)
    main = result.run.main_llm
    assert result.status == RunStatus.FAILED
    assert main.status == MainLlmStatus.ERROR
    assert main.error is not None
    assert main.error.code == "rate_limited"
    assert main.error.message.startswith("429 (no retry: waiting 30.000s")
    assert main.attempts == 1
    assert waits.seconds == []


async def test_an_abort_during_the_backoff_ends_the_call_aborted_at_once() -> None:
    signal = AbortSignal()
    asked: list[float] = []

    async def sleep(seconds: float) -> None:
        asked.append(seconds)
        signal.abort()
        await anyio.sleep(seconds)  # a real wait: only the abort can end it in time

    llm = ScriptedMainLlm([RateLimited("429", retry_after=30), "never"])
    with anyio.fail_after(5):
        result = await runner(llm, MainLlmRetry(sleep=sleep)).run(turn(), abort=signal)
    main = result.run.main_llm
    assert asked == [30]
    assert result.status == RunStatus.ABORTED
    assert main.status == MainLlmStatus.ABORTED
    assert main.finish_reason == FinishReason.USER_ABORT
    assert main.attempts == 1
    assert len(llm.requests) == 1


async def test_one_attempt_turns_retries_off() -> None:
    waits = Waits()
    llm = ScriptedMainLlm([RateLimited("429"), "never"])
    result = await run(llm, MainLlmRetry(max_attempts=1, sleep=waits))
    assert result.status == RunStatus.FAILED
    assert result.run.main_llm.attempts == 1
    assert waits.seconds == []


def test_a_runner_without_a_policy_retries_by_default() -> None:
    runner_ = runner(ScriptedMainLlm(), None)
    assert runner_.main_llm_retry == MainLlmRetry()


def test_attempts_default_keeps_stored_calls_readable() -> None:
    stored = MainLlmCall.model_validate({"started": True, "status": "done"})
    assert stored.attempts == 0
    assert MainLlmCall(started=True, attempts=2).model_dump(by_alias=True)["attempts"] == 2


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"max_attempts": 0}, "max_attempts"),
        ({"max_attempts": True}, "max_attempts"),
        ({"max_attempts": 2.5}, "max_attempts"),
        ({"initial_backoff": -1.0}, "initial_backoff"),
        ({"max_backoff": math.nan}, "max_backoff"),
        ({"initial_backoff": 2.0, "max_backoff": 1.0}, "max_backoff"),
    ],
)
def test_a_bad_policy_is_a_config_error(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as error:
        MainLlmRetry(**kwargs)
    assert error.value.details["field"] == field


# -- the shared engine ---------------------------------------------------------------------


async def test_an_exception_from_an_attempt_is_not_retried() -> None:
    calls = 0

    async def attempt() -> str:
        nonlocal calls
        calls += 1
        raise ValueError("a bug, not a failure")

    with pytest.raises(ValueError, match="a bug"):
        await call_with_retries(
            attempt,
            should_retry=lambda _: True,
            retry_after=lambda _: None,
            max_attempts=3,
            backoff=Backoff(0.0, 0.0),
            sleep=Waits(),
        )
    assert calls == 1


async def test_the_refused_wait_is_reported_only_when_the_deadline_stopped() -> None:
    async def attempt() -> str:
        return "fail"

    common: dict[str, Any] = {
        "should_retry": lambda _: True,
        "retry_after": lambda _: None,
        "backoff": Backoff(1.0, 1.0, jitter=False),
        "sleep": Waits(),
    }
    used_up = await call_with_retries(attempt, max_attempts=2, **common)
    assert (used_up.value, used_up.attempts, used_up.refused_wait) == ("fail", 2, None)
    deadline = anyio.current_time() + 0.5
    stopped = await call_with_retries(attempt, max_attempts=5, deadline=deadline, **common)
    assert (stopped.attempts, stopped.refused_wait) == (1, 1.0)


def _wait(backoff: Backoff, failed_attempt: int, retry_after: float | None) -> float:
    """The wait the strategy computes after ``failed_attempt`` failed."""
    state = RetryCallState(retry_object=AsyncRetrying(), fn=None, args=(), kwargs={})
    state.attempt_number = failed_attempt
    state.set_result(retry_after)
    return backoff.strategy(lambda after: after)(state)


@given(
    initial=st.floats(min_value=0, max_value=10),
    extra=st.floats(min_value=0, max_value=100),
    jitter=st.booleans(),
    failed_attempt=st.integers(min_value=1, max_value=40),
    retry_after=st.none() | st.floats(min_value=0, max_value=1000),
)
def test_waits_stay_within_the_jittered_exponential_bounds(
    initial: float, extra: float, jitter: bool, failed_attempt: int, retry_after: float | None
) -> None:
    backoff = Backoff(initial, initial + extra, jitter)
    wait = _wait(backoff, failed_attempt, retry_after)
    step = min(backoff.maximum, initial * 2 ** (failed_attempt - 1))
    highest = min(backoff.maximum, step + (initial if jitter else 0.0))
    floor = retry_after or 0.0
    low, high = max(step, floor), max(highest, floor)
    assert low - _slack(low) <= wait <= high + _slack(high)
    if retry_after is None:
        assert wait <= backoff.maximum + _slack(backoff.maximum)
    if not jitter:
        assert wait == pytest.approx(low)


def _slack(bound: float) -> float:
    """Rounding room: tenacity finds the cap with logarithms, the test by multiplying."""
    return 1e-9 * (1.0 + abs(bound))
