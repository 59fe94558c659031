"""Test doubles for opsrun users: offline main LLMs, aux LLM providers, a fake clock, ids,
and a file system that injects faults for the plan protocol's transactional apply.

Installing opsrun registers a pytest plugin (entry point ``opsrun``) with ready-made
fixtures such as ``opsrun_runner``, ``opsrun_provider`` and an ``opsrun_catalog`` that
already knows the built-in kinds ``llm`` and ``template``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._fake_anthropic import FakeAnthropicServer as FakeAnthropicServer
from ._fake_openai import FakeOpenAIServer as FakeOpenAIServer
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

if TYPE_CHECKING:
    from ._contract import StoreContract as StoreContract

__all__ = [
    "Delayed",
    "Exchange",
    "FakeAnthropicServer",
    "FakeClock",
    "FakeOpenAIServer",
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
    "StoreContract",
]


def __getattr__(name: str) -> Any:
    # The store contract is a pytest suite: import pytest and hypothesis only when asked.
    if name == "StoreContract":
        from ._contract import StoreContract

        return StoreContract
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
