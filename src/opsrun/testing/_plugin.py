"""pytest plugin (entry point ``opsrun``): fixtures for testing profiles offline.

Fixtures: ``opsrun_stores``, ``opsrun_catalog``, ``opsrun_main_llm`` and
``opsrun_runner`` (a Runner wired to the three, with a fake clock and sequential ids).
"""

from __future__ import annotations

import pytest

from ..runner import OperationCatalog, Runner
from ..stores import InMemoryStores
from ._fakes import FakeClock, SequentialIds
from ._main_llm import ScriptedMainLlm


@pytest.fixture
def opsrun_stores() -> InMemoryStores:
    """Fresh in-memory stores."""
    return InMemoryStores()


@pytest.fixture
def opsrun_catalog() -> OperationCatalog:
    """An empty operation catalog to register the operations under test."""
    return OperationCatalog()


@pytest.fixture
def opsrun_main_llm() -> ScriptedMainLlm:
    """A scripted main LLM answering ``"OK"`` unless given replies."""
    return ScriptedMainLlm()


@pytest.fixture
def opsrun_runner(
    opsrun_stores: InMemoryStores,
    opsrun_catalog: OperationCatalog,
    opsrun_main_llm: ScriptedMainLlm,
) -> Runner:
    """A Runner over in-memory stores, the catalog fixture and the scripted main LLM."""
    return Runner(
        catalog=opsrun_catalog,
        profiles=opsrun_stores.profiles,
        sessions=opsrun_stores.sessions,
        chats=opsrun_stores.chats,
        runs=opsrun_stores.runs,
        main_llm=opsrun_main_llm,
        clock=FakeClock(),
        ids=SequentialIds(),
    )
