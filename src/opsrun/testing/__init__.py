"""Test doubles for opsrun users: offline main LLMs, aux LLM providers, a fake clock, ids,
and a file system that injects faults for the plan protocol's transactional apply.

Installing opsrun registers a pytest plugin (entry point ``opsrun``) with ready-made
fixtures such as ``opsrun_runner``, ``opsrun_provider`` and an ``opsrun_catalog`` that
already knows the built-in kinds ``llm`` and ``template``.
"""

from __future__ import annotations

from ._fakes import FakeClock as FakeClock
from ._fakes import SequentialIds as SequentialIds
from ._faulty_fs import FaultyFileSystem as FaultyFileSystem
from ._main_llm import FunctionMainLlm as FunctionMainLlm
from ._main_llm import OfflineMainLlm as OfflineMainLlm
from ._main_llm import ScriptedMainLlm as ScriptedMainLlm
from ._providers import Delayed as Delayed
from ._providers import Exchange as Exchange
from ._providers import FunctionProvider as FunctionProvider
from ._providers import ProviderReply as ProviderReply
from ._providers import RecordingProvider as RecordingProvider
from ._providers import ScriptedProvider as ScriptedProvider
from ._providers import StaticCredentials as StaticCredentials

__all__ = [
    "Delayed",
    "Exchange",
    "FakeClock",
    "FaultyFileSystem",
    "FunctionMainLlm",
    "FunctionProvider",
    "OfflineMainLlm",
    "ProviderReply",
    "RecordingProvider",
    "ScriptedMainLlm",
    "ScriptedProvider",
    "SequentialIds",
    "StaticCredentials",
]
