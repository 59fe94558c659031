"""The in-memory stores pass the store contract."""

from __future__ import annotations

import pytest

from opsrun.stores import InMemoryStores
from opsrun.testing import StoreContract


class TestInMemoryStores(StoreContract):
    @pytest.fixture
    def stores(self) -> InMemoryStores:
        return InMemoryStores()
