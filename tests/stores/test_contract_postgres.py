"""The PostgreSQL stores pass the store contract, each test in a schema of its own."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from _postgres_support import open_stores, postgres_for_module

from opsrun.stores.postgres import PostgresStores
from opsrun.testing import StoreContract

DSN = postgres_for_module()


class TestPostgresStores(StoreContract):
    @pytest.fixture
    async def stores(self) -> AsyncIterator[PostgresStores]:
        # A full pool from the start: a pool growing in its own threads draws from the
        # ``random`` module, which hypothesis takes for randomness inside a strategy.
        async with open_stores(DSN, min_size=4, max_size=4) as stores:
            yield stores
