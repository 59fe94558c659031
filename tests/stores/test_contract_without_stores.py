"""A contract subclass that forgets to provide its stores fails with a clear message."""

from __future__ import annotations

import pytest

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
