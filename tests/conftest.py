"""Shared pytest configuration: async tests on asyncio and trio, the test runner fixture."""

from __future__ import annotations

import pytest

from _support import make_runner
from opsrun.operations import OperationCatalog
from opsrun.runner import Runner
from opsrun.stores import InMemoryStores
from opsrun.testing import ScriptedMainLlm


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Run every ``@pytest.mark.anyio`` test on both backends."""
    return str(request.param)


@pytest.fixture
def runner(
    opsrun_stores: InMemoryStores,
    opsrun_catalog: OperationCatalog,
    opsrun_main_llm: ScriptedMainLlm,
) -> Runner:
    """``make_runner`` over the plugin's stores, catalog (built-in kinds) and main LLM."""
    return make_runner(stores=opsrun_stores, catalog=opsrun_catalog, main_llm=opsrun_main_llm)
