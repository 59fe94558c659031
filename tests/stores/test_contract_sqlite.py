"""The SQLite stores pass the store contract, on a file and in a private in-memory database."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from opsrun.stores.sqlite import SqliteStores
from opsrun.testing import StoreContract


@pytest.fixture(scope="module")
def shared_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("shared") / "chat.db"


class TestSqliteStores(StoreContract):
    """On one file that every test shares, each test running twice (asyncio and trio):
    the contract may run against a database that already holds its own earlier records."""

    @pytest.fixture
    def stores(self, shared_file: Path) -> Iterator[SqliteStores]:
        with SqliteStores(shared_file) as stores:
            yield stores


class TestSqliteStoresInMemory(StoreContract):
    @pytest.fixture
    def stores(self) -> Iterator[SqliteStores]:
        with SqliteStores(":memory:") as stores:
            yield stores
