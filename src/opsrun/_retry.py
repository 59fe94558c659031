"""Retries with exponential backoff and jitter, on tenacity, for asyncio and trio.

The main LLM call and ``kind="llm"`` retry through :func:`call_with_retries`. After
failed attempt *n* (1, 2, …) the wait is::

    base(n) = min(maximum, initial × 2^(n-1))
    wait(n) = min(maximum, base(n) + uniform(0, initial))   with jitter
    wait(n) = base(n)                                       without

and at least the Retry-After the failure carries (``RateLimited.retry_after``); the cap
does not shorten a provider's Retry-After. A retry whose wait would end at or after the
deadline is not made: the last failure is returned with the wait that was refused.

The wait never starts early: with jitter the spread is added on top of the exponential
step, so ``initial`` is also the shortest wait between two attempts.

Only tenacity's public API is used (``AsyncRetrying``, ``stop_after_attempt``,
``wait_exponential``, ``wait_random``, ``retry_if_result``, ``stop_base``,
``wait_base``). Waiting goes through the ``sleep`` given (``anyio.sleep`` by default),
so a cancel scope around the call (a run's abort) ends the wait at once, on asyncio and
on trio.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

import anyio
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_result,
    stop_after_attempt,
    wait_exponential,
    wait_random,
)
from tenacity.stop import stop_base
from tenacity.wait import wait_base

__all__ = ["Backoff", "Retried", "Sleep", "call_with_retries", "no_retry_message"]

T = TypeVar("T")

Sleep = Callable[[float], Awaitable[None]]
"""How a backoff waits: ``anyio.sleep``, or a recording fake in tests."""


@dataclass(frozen=True, slots=True)
class Backoff:
    """The wait between attempts: exponential from ``initial``, capped at ``maximum``.

    Attributes:
        initial: Seconds before the first retry (and the width of the jitter).
        maximum: Seconds no backoff exceeds (a provider's Retry-After may).
        jitter: Add ``uniform(0, initial)`` to each wait, so clients that failed
            together do not retry together.
    """

    initial: float
    maximum: float
    jitter: bool = True

    def strategy(self, retry_after: Callable[[T], float | None]) -> wait_base:
        """The tenacity wait strategy: this backoff, or ``retry_after(outcome)`` when longer.

        ``retry_after`` receives what the failed attempt returned.
        """
        return _BackoffWait(self, retry_after)


class _BackoffWait(wait_base):
    """Exponential backoff with additive jitter, capped, then at least the Retry-After."""

    def __init__(self, backoff: Backoff, retry_after: Callable[[T], float | None]) -> None:
        steps = wait_exponential(multiplier=backoff.initial, max=backoff.maximum)
        spread = backoff.initial if backoff.jitter else 0.0
        self._schedule = steps + wait_random(0, spread)
        self._maximum = backoff.maximum
        self._retry_after = retry_after

    def __call__(self, retry_state: RetryCallState) -> float:
        wait = min(self._maximum, self._schedule(retry_state))
        outcome = retry_state.outcome
        if outcome is None or outcome.failed:
            return wait
        after = self._retry_after(outcome.result())
        return wait if after is None else max(wait, after)


class _BeforeDeadline(stop_base):
    """Stop when the next attempt would start at or after ``deadline`` (anyio time)."""

    def __init__(self, deadline: float | None) -> None:
        self._deadline = deadline

    def __call__(self, retry_state: RetryCallState) -> bool:
        if self._deadline is None:
            return False
        return anyio.current_time() + retry_state.upcoming_sleep >= self._deadline


@dataclass(frozen=True, slots=True)
class Retried(Generic[T]):
    """What :func:`call_with_retries` ends with.

    Attributes:
        value: What the last attempt returned (a success, or the last failure).
        attempts: Attempts made, the first included.
        refused_wait: The wait of the retry the deadline prevented, or None when the
            attempts ended for any other reason.
    """

    value: T
    attempts: int
    refused_wait: float | None = None


async def call_with_retries(
    attempt: Callable[[], Awaitable[T]],
    *,
    should_retry: Callable[[T], bool],
    retry_after: Callable[[T], float | None],
    max_attempts: int,
    backoff: Backoff,
    deadline: float | None = None,
    sleep: Sleep = anyio.sleep,
) -> Retried[T]:
    """Await ``attempt()`` until it returns a value ``should_retry`` declines.

    Attempts report failures by returning them, not by raising: an exception
    ``attempt`` raises (a cancellation included) ends the call at once and propagates
    unchanged. At most ``max_attempts`` attempts are made; between them the call waits
    as :class:`Backoff` describes, at least ``retry_after(failure)``, and makes no retry
    whose wait would end at or after ``deadline`` (an ``anyio.current_time()`` value).

    Raises:
        BaseException: whatever ``attempt`` or ``sleep`` raised.
    """
    first = await attempt()
    if max_attempts <= 1 or not should_retry(first):
        return Retried(first, 1)  # the common path: no retry machinery at all
    refused: list[float] = []

    def give_up(state: RetryCallState) -> T:
        """The attempts are over: the last failure is the value."""
        if state.attempt_number < max_attempts:
            refused.append(state.upcoming_sleep)  # stopped by the deadline, not the count
        outcome = state.outcome
        assert outcome is not None  # tenacity gives up only after an attempt
        value: T = outcome.result()
        return value

    retrying = AsyncRetrying(
        sleep=sleep,
        stop=stop_after_attempt(max_attempts) | _BeforeDeadline(deadline),
        wait=backoff.strategy(retry_after),
        retry=retry_if_result(should_retry),
        retry_error_callback=give_up,
    )
    made = 1
    pending = [first]  # tenacity's first attempt is the one already made

    async def counted() -> T:
        nonlocal made
        if pending:
            return pending.pop()
        made += 1
        return await attempt()

    value: T = await retrying(counted)
    return Retried(value, made, refused[0] if refused else None)


def no_retry_message(message: str, wait: float) -> str:
    """``message`` of a failure whose retry the deadline prevented."""
    return f"{message} (no retry: waiting {wait:.3f}s would pass the deadline)"
