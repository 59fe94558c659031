"""Shared pytest configuration: Hypothesis profiles, asyncio and trio, the runner fixture."""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

from _support import make_runner
from opsrun.operations import OperationCatalog
from opsrun.runner import Runner
from opsrun.stores import InMemoryStores
from opsrun.testing import ScriptedMainLlm

# ``pytester`` runs a pytest inside a test (tests/stores/test_contract_without_stores.py).
pytest_plugins = ["pytester"]

# Property tests take their example counts from a profile, chosen with the environment
# variable OPSRUN_HYPOTHESIS_PROFILE: "dev" (the default) keeps the suite quick, "ci" tries
# more examples in an order fixed by each test (derandomized, no example database), so
# reruns of a CI job test the same cases. No deadline in either: timing is not a property.
settings.register_profile("dev", max_examples=50, deadline=None)
settings.register_profile(
    "ci", max_examples=200, deadline=None, derandomize=True, database=None, print_blob=True
)
settings.load_profile(os.environ.get("OPSRUN_HYPOTHESIS_PROFILE", "dev"))


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
