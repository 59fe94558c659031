"""A contract subclass that forgets to provide its stores fails with a clear message."""

from __future__ import annotations

import pytest

from opsrun.testing._contract import _branches

SUITE = """
from opsrun.testing import StoreContract


class TestForgotten(StoreContract):
    pass
"""


def test_a_subclass_without_the_stores_fixture_fails_clearly(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_forgotten=SUITE)
    # In this process: a pytest started in a new one spends seconds importing its plugins.
    done = pytester.runpytest_inprocess("-q", "-p", "no:cacheprovider", "-x", "-k", "asyncio")
    assert done.ret == 1
    assert "TestForgotten must override the `stores` fixture" in done.stdout.str()
    assert "NotImplementedError" not in done.stdout.str()


WAITING_STORE = """
import pytest

from opsrun.stores import InMemoryStores
from opsrun.stores.memory import InMemoryRunStore
from opsrun.testing import StoreContract


class AlwaysWaits(InMemoryRunStore):
    def hold_branch(self, chat_id, branch_id, *, wait=True):
        return super().hold_branch(chat_id, branch_id, wait=True)


class TestAlwaysWaits(StoreContract):
    @pytest.fixture
    async def stores(self):
        stores = InMemoryStores()
        stores.runs = AlwaysWaits()
        yield stores
"""


def test_a_store_that_waits_instead_of_refusing_fails_the_contract(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A held branch and ``wait=False``: the store that waits fails, it does not hang."""
    monkeypatch.setattr(_branches, "WAIT", 0.2)
    pytester.makepyfile(test_waits=WAITING_STORE)
    done = pytester.runpytest_inprocess(
        "-q", "-p", "no:cacheprovider", "-k", "refuses_a_holder_that_does_not_wait and asyncio"
    )
    assert done.ret == 1
    assert "hold_branch(wait=False) waited for a held branch" in done.stdout.str()
