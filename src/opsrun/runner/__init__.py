"""The run engine: operations around one main LLM call per chat turn.

Build a :class:`Runner` from a catalog, stores and a main LLM, then
``await runner.run(RunRequest(...))``. Executors decide where operations execute;
:class:`MainLlmRetry` how the main LLM call retries.
"""

from __future__ import annotations

from ._context import MainLlmRetry as MainLlmRetry
from ._executor import DEFAULT_CONCURRENCY as DEFAULT_CONCURRENCY
from ._executor import Executor as Executor
from ._executor import InProcessExecutor as InProcessExecutor
from ._executor import ThreadExecutor as ThreadExecutor
from ._runner import Runner as Runner
from ._runner import SystemClock as SystemClock
from ._runner import UuidIds as UuidIds
from ._stream import RunEvents as RunEvents

__all__ = [
    "DEFAULT_CONCURRENCY",
    "Executor",
    "InProcessExecutor",
    "MainLlmRetry",
    "RunEvents",
    "Runner",
    "SystemClock",
    "ThreadExecutor",
    "UuidIds",
]
