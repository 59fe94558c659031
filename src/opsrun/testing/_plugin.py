"""pytest plugin (entry point ``opsrun``): fixtures for testing profiles offline.

Fixtures:

- ``opsrun_stores``: fresh in-memory stores.
- ``opsrun_provider``: a :class:`ScriptedProvider` registered as providerRef ``"test"``.
- ``opsrun_providers``: the :class:`~opsrun.providers.ProviderRegistry` holding it
  (register more providers on it in a test).
- ``opsrun_credentials``: a :class:`StaticCredentials` (add ``.secrets[ref] = ...``).
- ``opsrun_schemas``: a dict of JSON Schemas for ``output.schemaRef`` (add to it).
- ``opsrun_catalog``: an operation catalog with the built-in kinds ``llm`` and
  ``template`` wired to the fixtures above; add definitions or functions to it.
- ``opsrun_main_llm``: a scripted main LLM answering ``"OK"``.
- ``opsrun_runner``: a Runner wired to all of them, with a fake clock and sequential ids.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from ..kinds import builtin_kinds
from ..operations import OperationCatalog
from ..providers import ProviderRegistry
from ..runner import Runner
from ..stores import InMemoryStores
from ._fakes import FakeClock, SequentialIds
from ._main_llm import ScriptedMainLlm
from ._providers import ScriptedProvider, StaticCredentials


@pytest.fixture
def opsrun_stores() -> InMemoryStores:
    """Fresh in-memory stores."""
    return InMemoryStores()


@pytest.fixture
def opsrun_provider() -> Iterator[ScriptedProvider]:
    """A scripted aux LLM provider (providerRef ``"test"``) answering ``"OK"`` by default;
    with ``default = None``, a call that finds its queue empty fails the test."""
    provider = ScriptedProvider()
    yield provider
    _no_unexpected("aux LLM", provider.unexpected)


@pytest.fixture
def opsrun_providers(opsrun_provider: ScriptedProvider) -> ProviderRegistry:
    """A provider registry with ``opsrun_provider`` as ``"test"``."""
    return ProviderRegistry({"test": opsrun_provider})


@pytest.fixture
def opsrun_credentials() -> StaticCredentials:
    """Credentials for ``credentialRef``; empty until a test adds secrets."""
    return StaticCredentials()


@pytest.fixture
def opsrun_schemas() -> dict[str, Any]:
    """JSON Schemas by name for ``output.schemaRef``; empty until a test adds some."""
    return {}


@pytest.fixture
def opsrun_catalog(
    opsrun_providers: ProviderRegistry,
    opsrun_credentials: StaticCredentials,
    opsrun_schemas: dict[str, Any],
) -> OperationCatalog:
    """A catalog with the built-in kinds ``llm`` and ``template`` and no operations yet."""
    return OperationCatalog(
        kinds=builtin_kinds(
            providers=opsrun_providers, credentials=opsrun_credentials, schemas=opsrun_schemas
        )
    )


@pytest.fixture
def opsrun_main_llm() -> Iterator[ScriptedMainLlm]:
    """A scripted main LLM answering ``"OK"`` unless given replies; with
    ``default = None``, a call that finds its queue empty fails the test."""
    main_llm = ScriptedMainLlm()
    yield main_llm
    _no_unexpected("main LLM", main_llm.unexpected)


@pytest.fixture
def opsrun_runner(
    opsrun_stores: InMemoryStores,
    opsrun_catalog: OperationCatalog,
    opsrun_main_llm: ScriptedMainLlm,
) -> Runner:
    """A Runner over in-memory stores, the catalog fixture and the scripted main LLM."""
    return Runner(
        catalog=opsrun_catalog,
        stores=opsrun_stores,
        main_llm=opsrun_main_llm,
        clock=FakeClock(),
        ids=SequentialIds(),
    )


def _no_unexpected(what: str, unexpected: list[Any]) -> None:
    """Fail the test (at teardown) when a scripted double was called past its queue."""
    if unexpected:
        pytest.fail(
            f"{len(unexpected)} unexpected {what} call(s): the queue was empty and default is None",
            pytrace=False,
        )
